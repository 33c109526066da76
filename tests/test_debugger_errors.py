"""Bad input to ``PrecisionDebugger`` is one line naming the field, raised before anything is written; misused
calls say what to call instead."""

import pytest

torch = pytest.importorskip("torch")

from test_debugger_support import write_config  # noqa: E402

from probe_tui import PrecisionDebugger  # noqa: E402
from schemas import ConfigError, ConfigWarning  # noqa: E402


def _one_line_naming(exc, field):
    text = str(exc)
    assert "\n" not in text.strip() and field in text, text
    return text


@pytest.mark.parametrize("kwargs, error, field", [
    ({"task": "monitor"}, ValueError, "task"),              # a task this API does not run
    ({"task": "compare"}, (ValueError, ConfigError), "compare"),
    ({"task": "overflow"}, ConfigError, "task"),            # a typo: did-you-mean
    ({"task": "overflow_check", "level": "L7"}, ConfigError, "level"),
    ({"task": "free_benchmark", "step": ["3-1"]}, ConfigError, "step"),
])
def test_bad_arguments_fail_before_anything_is_written(tmp_path, kwargs, error, field):
    dump = tmp_path / "dump"
    with pytest.raises(error) as info:
        PrecisionDebugger(dump_path=str(dump), **kwargs)
    text = _one_line_naming(info.value, field)
    if kwargs["task"] == "monitor":
        assert "start_monitor" in text
    assert not dump.exists()


@pytest.mark.parametrize("config, field", [
    ({"task": "overflow_check", "overflow_check": {"overflow_nums": 0}}, "overflow_check.overflow_nums"),
    ({"task": "free_benchmark", "free_benchmark": {"fuzz_device": "cpu"}}, "free_benchmark"),
    ({"task": "free_benchmark", "free_benchmark": {"pert_mode": "add_nose"}}, "free_benchmark.pert_mode"),
    ({"task": "grad_probe", "grad_probe": {"bounds": [1, 0]}}, "grad_probe.bounds"),
    ({"task": "grad_probe", "grad_probe": {"grad_levle": "L1"}}, "grad_probe.grad_levle"),
])
def test_a_bad_config_file_names_the_field_and_writes_nothing(tmp_path, config, field):
    dump = tmp_path / "dump"
    cfg = write_config(tmp_path, "bad", dict(config, dump_path=str(dump)))
    with pytest.raises(ConfigError) as info:
        PrecisionDebugger(config_path=str(cfg))
    _one_line_naming(info.value, field)
    assert not dump.exists()


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError) as info:
        PrecisionDebugger(config_path=str(tmp_path / "nope.json"))
    _one_line_naming(info.value, "nope.json")


def test_monitor_on_a_dump_task_says_what_it_is_for(tmp_path):
    debugger = PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), level="L1")
    try:
        with pytest.raises(ValueError) as info:
            debugger.monitor(torch.nn.Linear(2, 2))
        assert "grad_probe" in _one_line_naming(info.value, "task")
    finally:
        debugger.close()


def test_save_outside_statistics_and_tensor_is_skipped_with_one_line(tmp_path, capsys):
    debugger = PrecisionDebugger(task="free_benchmark", dump_path=str(tmp_path / "d"), level="L1")
    debugger.start()
    debugger.save("h", torch.ones(2))
    debugger.save("h", torch.ones(2))
    debugger.stop()
    debugger.step()
    debugger.close()
    err = capsys.readouterr().err
    assert err.count("save('h') is skipped") == 1


def test_msprobe_keys_we_do_not_use_warn_once_each(tmp_path):
    cfg = write_config(tmp_path, "ms", {"task": "overflow_check", "dump_path": str(tmp_path / "d"), "level": "L1",
                                        "extra_info": True})
    with pytest.warns(ConfigWarning) as caught:
        debugger = PrecisionDebugger(config_path=str(cfg), dump_path=str(tmp_path / "other"))  # loads twice
    debugger.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(texts) == 1 and "extra_info" in texts[0]
    assert (tmp_path / "other").is_dir() and not (tmp_path / "d").exists()
