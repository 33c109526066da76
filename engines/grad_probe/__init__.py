"""grad_probe: per optimizer step and parameter, gradient statistics, packed directions and histograms.

Framework-neutral parts live here (levels, the store layout, the reader, msprobe's CSV export); the torch hook
that computes the statistics on the device is ``engines.adapters.torch.grad_probe``.
"""
