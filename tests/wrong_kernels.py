"""A kernel under test that is slightly wrong: a TorchDispatchMode returning one aten op's result off by one part
in a thousand (optionally only in one dtype). Entered around a run, it stands in for a bad device kernel; a
reference run with every dispatch mode disabled (or on another process) gets the right one."""

from torch.utils._python_dispatch import TorchDispatchMode


class SlightlyWrongKernel(TorchDispatchMode):
    def __init__(self, op, dtype=None):
        super().__init__()
        self.op, self.dtype = op, dtype

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is self.op and (self.dtype is None or out.dtype == self.dtype):
            out = out * (1 + 1e-3)
        return out
