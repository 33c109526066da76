"""acc_check's configurable reference (``acc_check.reference``: dtype policy and device) end to end on the demo:
the rows and the store name the reference used, the injected fault is still the only failure against a float32
reference, and a device that cannot run here is one line, exit 2, nothing written."""

import csv

import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch import acc_replay  # noqa: E402
from engines.events import NullSink  # noqa: E402
from engines.runner import run_job  # noqa: E402
from engines.store import StoreReader  # noqa: E402
from schemas import ConfigError, load_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _default_reference():
    """The replay module's reference is process state: every test starts and ends on the default."""
    acc_replay.configure_reference("auto", "cpu")
    yield
    acc_replay.configure_reference("auto", "cpu")


@pytest.fixture(scope="module")
def lowp_dump(tmp_path_factory, one_torch_thread_for_module):
    folder = tmp_path_factory.mktemp("lowp")
    job = load_config({"task": "tensor", "dump_path": str(folder), "level": "L1",
                       "target": {"demo": {"preset": "tiny", "steps": 1, "dtype": "fp32",
                                           "faults": {"lowp_softmax": {"layer": 1}}}},
                       "tensor": {"data_mode": ["all"], "summary_mode": "statistics"}})
    assert run_job(job, events=NullSink()).exit_code == 0
    return folder / "latest"


def _check(dump, out, **section):
    job = load_config({"task": "acc_check", "acc_check": {"path": str(dump), "output_path": str(out), **section}})
    return run_job(job, events=NullSink(), fail_on_findings=True)


def _details(out):
    (path,) = out.glob("accuracy_checking_details_*.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _failing(out):
    (path,) = out.glob("accuracy_checking_result_*.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r["API name"] for r in rows if "error" in (r["Forward Test Success"], r["Backward Test Success"])]


def _store_meta(out):
    reader = StoreReader(out, "acc_check")
    try:
        return dict(reader.meta["run_meta"])
    finally:
        reader.close()


def test_float32_reference_is_used_named_and_still_finds_only_the_fault(lowp_dump, tmp_path):
    outcome = _check(lowp_dump, tmp_path / "f32", reference={"dtype": "float32"})
    assert outcome.exit_code == 3
    assert _failing(tmp_path / "f32") == ["Demo.naive_softmax.0"]
    floating = [r for r in _details(tmp_path / "f32") if r["Bench Dtype"].startswith("torch.float")]
    assert floating and {r["Bench Dtype"] for r in floating} == {"torch.float32"}
    meta = _store_meta(tmp_path / "f32")
    assert (meta["reference"], meta["reference_dtype"]) == ("cpu", "float32")


def test_default_reference_is_float64_for_float32_inputs(lowp_dump, tmp_path):
    assert _check(lowp_dump, tmp_path / "auto", api_list=["linear"]).exit_code == 0
    rows = _details(tmp_path / "auto")
    assert rows and {r["Bench Dtype"] for r in rows} == {"torch.float64"}
    assert _store_meta(tmp_path / "auto")["reference_dtype"] == "auto"


def test_cli_flags_set_the_reference(lowp_dump, tmp_path, capsys):
    from probe_tui.cli import main

    code = main(["acc-check", str(lowp_dump), "-o", str(tmp_path / "cli"), "--api", "linear",
                 "--reference-dtype", "float32", "--reference-device", "cpu"])
    assert code == 0, capsys.readouterr().err
    assert {r["Bench Dtype"] for r in _details(tmp_path / "cli")} == {"torch.float32"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: cuda:7 may exist")
@pytest.mark.parametrize("device", ["cuda:7", "not-a-device", "meta"])
def test_a_device_that_cannot_run_here_is_one_line_exit_2_nothing_written(lowp_dump, tmp_path, capsys, device):
    from probe_tui.cli import main

    out = tmp_path / "out"
    assert main(["acc-check", str(lowp_dump), "-o", str(out), "--reference-device", device]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acc_check.reference.device" in err[0] and device in err[0], err
    assert not out.exists()


def test_a_bad_reference_dtype_names_the_field(lowp_dump):
    with pytest.raises(ConfigError, match=r"acc_check\.reference\.dtype"):
        load_config({"task": "acc_check", "acc_check": {"path": str(lowp_dump), "reference": {"dtype": "float16"}}})
