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


_LEVEL_DEMOS = {"pytorch": {"preset": "tiny", "steps": 1}, "mindspore": {"preset": "tiny", "steps": 2}}


@pytest.fixture(scope="session")
def demo_level_dumps(tmp_path_factory):
    """``get(framework) -> {level: (Dump, summary, DemoResult)}``: the tiny demo captured at L0, L1 and mix, made
    once per session and shared by test_capture_levels, test_mindspore_levels and test_capture_frameworks."""
    made = {}

    def get(framework):
        if framework not in made:
            if framework == "pytorch":
                from test_capture_support import run_demo
            else:
                from test_mindspore_support import run_demo
            made[framework] = {level: run_demo(tmp_path_factory.mktemp("%s_%s" % (framework, level)),
                                               _LEVEL_DEMOS[framework], level=level) for level in ("L0", "L1", "mix")}
        return made[framework]

    return get
