"""Suite-wide settings. pytest-xdist runs two workers on two cores: one math thread each keeps them apart."""

import contextlib
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@contextlib.contextmanager
def _torch_threads_pinned():
    """torch's intra-op threads set to 1 inside, the caller's count restored after; nothing when torch is absent.

    Two cores are shared with other jobs: torch's spinning worker threads make demo steps 10x slower. MindSpore has
    no equivalent to pin per test: its CPU kernel thread count can be set only once per process.
    """
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_torch_thread():
    """One torch thread during the test. Modules that run torch ask for it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")`` (not autouse: importing torch in every test would
    hide what the layering tests check and cost a second per worker)."""
    with _torch_threads_pinned():
        yield


@pytest.fixture(scope="module")
def one_torch_thread_for_module():
    """The same for a module-scoped fixture that runs torch (a function-scoped fixture cannot be asked for there)."""
    with _torch_threads_pinned():
        yield
