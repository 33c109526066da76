"""overflow_check: find the calls whose tensors hold inf or NaN, say where the first one came from, keep their
tensors for replay (``analyze``). Framework-neutral; the PyTorch side is ``engines.adapters.torch.overflow_*``."""
