"""grad compare: two grad_probe dumps -> direction similarity per parameter and step, the 0.97 / 0.03 rule
applied, and the layer-wise gradient-norm ratio view. Framework-free (numpy, h5py; matplotlib for charts)."""
