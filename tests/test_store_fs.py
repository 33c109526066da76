"""Store mode from the file system: SWMR on local disks, per-step files without locking on NFS/Lustre/..."""

import os
import warnings

import numpy as np
import pytest

from engines.store import (
    Column,
    StoreError,
    StoreReader,
    StoreWarning,
    StoreWriter,
    TableSpec,
    filesystem_type,
    resolve_mode,
)
from engines.store import fs as store_fs

TABLE = TableSpec("t", (Column("step", "int64"), Column("name", "str")))

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 27 0:45 / /mnt/shared\\040data rw,relatime shared:5 - nfs4 server:/export rw,vers=4.2
32 31 0:46 / /mnt/shared\\040data/local rw,relatime - xfs /dev/vdb rw
33 27 0:47 / /lustre rw - lustre 10.0.0.1@tcp:/fs rw
"""

MOUNTS = """\
/dev/vda / ext4 rw 0 0
server:/export /data nfs rw,vers=3 0 0
"""


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.delenv("PROBE_TUI_STORE_MODE", raising=False)
    store_fs._reset_warnings_for_tests()
    yield
    store_fs._reset_warnings_for_tests()


def test_filesystem_of_a_path_is_its_longest_mount_point(tmp_path):
    info = (MOUNTINFO, "mountinfo")
    assert filesystem_type("/mnt/shared data/run1/rank0", info) == "nfs4"  # escaped space in the mount point
    assert filesystem_type("/mnt/shared data/local/x", info) == "xfs"  # a local disk mounted inside NFS
    assert filesystem_type("/lustre/project/run", info) == "lustre"
    assert filesystem_type("/lustreish/run", info) == "ext4"  # a prefix of the name is not a parent folder
    assert filesystem_type("/home/u/run", info) == "ext4"
    assert filesystem_type("/data/runs/x", (MOUNTS, "mounts")) == "nfs"
    assert filesystem_type(tmp_path) != ""  # this machine's own table is readable


def _nfs_detector(path):
    return "nfs4"


def test_network_fs_falls_back_to_per_step_files_and_warns_once(tmp_path):
    fake = f"27 1 254:0 / / rw - ext4 /dev/vda rw\n40 27 0:50 / {os.path.realpath(tmp_path)} rw - nfs4 srv:/x rw\n"

    def detector(path):
        return filesystem_type(path, (fake, "mountinfo"))

    with pytest.warns(StoreWarning, match="nfs4") as caught:
        w0 = StoreWriter(tmp_path / "rank0", "dump", [TABLE], meta={}, detector=detector)
    assert len([w for w in caught if issubclass(w.category, StoreWarning)]) == 1
    assert (w0.mode, w0.network_fs) == ("per_step", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second writer (another rank, another kind) does not warn again
        w1 = StoreWriter(tmp_path / "rank1", "dump", [TABLE], meta={}, detector=detector)
    for step in range(3):
        for w in (w0, w1):
            w.append("t", step=step, name=[f"op{i}" for i in range(5)])
            if step == 2:
                # files on the network fs are opened with HDF5 file locking off
                assert w._open_segment().file.id.get_access_plist().get_file_locking()[0] == 0
            w.commit(step)
    w0.close()
    w1.close()
    assert sorted(p.name for p in (tmp_path / "rank0").iterdir()) == [
        "dump-s0.h5", "dump-s1.h5", "dump-s2.h5", "segments.jsonl"]
    r = StoreReader(tmp_path / "rank1")
    assert r.mode == "per_step" and r.steps() == [0, 1, 2]
    assert list(r.read("t", steps=[2])["name"]) == [f"op{i}" for i in range(5)]


def test_local_fs_uses_swmr_with_locking(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = StoreWriter(tmp_path, "dump", [TABLE], meta={}, detector=lambda p: "ext4")
    assert w.mode == "swmr" and w._segment.file.id.get_access_plist().get_file_locking()[0] == 1
    assert w._segment.file.swmr_mode
    w.close()
    assert (tmp_path / "dump.h5").exists()


def test_environment_and_config_override_detection(tmp_path, monkeypatch):
    assert resolve_mode(tmp_path, "per_step", _local) == ("per_step", False)
    monkeypatch.setenv("PROBE_TUI_STORE_MODE", "per_step")
    assert resolve_mode(tmp_path, "swmr", _local) == ("per_step", False)  # the environment wins over config
    monkeypatch.setenv("PROBE_TUI_STORE_MODE", "swmr")
    with pytest.warns(StoreWarning, match="not supported on network"):
        assert resolve_mode(tmp_path, "auto", _nfs_detector) == ("swmr", True)
    monkeypatch.setenv("PROBE_TUI_STORE_MODE", "fast")
    with pytest.raises(StoreError, match="PROBE_TUI_STORE_MODE='fast'"):
        resolve_mode(tmp_path, "auto", _local)
    monkeypatch.delenv("PROBE_TUI_STORE_MODE")
    with pytest.raises(StoreError, match="output.store_mode 'single'"):
        resolve_mode(tmp_path, "single", _local)


def _local(path):
    return "ext4"


def test_per_step_store_on_nfs_is_read_without_locking(tmp_path, monkeypatch):
    with StoreWriter(tmp_path, "dump", [TABLE], meta={}, mode="per_step") as w:
        w.append("t", step=0, name=["a", "b"])
        w.commit(0)
    monkeypatch.setattr("engines.store.reader.filesystem_type", _nfs_detector)
    r = StoreReader(tmp_path)
    assert r._files.locking is False
    assert list(r.read("t")["name"]) == ["a", "b"]
    f = r._files.file(0)
    assert f.id.get_access_plist().get_file_locking()[0] == 0
    assert np.array_equal(r.read("t")["step"], [0, 0])
