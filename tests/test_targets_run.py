"""Targets: the demo, scripts (runpy, restored process state) and callables, and framework detection."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from engines import targets
from engines.targets import TargetError, detect_framework, run_target

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def process_state():
    """The process state a target must leave as it found it."""
    return lambda: (sys.argv[:], sys.path[:], os.getcwd(), dict(os.environ))


# ---- the demo -----------------------------------------------------------------------------------------------

def test_demo_target_trains_and_reports_each_step():
    pytest.importorskip("torch")
    steps = []
    result = run_target({"demo": {"preset": "tiny", "steps": 3}}, framework="pytorch",
                        on_step=lambda step, loss: steps.append((step, loss)))
    assert result.ok and result.exit_code == 0 and result.error == ""
    assert result.value.losses == [loss for _, loss in steps] and [s for s, _ in steps] == [0, 1, 2]
    assert result.elapsed_s > 0


def test_demo_shorthand_and_auto_framework():
    pytest.importorskip("torch")
    assert detect_framework("demo") == "pytorch" and detect_framework("demo", default="mindspore") == "mindspore"
    result = run_target({"demo": {"preset": "tiny", "steps": 1}}, framework="auto")
    assert result.ok and result.value.steps == 1


def test_demo_bad_knobs_are_target_errors():
    with pytest.raises(TargetError) as err:
        run_target({"demo": {"steps": 0}}, framework="pytorch")
    assert str(err.value) == "target.demo.steps: must be >= 1, got 0"


def test_demo_dispatch_plugs_in_other_frameworks(tmp_path, monkeypatch):
    monkeypatch.setitem(targets.DEMO_MODULES, "mindspore", "probe_tui_missing_ms_demo")
    with pytest.raises(TargetError, match="^target.demo: no mindspore demo is available yet"):
        run_target({"demo": {}}, framework="mindspore")
    _write(tmp_path / "fake_ms_demo.py", """
        def train(knobs, *, on_step=None):
            on_step(0, 1.25)
            return {"steps": knobs.steps, "preset": knobs.preset}
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(targets.DEMO_MODULES, "mindspore", "fake_ms_demo")
    seen = []
    result = run_target({"demo": {"preset": "tiny"}}, framework="mindspore", on_step=lambda *a: seen.append(a))
    assert result.ok and result.value == {"steps": 5, "preset": "tiny"} and seen == [(0, 1.25)]


def test_a_failing_demo_is_a_failure_not_a_crash():
    pytest.importorskip("torch")

    def boom(step, loss):
        raise RuntimeError("callback exploded")

    result = run_target("demo", framework="pytorch", on_step=boom)
    assert not result.ok and result.exit_code == 1
    assert "RuntimeError: callback exploded" in result.error


# ---- scripts ------------------------------------------------------------------------------------------------

def test_script_runs_as_main_with_its_argv_path_env_and_cwd(tmp_path, process_state, monkeypatch):
    monkeypatch.setenv("PROBE_TUI_TEST_KEEP", "original")
    monkeypatch.delenv("PROBE_TUI_TEST_NEW", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    _write(tmp_path / "proj" / "helper_for_target_test.py", "VALUE = 42\n")
    script = _write(tmp_path / "proj" / "train.py", """
        import json, os, sys
        import helper_for_target_test
        if __name__ == "__main__":
            with open("report.json", "w") as f:
                json.dump({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
                           "keep": os.environ["PROBE_TUI_TEST_KEEP"], "new": os.environ["PROBE_TUI_TEST_NEW"],
                           "helper": helper_for_target_test.VALUE}, f)
    """)
    before = process_state()
    result = run_target({"script": str(script), "args": ["--lr", 3, "x"], "cwd": str(work),
                         "env": {"PROBE_TUI_TEST_KEEP": "changed", "PROBE_TUI_TEST_NEW": "1"}}, framework="pytorch")
    assert result.ok and result.exit_code == 0, result.error
    report = json.loads((work / "report.json").read_text())
    assert report == {"argv": [str(script), "--lr", "3", "x"], "path0": str(script.parent), "cwd": str(work),
                      "keep": "changed", "new": "1", "helper": 42}
    assert process_state() == before
    assert "helper_for_target_test" not in sys.modules


def test_script_trains_the_demo_model_like_a_user(tmp_path):
    pytest.importorskip("torch")
    from engines.adapters.torch.demo import train

    script = _write(tmp_path / "user_train.py", """
        import json, sys
        import torch
        import torch.nn.functional as F
        from engines.adapters.torch.demo import build_model, make_optimizer
        from engines.demo.data import batches
        from engines.demo.knobs import resolve_knobs

        knobs = resolve_knobs({"preset": "tiny", "steps": int(sys.argv[1])})
        torch.manual_seed(knobs.seed)
        model = build_model(knobs)
        optimizer = make_optimizer(model, knobs)
        losses = []
        for tokens, targets in batches(knobs):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(torch.from_numpy(tokens)).view(-1, knobs.vocab),
                                   torch.from_numpy(targets).view(-1))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        json.dump(losses, open(sys.argv[2], "w"))
    """)
    out = tmp_path / "losses.json"
    result = run_target({"script": str(script), "args": ["3", str(out)]}, framework="auto")
    assert result.ok, result.error
    assert json.loads(out.read_text()) == train({"preset": "tiny", "steps": 3}).losses


@pytest.mark.parametrize("body,ok,error", [
    ("import sys; sys.exit(0)", True, ""),
    ("import sys; sys.exit()", True, ""),
    ("import sys; sys.exit(3)", False, "SystemExit: 3"),
    ("import sys; sys.exit('out of memory')", False, "out of memory"),
])
def test_script_exit_codes(tmp_path, body, ok, error):
    script = _write(tmp_path / "s.py", body + "\n")
    result = run_target({"script": str(script)}, framework="pytorch")
    assert (result.ok, result.exit_code, result.error) == (ok, 0 if ok else 1, error)
    assert result.value is None  # a script's globals (its model, its tensors) are not kept alive


def test_script_exception_keeps_the_users_traceback(tmp_path, process_state):
    script = _write(tmp_path / "bad.py", """
        def step():
            raise ValueError("loss is nan")
        step()
    """)
    before = process_state()
    result = run_target({"script": str(script), "args": ["a"]}, framework="pytorch")
    assert not result.ok and result.exit_code == 1
    assert result.error.startswith("Traceback (most recent call last):")
    assert str(script) in result.error and "ValueError: loss is nan" in result.error
    assert "targets.py" not in result.error and "runpy" not in result.error
    assert process_state() == before


def test_keyboard_interrupt_propagates_after_restoring(tmp_path, process_state):
    script = _write(tmp_path / "ctrl_c.py", "raise KeyboardInterrupt\n")
    before = process_state()
    with pytest.raises(KeyboardInterrupt):
        run_target({"script": str(script), "args": ["x"], "env": {"PROBE_TUI_TEST_X": "1"}}, framework="pytorch")
    assert process_state() == before


@pytest.mark.parametrize("target,message", [
    ({"script": "no/such/train.py"}, "target.script: no/such/train.py: no such file"),
    ({"script": ""}, "target.script: expected a path, got ''"),
    ({"script": "x.py", "demo": {}}, "target: needs exactly one of demo, script, callable (found demo and script)"),
    ({}, "target: needs exactly one of demo, script, callable (found none)"),
    ({"demo": {}, "args": []}, "target.args: unknown key for a demo target"),
    ("train.py", "target: expected a mapping with one of demo, script, callable, got 'train.py'"),
    ({"callable": "nocolon"}, "target.callable: 'nocolon' is not 'package.module:function'"),
    ({"callable": "a.b:"}, "target.callable: 'a.b:' is not 'package.module:function'"),
    ({"callable": "a-b:c"}, "target.callable: 'a-b:c' is not 'package.module:function'"),
    ({"callable": "probe_tui_no_such_module:main"},
     "target.callable: no module named 'probe_tui_no_such_module' (from 'probe_tui_no_such_module:main')"),
    ({"callable": "engines.targets:no_such_fn"}, "target.callable: engines.targets has no attribute 'no_such_fn'"),
    ({"callable": "engines.targets:FRAMEWORKS"}, "target.callable: 'engines.targets:FRAMEWORKS' is not callable"),
    ({"callable": "engines.targets:run_target", "kwargs": [1]}, "target.kwargs: expected a mapping, got [1]"),
])
def test_bad_targets_are_one_line_errors(target, message):
    with pytest.raises(TargetError) as err:
        run_target(target, framework="pytorch")
    assert str(err.value) == message


def test_bad_framework_cwd_env_and_args(tmp_path):
    script = _write(tmp_path / "ok.py", "pass\n")
    cases = [
        ({"script": str(script)}, "tensorflow", "framework: unknown framework 'tensorflow'"),
        ({"script": str(script), "cwd": str(tmp_path / "nope")}, "pytorch", "target.cwd: "),
        ({"script": str(script), "env": {"A": ["x"]}}, "pytorch", "target.env.A: expected a string"),
        ({"script": str(script), "args": "--lr 3"}, "pytorch", "target.args: expected a list of strings"),
    ]
    for target, framework, start in cases:
        with pytest.raises(TargetError) as err:
            run_target(target, framework=framework)
        assert str(err.value).startswith(start) and "\n" not in str(err.value)


def test_script_relative_to_cwd(tmp_path):
    _write(tmp_path / "sub" / "rel.py", "open('ran', 'w').write('yes')\n")
    result = run_target({"script": "rel.py", "cwd": str(tmp_path / "sub")}, framework="pytorch")
    assert result.ok and (tmp_path / "sub" / "ran").read_text() == "yes"


# ---- callables ----------------------------------------------------------------------------------------------

def test_callable_gets_kwargs_and_on_step_when_it_accepts_it():
    pytest.importorskip("torch")
    seen = []
    result = run_target({"callable": "engines.adapters.torch.demo:train",
                         "kwargs": {"knobs": {"preset": "tiny", "steps": 2}}},
                        framework="auto", on_step=lambda step, loss: seen.append(step))
    assert result.ok and result.value.steps == 2 and seen == [0, 1]


def test_callable_failures_and_return_values(tmp_path, monkeypatch):
    _write(tmp_path / "user_entry.py", """
        def main(n):
            return n * 2
        def crash():
            raise RuntimeError("bad batch")
        class Trainer:
            @staticmethod
            def fit(on_step):
                on_step(0, None)
                return "fitted"
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_target({"callable": "user_entry:main", "kwargs": {"n": 21}}, framework="pytorch").value == 42
    failed = run_target({"callable": "user_entry:crash"}, framework="pytorch")
    assert not failed.ok and failed.exit_code == 1 and "RuntimeError: bad batch" in failed.error
    seen = []
    fitted = run_target({"callable": "user_entry:Trainer.fit"}, framework="pytorch",
                        on_step=lambda *a: seen.append(a))
    assert fitted.value == "fitted" and seen == [(0, None)]


# ---- framework detection ------------------------------------------------------------------------------------

@pytest.mark.parametrize("source,expected", [
    ("import torch\n", "pytorch"),
    ("import torch.nn as nn\n", "pytorch"),
    ("import torch_npu\n", "pytorch"),
    ("from mindspore import nn, ops\n", "mindspore"),
    ("import mindspore as ms\n", "mindspore"),
    ("def main():\n    import mindspore\n", "mindspore"),
    ("import numpy\n", "pytorch"),  # nothing found: the default
])
def test_detect_framework_from_script_imports(tmp_path, source, expected):
    script = _write(tmp_path / "t.py", source)
    assert detect_framework({"script": str(script)}) == expected


def test_detect_framework_follows_local_modules_without_running_them(tmp_path):
    _write(tmp_path / "model_ms.py", "import mindspore\nraise SystemExit('must not run')\n")
    _write(tmp_path / "pkg" / "__init__.py", "from .net import Net\n")
    script = _write(tmp_path / "train.py", "from model_ms import Net\nimport json\n")
    assert detect_framework({"script": str(script)}) == "mindspore"
    both = _write(tmp_path / "both.py", "import torch\nimport model_ms\n")
    with pytest.raises(TargetError, match="imports both torch and mindspore; set framework explicitly"):
        detect_framework({"script": str(both)})


def test_detect_framework_on_callables_and_bad_scripts(tmp_path, monkeypatch):
    assert detect_framework({"callable": "engines.adapters.torch.demo:train"}) == "pytorch"
    assert detect_framework({"callable": "engines.adapters.mindspore.demo:train"}) == "mindspore"
    _write(tmp_path / "ms_entry.py", "import mindspore\ndef main():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert detect_framework({"callable": "ms_entry:main"}) == "mindspore"
    assert "ms_entry" not in sys.modules  # found by its source, not imported
    broken = _write(tmp_path / "broken.py", "def (:\n")
    with pytest.raises(TargetError, match=r"^target.script: .*broken.py: syntax error at line 1"):
        detect_framework({"script": str(broken)})


def test_importing_these_modules_imports_no_framework():
    import subprocess

    code = ("import sys\n"
            "import engines.targets, engines.runs, engines.events, engines.demo\n"
            "import engines.demo.data, engines.demo.weights, engines.demo.faults, probe_tui.progress\n"
            "bad = sorted(m for m in ('torch', 'mindspore', 'textual') if m in sys.modules)\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
