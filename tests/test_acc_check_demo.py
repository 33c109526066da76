"""acc_check end to end on the demo: the fp32 tensor dump passes; an injected low-precision softmax and a kernel
swapped for a slightly wrong one (a TorchDispatchMode) fail, and only they; a resumed check equals an
uninterrupted one; calls that cannot replay are listed with the reason."""

import csv
import json

import pytest

torch = pytest.importorskip("torch")

from engines.acc_check import engine as acc_engine  # noqa: E402
from engines.acc_check import results as rs  # noqa: E402
from engines.events import ListSink, NullSink  # noqa: E402
from engines.runner import JobError, run_job  # noqa: E402
from schemas import load_config  # noqa: E402
from tests.wrong_kernels import SlightlyWrongKernel  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tensor_dump(folder, faults=None, steps=1):
    demo = {"preset": "tiny", "steps": steps, "dtype": "fp32"}
    if faults:
        demo["faults"] = faults
    job = load_config({"task": "tensor", "dump_path": str(folder), "target": {"demo": demo}, "level": "L1",
                       "tensor": {"data_mode": ["all"], "summary_mode": "statistics"}})
    assert run_job(job, events=NullSink()).exit_code == 0
    return folder / "latest"


def _check(dump, out, events=None, **section):
    job = load_config({"task": "acc_check", "acc_check": {"path": str(dump), "output_path": str(out), **section}})
    return run_job(job, events=events or NullSink(), fail_on_findings=True)


def _results(out):
    (path,) = out.glob("accuracy_checking_result_*.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def fp32_dump(tmp_path_factory, one_torch_thread_for_module):
    return _tensor_dump(tmp_path_factory.mktemp("fp32"))


def test_fp32_demo_dump_has_no_false_positive(fp32_dump, tmp_path):
    events = ListSink()
    outcome = _check(fp32_dump, tmp_path / "out", events)
    assert outcome.exit_code == 0, outcome.summary["verdict"]
    rows = _results(tmp_path / "out")
    assert len(rows) == outcome.summary["checked"] > 100
    bad = [r for r in rows if {r["Forward Test Success"], r["Backward Test Success"]} & {"error", "warning"}]
    assert bad == []
    # forward and backward were both replayed (the dump keeps the gradients)
    linear = next(r for r in rows if r["API name"] == "Functional.linear.0")
    assert (linear["Forward Test Success"], linear["Backward Test Success"]) == ("pass", "pass")
    steps = [e for e in events.events if e.kind == "step"]
    assert steps and steps[-1]["unit"] == "api" and steps[-1]["step"] + 1 == steps[-1]["total_steps"] == len(rows)
    # the details CSV has msprobe's columns and one row per output
    (details,) = (tmp_path / "out").glob("accuracy_checking_details_*.csv")
    with open(details, newline="", encoding="utf-8") as fh:
        table = list(csv.reader(fh))
    assert tuple(table[0]) == rs.DETAILS_COLUMNS
    assert "Functional.linear.0.backward.output.1" in {r[0] for r in table[1:]}
    # and the HDF5 store holds the same
    apis, outputs = rs.read_result(tmp_path / "out")
    assert [a["name"] for a in apis] == [r["API name"] for r in rows]
    assert len(outputs) == len(table) - 1


def test_injected_low_precision_softmax_is_the_only_failure(tmp_path):
    dump = _tensor_dump(tmp_path / "dump", {"lowp_softmax": {"layer": 1}})
    outcome = _check(dump, tmp_path / "out")
    assert outcome.exit_code == 3
    rows = _results(tmp_path / "out")
    failing = [r["API name"] for r in rows if "error" in (r["Forward Test Success"], r["Backward Test Success"])]
    assert failing == ["Demo.naive_softmax.0"]
    others = {r["Forward Test Success"] for r in rows if r["API name"] != "Demo.naive_softmax.0"}
    assert others <= {"pass", "SKIP"}
    # the bf16 casts around the fault are listed as not replayed, with the reason, never passed silently
    casts = [r for r in rows if r["API name"].startswith("Tensor.to.")]
    assert casts and all(r["Forward Test Success"] == "SKIP" and "not a computation" in r["Message"] for r in casts)
    assert "ULP" in outcome.summary["failing"][0]["message"]


def test_kernel_swapped_by_a_dispatch_mode_is_the_only_failure(tmp_path):
    with SlightlyWrongKernel(torch.ops.aten.gelu.default):
        dump = _tensor_dump(tmp_path / "dump")
    outcome = _check(dump, tmp_path / "out")
    rows = _results(tmp_path / "out")
    failing = sorted(r["API name"] for r in rows if "error" in (r["Forward Test Success"],
                                                                  r["Backward Test Success"]))
    assert failing == ["Functional.gelu.0", "Functional.gelu.1"]
    gelu = next(r for r in rows if r["API name"] == "Functional.gelu.0")
    assert gelu["Forward Test Success"] == "error" and gelu["Backward Test Success"] == "pass"
    assert {r["Forward Test Success"] for r in rows if not r["API name"].startswith("Functional.gelu")} == {"pass"}
    assert outcome.exit_code == 3


def test_resumed_check_equals_an_uninterrupted_one(fp32_dump, tmp_path, monkeypatch):
    assert _check(fp32_dump, tmp_path / "whole").exit_code == 0

    def stop_after(count):
        if count == 40:
            raise KeyboardInterrupt

    monkeypatch.setattr(acc_engine, "_after_api", stop_after)
    stopped = _check(fp32_dump, tmp_path / "resumed")
    assert stopped.status == "stopped"
    assert len(_results(tmp_path / "resumed")) == 40
    monkeypatch.setattr(acc_engine, "_after_api", lambda count: None)
    events = ListSink()
    assert _check(fp32_dump, tmp_path / "resumed", events).exit_code == 0
    assert any("resuming" in e["text"] for e in events.events if e.kind == "message")
    assert _results(tmp_path / "resumed") == _results(tmp_path / "whole")
    (a,) = (tmp_path / "whole").glob("accuracy_checking_details_*.csv")
    (b,) = (tmp_path / "resumed").glob("accuracy_checking_details_*.csv")
    assert a.read_text(encoding="utf-8") == b.read_text(encoding="utf-8")
    assert json.dumps(rs.read_result(tmp_path / "whole")) == json.dumps(rs.read_result(tmp_path / "resumed"))
    # a finished check is not run again into the same folder
    with pytest.raises(JobError, match="holds a finished check"):
        _check(fp32_dump, tmp_path / "resumed")


def test_statistics_dump_replays_from_generated_inputs(tmp_path):
    job = load_config({"task": "statistics", "dump_path": str(tmp_path / "dump"),
                       "target": {"demo": {"preset": "tiny", "steps": 1, "faults": {"lowp_softmax": {"layer": 1}}}},
                       "level": "L1", "statistics": {"data_mode": ["forward"]}})
    run_job(job, events=NullSink())
    dump = tmp_path / "dump" / "latest"
    outcome = _check(dump, tmp_path / "out", api_list=["naive_softmax", "softmax", "linear", "layer_norm"])
    rows = {r["API name"]: r for r in _results(tmp_path / "out")}
    # generated inputs run on this machine as recorded: the bf16 softmax kernel still shows, the rest passes
    assert rows["Demo.naive_softmax.0"]["Forward Test Success"] == "error"
    assert {r["Forward Test Success"] for n, r in rows.items() if n != "Demo.naive_softmax.0"} == {"pass"}
    (details,) = (tmp_path / "out").glob("accuracy_checking_details_*.csv")
    with open(details, newline="", encoding="utf-8") as fh:
        messages = [r["Message"] for r in csv.DictReader(fh)]
    assert messages and all(m.startswith("inputs generated from the statistics (seed 1234)") for m in messages)
    assert outcome.exit_code == 3
    # seeded: a second check generates the same inputs
    _check(dump, tmp_path / "again", api_list=["naive_softmax", "softmax", "linear", "layer_norm"])
    (again,) = (tmp_path / "again").glob("accuracy_checking_details_*.csv")
    assert again.read_text(encoding="utf-8") == details.read_text(encoding="utf-8")
    # generate off: every call listed as not replayed, with the reason
    _check(dump, tmp_path / "off", generate=False)
    off = _results(tmp_path / "off")
    assert off and {r["Forward Test Success"] for r in off} == {"SKIP"}
    assert all("tensors not saved" in r["Message"] or "not a computation" in r["Message"] for r in off)


def test_bad_dump_path_is_one_line_exit_2(tmp_path, capsys):
    from probe_tui.cli import main

    assert main(["acc-check", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acc_check.path" in err[0] and "no such file" in err[0]
    assert not json.dumps(err).count("Traceback")


def test_real_msprobe_tensor_dump_replays_forward_from_its_rows(tmp_path):
    """A real msprobe 26.2 dump (no args JSON: the arguments come from its rows, the tensors from its .pt files)."""
    from pathlib import Path

    dump = Path(__file__).resolve().parent / "data" / "msprobe" / "real" / "tensor_mix"
    outcome = _check(dump, tmp_path / "out")
    rows = {r["API name"]: r for r in _results(tmp_path / "out")}
    assert {"Functional.linear.0", "Functional.relu.0", "Torch.softmax.0", "Functional.cross_entropy.0",
            "Tensor.add_.0"} <= set(rows)
    assert {r["Forward Test Success"] for r in rows.values()} == {"pass"}
    # its backward records keep the inner kernels' gradients: listed, not judged
    assert rows["Functional.cross_entropy.0"]["Backward Test Success"] == "SKIP"
    assert "inner kernels" in rows["Functional.cross_entropy.0"]["Message"]
    assert outcome.exit_code == 0


def test_two_workers_write_what_one_writes(fp32_dump, tmp_path):
    one = _check(fp32_dump, tmp_path / "one", api_list=["linear", "softmax", "gelu"])
    two = _check(fp32_dump, tmp_path / "two", api_list=["linear", "softmax", "gelu"], workers=2)
    assert one.exit_code == two.exit_code == 0
    (a,) = (tmp_path / "one").glob("accuracy_checking_details_*.csv")
    (b,) = (tmp_path / "two").glob("accuracy_checking_details_*.csv")
    assert a.read_text(encoding="utf-8") == b.read_text(encoding="utf-8")
    assert len(_results(tmp_path / "two")) == 9 + 2 + 2


def test_reproduce_writes_a_script_that_runs_with_torch_and_numpy_only(fp32_dump, tmp_path, capsys):
    import subprocess
    import sys

    from probe_tui.cli import main

    assert _check(fp32_dump, tmp_path / "out", api_list=["linear"]).exit_code == 0
    assert main(["reproduce", str(tmp_path / "out"), "Functional.linear.3", "-o", str(tmp_path / "rep")]) == 0
    script = tmp_path / "rep" / "Functional.linear.3.forward.py"
    assert script.is_file() and (tmp_path / "rep" / "Functional.linear.3.forward.npz").is_file()
    assert "probe_tui" not in script.read_text(encoding="utf-8") and "engines" not in script.read_text(
        encoding="utf-8")
    # run from another folder, with no probe-tui on the path
    done = subprocess.run([sys.executable, str(script), "--device", "cpu"], cwd=str(tmp_path), env={
        "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Functional.linear.3.forward on cpu, reference on cpu in float64"
    device = json.loads(lines[2].split(":", 1)[1])
    recorded = json.loads(lines[3].split(":", 1)[1])
    assert device == recorded  # this machine computes what the demo recorded
    assert device["cosine"] > 0.999999 and device["max_abs_err"] < 1e-6
    # an op the dump does not have: one line, exit 2
    capsys.readouterr()
    assert main(["reproduce", str(tmp_path / "out"), "Functional.nothing.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Functional.nothing.0" in err[0]


def test_a_judging_failure_is_listed_not_passed_nor_a_crash(fp32_dump, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("odd data")

    monkeypatch.setattr(acc_engine.rules, "judge_tensor", broken)
    outcome = _check(fp32_dump, tmp_path / "out", api_list=["gelu"])
    rows = _results(tmp_path / "out")
    assert [r["Forward Test Success"] for r in rows] == ["SKIP", "SKIP"]
    assert all("not judged: ValueError: odd data" in r["Message"] for r in rows)
    assert outcome.exit_code == 0 and outcome.summary["passed"] == 0


def test_a_damaged_journal_is_one_line_exit_2(fp32_dump, tmp_path, capsys):
    from probe_tui.cli import main

    out = tmp_path / "out"
    out.mkdir()
    (out / rs.JOURNAL).write_text("not json\n")
    assert main(["acc-check", str(fp32_dump), "-o", str(out), "--api", "gelu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acc_check.output_path" in err[0] and "journal" in err[0]


def test_a_line_cut_by_an_interruption_runs_again(fp32_dump, tmp_path):
    assert _check(fp32_dump, tmp_path / "whole", api_list=["gelu", "softmax"]).exit_code == 0
    out = tmp_path / "cut"
    _check(fp32_dump, out, api_list=["gelu", "softmax"])
    lines = (out / rs.JOURNAL).read_text(encoding="utf-8").splitlines()
    (out / rs.JOURNAL).write_text("\n".join(lines[:2] + [lines[2][:20]]) + "\n", encoding="utf-8")
    for name in ("acc_check.h5", "segments.jsonl"):
        if (out / name).exists():
            (out / name).unlink()
    assert _check(fp32_dump, out, api_list=["gelu", "softmax"]).exit_code == 0
    assert _results(out) == _results(tmp_path / "whole")


def test_bf16_autocast_demo_has_no_error(tmp_path):
    """Under autocast a call takes float32 inputs and returns bfloat16: the reference rounds the inputs to
    bfloat16 first, as autocast did, and the outputs are judged as bfloat16 results (gradients too)."""
    job = load_config({"task": "tensor", "dump_path": str(tmp_path / "dump"), "level": "L1",
                       "target": {"demo": {"preset": "tiny", "steps": 1, "dtype": "bf16"}},
                       "tensor": {"data_mode": ["all"], "summary_mode": "statistics", "list": ["linear", "mul"]}})
    assert run_job(job, events=NullSink()).exit_code == 0
    outcome = _check(tmp_path / "dump" / "latest", tmp_path / "out")
    rows = _results(tmp_path / "out")
    assert len(rows) >= 9 and outcome.exit_code == 0, outcome.summary["verdict"]
    assert not [r for r in rows if "error" in (r["Forward Test Success"], r["Backward Test Success"])]
    (details,) = (tmp_path / "out").glob("accuracy_checking_details_*.csv")
    with open(details, newline="", encoding="utf-8") as fh:
        linear = next(r for r in csv.DictReader(fh) if r["API Name"] == "Functional.linear.0.forward.output.0")
    assert (linear["Bench Dtype"], linear["DEVICE Dtype"]) == ("torch.float32", "torch.bfloat16")
