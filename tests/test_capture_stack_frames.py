"""Stacks hold the user's frames, not probe-tui's (docs/decisions/0027-stacks-record-user-frames.md): capture
drops the CLI's, the runner's, the target loader's and runpy's frames, and readers drop them from older dumps
so that the compare's stack column never shows them."""

import glob
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from engines.dumps.opener import open_dump
from engines.dumps.stack_frames import is_tool_path, user_frames

SCRIPT = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(2, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
""")
TOOL = ("probe_tui/cli", "engines/runner.py", "engines/targets.py", "engines/collection.py", "runpy",
        "engines/capture/", "bin/probe-tui")


def _run(tmp_path: Path, env_extra=None) -> str:
    (tmp_path / "train.py").write_text(SCRIPT)
    config = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
              "target": {"script": str(tmp_path / "train.py")}}
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    code = ("import sys\n" + (env_extra or "") + "from probe_tui.cli import main\n"
            "sys.exit(main(['run', sys.argv[1]]))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cfg.json")], capture_output=True, text=True,
                          timeout=180, cwd=str(Path(__file__).resolve().parent.parent))
    assert done.returncode == 0, done.stderr
    return sorted(glob.glob(str(tmp_path / "dump" / "2*")))[-1]


def _stored_frames(run: str):
    from engines.store import DumpReader

    reader = DumpReader(run + "/rank0")
    try:
        return [json.loads(f) for f in reader.store.read("stacks", ["frames"])["frames"].tolist()]
    finally:
        reader.close()


def test_capture_keeps_only_the_users_frames(tmp_path):
    pytest.importorskip("torch")
    run = _run(tmp_path)
    stacks = _stored_frames(run)
    assert stacks
    for frames in stacks:
        assert any("train.py" in f for f in frames)
        assert not [f for f in frames if any(t in f for t in TOOL)], frames
    rows = open_dump(run).rows(0, 0)
    assert all("train.py" in s and "runner.py" not in s for s in rows.stack.tolist())


def test_readers_drop_the_tools_frames_of_older_dumps(tmp_path):
    pytest.importorskip("torch")
    # a dump as capture wrote them before: only engines/capture's own frames were dropped
    older = ("import engines.capture.stacks as st\n"
             "st._is_tool_file = lambda f: f.startswith(st._HERE) or f.endswith(st._DEFAULT_SKIP_SUFFIXES)\n")
    run = _run(tmp_path, older)
    assert any("engines/runner.py" in f for frames in _stored_frames(run) for f in frames)
    stacks = open_dump(run).rows(0, 0).stack.tolist()
    assert stacks and all("train.py" in s for s in stacks)
    assert not [s for s in stacks if any(t in s for t in TOOL)]


def test_tool_paths():
    assert is_tool_path("/opt/other/site-packages/probe_tui/cli.py")  # another installation's
    assert is_tool_path("/x/engines/runner.py") and is_tool_path("/usr/lib/python3.11/runpy.py")
    assert not is_tool_path("/x/engines/adapters/torch/demo_model.py")  # the demo model is user code
    assert not is_tool_path("/home/me/engines/my_engine.py")  # a user's own package named engines
    assert not is_tool_path("/home/me/train.py")
    frames = ["File /a/probe_tui/cli.py, line 3, in main,\n x()", "File /home/me/train.py, line 9, in <module>,\n y()"]
    assert user_frames(frames) == frames[1:]


# -- the stack table's reuse of the previous call's frame (engines/capture/stacks.py) ----------------------------

def _two_lines(table):
    first = table.current(0)
    second = table.current(0)
    return first, second


def _via_a(table):
    return _two_lines(table)


def _via_b(table):
    return _two_lines(table)


def test_stack_ids_follow_the_line_and_the_callers():
    from engines.capture.stacks import StackTable

    table = StackTable()
    runs = []
    for _ in range(2):
        runs.append((_via_a(table), _via_b(table)))
    (a1, a2), (b1, b2) = runs[0]
    assert len({a1, a2, b1, b2}) == 4  # two lines, two callers
    assert runs[1] == runs[0]  # new runs of the same functions from the same places: the same stacks
    lines = [int(table.frames(sid)[1].split(", line ")[1].split(",")[0]) for sid in (a1, b1)]
    assert lines[0] != lines[1]  # the caller's frame is in each stack, each at its own line


def _resumed(table):
    while True:
        yield table.current(0)


def _resume_from_a(gen):
    return next(gen)


def _resume_from_b(gen):
    return next(gen)


def test_a_generator_resumed_from_another_caller_gets_that_callers_stack():
    from engines.capture.stacks import StackTable

    table = StackTable()
    gen = _resumed(table)
    seen = []
    for _ in range(2):
        seen.append((_resume_from_a(gen), _resume_from_b(gen)))
    from_a, from_b = seen[0]
    assert from_a != from_b
    assert "_resume_from_a" in " ".join(table.frames(from_a))
    assert "_resume_from_b" in " ".join(table.frames(from_b))
    assert seen[1] == seen[0]


def test_source_lines_read_without_filling_the_process_line_cache(tmp_path):
    """Issue 21: a stack's source lines are those ``linecache.getline`` gives, but a file ``linecache`` did not
    hold before is not left in it (it kept every file a stack passed through, torch's modules among them, for the
    life of the process); one it held stays."""
    import linecache

    from engines.capture.stacks import StackTable

    user = tmp_path / "user_code_issue21.py"
    user.write_text("def where(table):\n    x = 1\n    return table.current(0)  # the call site\n")
    namespace: dict = {}
    exec(compile(user.read_text(), str(user), "exec"), namespace)
    linecache.cache.pop(str(user), None)
    held = __file__
    linecache.getline(held, 1)
    assert held in linecache.cache

    table = StackTable()
    sid = namespace["where"](table)
    frames = table.frames(sid)
    assert frames[0] == "File %s, line 3, in where,\n return table.current(0)  # the call site" % user
    assert "File %s, line " % held in frames[1]
    text = frames[1].split(",\n ", 1)[1]
    line = int(frames[1].split(", line ")[1].split(",")[0])
    assert text == linecache.getline(held, line).strip()  # what linecache gives
    assert str(user) not in linecache.cache and held in linecache.cache
    assert table.drain_new() and table._lines == {}  # the step's lines let go at its end

# -- a module call's stack walked up to the enclosing module call's anchor (StackTable.module_key) ----------------

class _Payloads:
    def __init__(self) -> None:
        self.stacks: Dict[int, List[str]] = {}
        self.records: List[tuple] = []

    def write(self, payload) -> None:
        self.stacks.update(dict(payload.stacks))
        b = payload.buffer
        self.records.extend(zip(b.rec_name, b.rec_stack))

    def close(self, status: str = "finished") -> None:
        return None


class _Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def helper(self, x):
        return self.b(x)

    def forward(self, x):
        return self.helper(torch.relu(self.a(x)))


class _Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Sequential(_Inner(), torch.nn.Tanh(), _Inner())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(x))


def _module_stacks(depth: int, anchored: bool, monkeypatch, level: str = "L0") -> List[tuple]:
    from engines.adapters.torch.session import TorchCaptureSession
    from engines.capture.options import CaptureOptions
    from engines.capture.stacks import StackTable

    met = []
    if not anchored:  # every walk to the top, as ``current`` makes it
        full = StackTable.module_key
        monkeypatch.setattr(StackTable, "module_key", lambda self, skip, anchor, key: full(self, skip + 1, None, ()))
        current = StackTable.current
        monkeypatch.setattr(StackTable, "current", lambda self, skip=1, anchor=None, key=(): current(self, skip + 1))
    else:  # the walks that meet an anchor take the key above it from there (another key there, another result)
        walk_to = StackTable._walk_to

        def spy(self, frame, depth, anchor, anchor_key):
            f, on_stack = frame, False
            while f is not None:
                on_stack = on_stack or f is anchor
                f = f.f_back
            key = walk_to(self, frame, depth, anchor, anchor_key)
            taken = walk_to(self, frame, depth, anchor, (-1,) * len(anchor_key)) != key
            met.append(on_stack and (taken or depth < 5))
            return key

        monkeypatch.setattr(StackTable, "_walk_to", spy)
    torch.manual_seed(0)
    model = _Outer()
    sink = _Payloads()
    session = TorchCaptureSession(CaptureOptions(level=level, stack_depth=depth), lambda rank: sink, rank=0)

    def deep(n):  # frames above the model's call, more than the smaller depths keep
        return deep(n - 1) if n else model(torch.randn(3, 4)).sum().backward()

    for _ in range(2):
        session.start(model)
        deep(4)
        session.stop()
        session.step_end()
    session.close()
    monkeypatch.undo()
    if anchored:  # every module call but the root's (one a step) walks up to its parent's anchor: 9 a step
        assert met.count(False) == 2, met
        if level == "mix":  # and API calls inside a module call, when not from the previous call's frame
            assert met.count(True) >= 2 * 9 + 8, met
    return [(name, sink.stacks.get(sid) if sid >= 0 else None) for name, sid in sink.records]


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("depth", [1, 2, 3, 5, 48])
def test_module_stacks_through_anchors_equal_full_walks(depth, level, monkeypatch):
    """Module calls (L0) and API calls inside them (mix): their stacks walked up to the enclosing module call's
    anchor equal the walks to the top, at every depth."""
    anchored, full = [_module_stacks(depth, a, monkeypatch, level) for a in (True, False)]  # one call site
    assert [n for n, _ in anchored] == [n for n, _ in full]
    assert anchored == full
    forward = [frames for name, frames in anchored if ".forward" in name]
    assert forward and all(frames and len(frames) <= depth for frames in forward)
    if depth == 48:  # the helper's frame and the callers above the model are there
        b = [frames for name, frames in anchored if name.startswith("Module.inner.0.b.")][0]
        assert "in helper" in b[0] and any("in deep" in f for f in b)
