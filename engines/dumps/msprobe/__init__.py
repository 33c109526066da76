"""Reading msprobe dumps (dump.json + stack.json + construct.json + dump_tensor_data/) without msprobe.

Nothing here unpickles: ``.npy`` files load with ``allow_pickle=False``; ``.pt`` files go through
``engines.adapters.torch.ptload`` (``torch.load(weights_only=True)``, loaded by name) and only when torch is installed.
"""
