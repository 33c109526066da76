"""The native CRC32 kernel (engines/native/crc32.c, decision 28 "CRC32"): zlib's value for every length, start
address, starting value, method and thread count; the self-check that keeps a wrong build out; the fallback to
zlib; and the capture's md5 column (msprobe's CRC32) equal to zlib.crc32 of each tensor's bytes."""

import ctypes
import logging
import random
import subprocess
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_capture_support import TINY, make_session, run_demo

from engines.adapters.torch import entries as torch_entries
from engines.adapters.torch.entries import TensorEntries
from engines.capture.options import CaptureOptions
from engines.capture.records import VALID_CRC32
from engines.capture.summary import CaptureSummary
from engines.native import build
from engines.native import crc32 as nc

RNG = np.random.default_rng(21)
DATA = RNG.integers(0, 256, size=3 << 20, dtype=np.uint8)
BASE = DATA.__array_interface__["data"][0]


@pytest.fixture(scope="module")
def kernel() -> nc.NativeCrc32:
    k = nc.kernel()
    assert k is not None, "the native CRC32 kernel is not in use here (a C compiler and a CPU with PCLMULQDQ are " \
                          "part of the test setup)"
    return k


def methods(k: nc.NativeCrc32):
    return list(range(k.method + 1))


def test_check_value_and_empty(kernel):
    assert nc.crc32(b"123456789") == 0xCBF43926 == zlib.crc32(b"123456789")
    assert nc.crc32(b"") == 0 and nc.crc32(b"", 1234) == 1234 == zlib.crc32(b"", 1234)
    for m in methods(kernel):
        assert kernel.fn_with(0, BASE, 0, m) == 0


def test_every_method_matches_zlib_for_random_lengths_and_offsets(kernel):
    rnd = random.Random(5)
    cases = [(n, rnd.randrange(64)) for n in range(0, 700)] + \
        [(rnd.randrange(5000), rnd.randrange(64)) for _ in range(400)]
    for m in methods(kernel):
        bad = []
        for i, (n, off) in enumerate(cases):
            start = (0, 0xFFFFFFFF, rnd.getrandbits(32))[i % 3]
            want = zlib.crc32(DATA[off:off + n], start)
            if kernel.fn_with(start, BASE + off, n, m) != want:
                bad.append((n, off, start))
        assert not bad, (nc.METHOD_NAMES[m], bad[:5])


@pytest.mark.parametrize("n", [(1 << 20) - 1, 1 << 20, (3 << 20) - 77])
def test_large_buffers_and_threads(kernel, n):
    off = n % 7
    want = zlib.crc32(DATA[off:off + n])
    for m in methods(kernel):
        assert kernel.fn_with(0, BASE + off, n, m) == want, nc.METHOD_NAMES[m]
    for threads in (2, 3, 5, 64, 100):
        assert kernel.fn_threads(0, BASE + off, n, threads) == want, threads
    assert nc.crc32_at(BASE + off, n, 0, 4) == want


def test_combine_matches_zlib(kernel):
    a, b = DATA[:1000].tobytes(), DATA[1000:5123].tobytes()
    assert kernel.combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    assert kernel.combine(zlib.crc32(a), zlib.crc32(b""), 0) == zlib.crc32(a)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=3000), offset=st.integers(0, 63), start=st.integers(0, 0xFFFFFFFF),
       method=st.integers(0, 3))
def test_property_any_bytes_any_alignment(data, offset, start, method):
    k = nc.kernel()
    assert k is not None
    buf = np.zeros(len(data) + 64, dtype=np.uint8)
    buf[offset:offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
    got = k.fn_with(start, buf.__array_interface__["data"][0] + offset, len(data), method)
    assert got == zlib.crc32(data, start)


def test_python_entry_points_take_any_buffer(kernel):
    arr = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert nc.crc32(arr) == zlib.crc32(arr.tobytes())
    assert nc.crc32(memoryview(arr.tobytes())) == zlib.crc32(arr.tobytes())
    assert nc.crc32(np.array([True, False, True])) == zlib.crc32(b"\x01\x00\x01")
    with pytest.raises(BufferError):
        nc.crc32(arr[:, :, ::2])


# -- a wrong kernel stays out ------------------------------------------------------------------------------------

def _build_variant(folder, *defines):
    path = folder / "crc32-variant.so"
    src = [s for s in build.SOURCES if s.name == "crc32.c"]
    subprocess.run([build.compiler(), *build.FLAGS, *defines, "-o", str(path), *map(str, src)], check=True)
    return ctypes.CDLL(str(path))


@pytest.fixture
def fresh_state():
    nc.reset()
    yield
    nc.reset()


def test_a_kernel_giving_a_wrong_value_fails_its_check_and_zlib_is_used(tmp_path, monkeypatch, caplog,
                                                                         fresh_state):
    wrong = _build_variant(tmp_path, "-DPOLY=0xEDB88321u")  # one bit off the polynomial
    with pytest.raises(RuntimeError, match="self-check failed"):
        nc.self_check(nc.NativeCrc32(wrong))
    monkeypatch.setattr(build, "load", lambda: wrong)
    with caplog.at_level(logging.WARNING, logger="engines.native"):
        assert nc.kernel() is None
        assert nc.crc32(DATA[:5000]) == zlib.crc32(DATA[:5000])
        assert nc.crc32_at(BASE + 3, 100000) == zlib.crc32(DATA[3:100003])
        assert nc.method_name() == "zlib"
    lines = [r.getMessage() for r in caplog.records if "CRC32" in r.getMessage()]
    assert len(lines) == 1 and "CRC32 by zlib" in lines[0] and "self-check failed" in lines[0]


def test_without_the_library_zlib_is_used(monkeypatch, caplog, fresh_state):
    monkeypatch.setattr(build, "load", lambda: None)
    with caplog.at_level(logging.INFO, logger="engines.native"):
        assert nc.kernel() is None
        assert nc.kernel() is None  # decided once: one line
    assert [r.getMessage() for r in caplog.records] == ["native CRC32 kernel: no native library; CRC32 by zlib"]
    assert nc.crc32(b"123456789", 7) == zlib.crc32(b"123456789", 7)
    assert nc.crc32_at(BASE, 0, 99) == 99 and nc.crc32_at(BASE, 4096) == zlib.crc32(DATA[:4096])


def test_a_cpu_without_carry_less_multiply_uses_zlib(tmp_path, monkeypatch, caplog, fresh_state):
    tables = _build_variant(tmp_path, "-DPT_CRC_NO_CLMUL")
    k = nc.NativeCrc32(tables)
    assert k.method == nc.TABLES
    nc.self_check(k)  # the byte tables are right, only slower than zlib
    monkeypatch.setattr(build, "load", lambda: tables)
    with caplog.at_level(logging.INFO, logger="engines.native"):
        assert nc.kernel() is None
    assert any("no carry-less multiply" in r.getMessage() for r in caplog.records)


# -- the capture's md5 column --------------------------------------------------------------------------------------

def _bytes(t: torch.Tensor) -> bytes:
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    if t.dtype is torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def _tensors():
    torch.manual_seed(4)
    big = torch.randn(300, 257)  # > 64 KiB
    return {
        "small": torch.randn(7, 3),
        "big": big,
        "transposed": big.t(),  # not contiguous: hashed in C order, as msprobe's contiguous copy
        "offset": big[5:],  # starts inside its storage
        "bf16": torch.randn(20000).to(torch.bfloat16),
        "half": torch.randn(33).half(),
        "bool": torch.rand(1001) > 0.5,
        "int64": torch.arange(-50, 9000),
        "zero_d": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "complex": torch.randn(40, dtype=torch.complex64),
        "conj": torch.randn(40, dtype=torch.complex64).conj(),
        "neg": torch.randn(4, 5, dtype=torch.complex64).conj().imag,
    }


@pytest.mark.parametrize("batched", [False, True], ids=["cpu", "batched"])
def test_md5_mode_records_zlib_crc32_of_each_tensor(batched):
    entries = TensorEntries(CaptureOptions(summary_mode="md5"), CaptureSummary(), force_batched=batched)
    tensors = _tensors()
    ids = {k: entries.entry(t) for k, t in tensors.items()}
    cols = entries.finish()
    entries.close()
    for k, t in tensors.items():
        e = ids[k]
        assert cols.valid[e] & VALID_CRC32, k
        assert cols.crc32[e] == zlib.crc32(_bytes(t)), k


def test_md5_mode_hashes_cpu_tensors_in_place_without_a_copy(monkeypatch, kernel):
    """The kernel reads the tensor's own memory at capture time: no private copy (which cost more than the CRC),
    and a write after capture does not change the recorded value."""
    def no_copy(t):
        raise AssertionError("a host copy was made for %s" % (tuple(t.shape),))

    monkeypatch.setattr(torch_entries, "host_copy", no_copy)
    entries = TensorEntries(CaptureOptions(summary_mode="md5"), CaptureSummary())
    t = torch.randn(512, 300)
    want = zlib.crc32(t.numpy().tobytes())
    e = entries.entry(t)
    t.add_(1.0)  # the training loop moves on before the step ends
    cols = entries.finish()
    entries.close()
    assert cols.crc32[e] == want


def test_demo_md5_column_equals_zlib_crc32_of_the_dumped_tensors(tmp_path):
    """Every row of a demo run's md5 dump against zlib.crc32 of the same tensor from a tensor dump of the same
    (deterministic) run."""
    knobs = dict(TINY, steps=1)
    hashed, _, _ = run_demo(tmp_path / "md5", knobs, level="L1", summary_mode="md5")
    full, _, _ = run_demo(tmp_path / "tensor", knobs, level="L1", task="tensor")
    names = hashed.names(0)
    assert names == full.names(0)
    checked = big = 0
    for name in names:
        rows, full_rows = hashed.rows(name), full.rows(name)
        for slot, row in rows.items():
            ref = full_rows[slot]
            if not ref["pool"]:
                continue
            data = full.reader.tensor_data(int(ref["row"]))
            assert int(row["crc32"]) == zlib.crc32(np.ascontiguousarray(data).tobytes()), (name, slot)
            checked += 1
            big += data.nbytes > torch_entries.INLINE_HASH_BYTES
    assert checked > 100 and big > 5


def test_session_md5_rows(tmp_path):
    s = make_session(tmp_path, level="L1", summary_mode="md5")
    a, b = torch.randn(300, 64), torch.randn(64, 100)
    s.start()
    out = torch.matmul(a, b)
    s.step_end()
    s.close()
    from test_capture_support import Dump

    rows = Dump(tmp_path / "rank0").rows("Torch.matmul.0.forward")
    assert rows["input.0"]["crc32"] == zlib.crc32(a.numpy().tobytes())
    assert rows["output.0"]["crc32"] == zlib.crc32(out.numpy().tobytes())


def test_md5_mode_hashes_a_large_tensor_on_torchs_threads(monkeypatch, kernel):
    calls = []
    monkeypatch.setattr(torch_entries, "_num_threads", lambda: 3)
    entries = TensorEntries(CaptureOptions(summary_mode="md5"), CaptureSummary())
    entries._crc = _Spy(kernel, calls)
    assert (entries._crc_at is not None) == (nc.fast_at() is not None)
    t = torch.randn((nc.THREADS_FROM >> 2) + 1001)
    e = entries.entry(t)
    s = torch.randn(1000)
    small = entries.entry(s)
    cols = entries.finish()
    entries.close()
    # torch's thread count for the large tensor; the small one on one thread, by the fast path's C call where it
    # is built (no ctypes call: not seen by the spy), else by the kernel's one-thread call
    assert calls == ([3] if entries._crc_at is not None else [3, 1])
    assert cols.crc32[e] == zlib.crc32(t.numpy().tobytes()) and cols.crc32[small] == zlib.crc32(s.numpy().tobytes())


class _Spy:
    def __init__(self, kernel, calls):
        self.kernel, self.calls = kernel, calls

    def at(self, ptr, nbytes, value=0, threads=1):
        self.calls.append(threads)
        return self.kernel.at(ptr, nbytes, value, threads)
