"""benchmarks/side_by_side.py without timing anything: its table on made-up figures, the msprobe skip line, and the
config.json it hands both tools loads in probe-tui for every mode."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("side_by_side", ROOT / "benchmarks" / "side_by_side.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table_ratios_and_share():
    bench = _bench()
    results = {"tiny": {"statistics L1": {"msprobe": {"ratio": 11.0}, "probe-tui": {"ratio": 2.0}},
                        "tensor L1": {"probe-tui": {"error": "boom"}}}}
    lines = bench.format_table(results, ["tiny"], ["statistics L1", "tensor L1"])
    assert lines[0] == "| mode | tiny: msprobe | tiny: probe-tui | share |"
    assert lines[2] == "| statistics L1 | 11.00× | 2.00× | 0.10 |"
    assert lines[3] == "| tensor L1 | — | — | — |"
    assert bench.share(None, 2.0) is None and bench.share(1.0, 2.0) is None


def test_details_show_failures():
    bench = _bench()
    results = {"tiny": {"tensor L1": {"probe-tui": {"error": "boom"}, "msprobe": {
        "ratio": 3.0, "ratio_min": 2.5, "ratio_max": 3.5, "us_per_record": 12.34, "records_per_step": 400.0,
        "files_per_step": 3.0, "rss_growth_mb": 41.0, "mb_per_step": 12.5, "write_mb_s": 150.0,
        "step_end_ms": 4.5, "write_ms": 2.25}}, "statistics L1": {"probe-tui": {
        "ratio": 1.5, "ratio_min": 1.4, "ratio_max": 1.6, "us_per_record": 16.0, "records_per_step": 400.0,
        "files_per_step": 0.0, "rss_growth_mb": 30.0, "mb_per_step": 0.2, "write_mb_s": None,
        "step_end_ms": 0.6, "write_ms": None, "writer_cpu_ms": 1.25, "writer_rss_mb": 61.0}}}}
    lines = bench.format_details(results, ["tiny"], ["tensor L1", "statistics L1"])
    assert lines[0].endswith("| MB/step | MB/s written | step end / write (ms) | writer process: CPU ms/step, peak RSS |")
    assert "| tiny | tensor L1 | msprobe | 3.00× (2.50–3.50) | 12 | 400 | 3.0 | 41 MB | 12.5 | 150 | 4.50 / 2.25 |  |" \
        in lines
    assert "| tiny | tensor L1 | probe-tui | failed: boom | | | | | | | | |" in lines
    assert "| tiny | statistics L1 | probe-tui | 1.50× (1.40–1.60) | 16 | 400 | 0.0 | 30 MB | 0.2 | — | 0.60 / — " \
           "| 1.25, 61 MB |" in lines


def test_msprobe_skipped_without_its_python(monkeypatch):
    bench = _bench()
    monkeypatch.delenv(bench.MSPROBE_ENV, raising=False)
    assert bench.msprobe_python() == (None, "PROBE_TUI_MSPROBE_PYTHON is not set")
    monkeypatch.setenv(bench.MSPROBE_ENV, "/nonexistent/python")
    python, why = bench.msprobe_python()
    assert python is None and "cannot run" in why


@pytest.mark.parametrize("mode", ["statistics L0", "statistics L1", "statistics mix", "L1 + md5", "tensor L1"])
def test_config_loads_in_probe_tui(tmp_path, mode):
    from probe_tui.debugger import _load_job

    bench = _bench()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(bench.msprobe_config(mode, str(tmp_path / "dump"))))
    job = _load_job(str(path), {})
    task, level, summary_mode = bench.MODES[mode]
    assert (job.task, job.level) == (task, level)
    if task == "statistics":
        assert job.statistics.summary_mode == summary_mode


def test_llama_preset_trains_a_real_llama():
    bench = _bench()
    work = bench._work("llama")
    assert type(work.model).__name__ == "LlamaForCausalLM"
    before = [p.detach().clone() for p in work.model.parameters()]
    work.step()
    assert any(not (a == p).all() for a, p in zip(before, work.model.parameters()))
    assert bench.PRESET_CHOICES["all"] == ["default", "tiny", "llama"]


def test_warm_up_runs_until_the_peak_stops_growing():
    bench = _bench()
    calls = []
    peaks = iter([110, 110, 120, 125, 125, 125, 125, 125, 125, 125, 125, 125, 125])
    current = [100]

    def step():
        calls.append(1)

    def peak():  # read before and after each pair: the after-read of a pair advances the figure
        return current[0]

    def pair_step():
        step()
        current[0] = next(peaks)

    pairs = bench.warm_to_steady_peak([pair_step], peak)
    # grew on pairs 1, 3, 4 (100->110, 110->120, 120->125); steady on 5, 6, 7
    assert pairs == 7 and len(calls) == 7
    growing = iter(range(1000))
    current[0] = 0
    assert bench.warm_to_steady_peak([lambda: current.__setitem__(0, next(growing) + 1)],
                                     peak) == bench.WARM_MAX
    current[0] = 5
    assert bench.warm_to_steady_peak([lambda: None], peak) == max(bench.WARM_MIN, bench.WARM_STEADY)
