"""config_check (docs/CONFIG_CHECK.md): two runs of a small training script differing in one environment variable,
the learning rate and one data sample: the compare names those three and nothing else, most likely first."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from app_pilot import pilot_test

from probe_tui.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = textwrap.dedent("""
    import argparse
    import numpy as np
    import torch
    from torch import nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--data", default="data.npy")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.from_numpy(np.load(args.data))
    labels = torch.arange(data.shape[0]) % 3
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(3):
        x, y = data[step * 4:(step + 1) * 4], labels[step * 4:(step + 1) * 4]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
""")


def _launch(folder: Path, script: Path, lr: str, env_value: str, changed_sample: bool) -> Path:
    import numpy as np

    folder.mkdir()
    data = np.arange(48, dtype=np.float32).reshape(12, 4) / 10
    if changed_sample:
        data[7, 2] += 1.0  # batch 1 (samples 4-7), its sample 3
    np.save(folder / "data.npy", data)
    (folder / "cfg.json").write_text(json.dumps({
        "task": "config_check", "dump_path": "dump", "seed": 7,
        "target": {"script": str(script), "args": ["--lr", lr, "--data", "data.npy"]},
        "config_check": {"data_batches": 3}}))
    env = dict(os.environ, PYTHONPATH=str(ROOT), NCCL_ALGO=env_value)
    proc = subprocess.run([sys.executable, "-m", "probe_tui", "--run", "cfg.json"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder / "dump" / "latest"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("config_check")
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    a = _launch(tmp / "a", script, "0.1", "Ring", False)
    b = _launch(tmp / "b", script, "0.05", "Tree", True)
    return a, b


def test_pack_holds_every_section(two_runs):
    pack = json.loads((two_runs[0] / "rank0" / "config_check.json").read_text())
    assert pack["format"] == "probe-tui config_check"
    assert pack["environment"]["NCCL_ALGO"] == "Ring"
    assert pack["packages"]["torch"].startswith("2.")
    assert pack["framework"]["framework"] == "pytorch"
    assert pack["command"]["args.lr"] == "0.1" and pack["command"]["script"].endswith("train.py")
    assert pack["seeds"]["torch.initial_seed"] == "0"
    assert pack["deterministic"]["deterministic_algorithms"] in ("True", "False")
    assert pack["hyperparameters"]["param_groups.0.lr"] == "0.1"
    assert set(pack["weights"]) == {"init"} and "0.weight" in pack["weights"]["init"]
    assert sorted(pack["data"]) == ["batch0", "batch1", "batch2"] and len(pack["data"]["batch1"]) == 4
    assert pack["notes"] == []


def test_compare_names_the_three_differences_and_nothing_else(two_runs, capsys):
    a, b = two_runs
    assert main(["config-check", "compare", str(a), str(b), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["differences"]
    found = [(r["category"], r["key"], r["a"], r["b"]) for r in rows]
    assert [f[:2] for f in found] == [
        ("data", "batch1.sample3"),
        ("hyperparameters", "param_groups.0.lr"),
        ("arguments", "args.lr"),
        ("environment.numerics", "NCCL_ALGO"),
    ], found
    assert found[1][2:] == ("0.1", "0.05") and found[3][2:] == ("Ring", "Tree")
    assert main(["config-check", "compare", str(a), str(b), "--fail-on-findings"]) == 3
    out = capsys.readouterr().out
    assert "4 differences" in out and "NCCL_ALGO" in out and "batch1.sample3" in out
    assert main(["config-check", "compare", str(a), str(a), "--fail-on-findings"]) == 0
    assert "no difference" in capsys.readouterr().out


def test_diff_order_follows_the_categories():
    from engines.config_check.diff import CATEGORIES, diff_packs
    from schemas.config_check import ConfigCheckPack

    a = ConfigCheckPack(environment={"HOME": "/a", "OMP_NUM_THREADS": "1", "_": "x"}, packages={"rich": "1",
                        "numpy": "1"}, seeds={"torch.initial_seed": "1"}, weights={"init": {"w": "1"},
                                                                                    "step3": {"w": "1"}})
    b = ConfigCheckPack(environment={"HOME": "/b", "OMP_NUM_THREADS": "2", "_": "y"}, packages={"rich": "2",
                        "numpy": "2"}, seeds={"torch.initial_seed": "2"}, weights={"init": {"w": "2"},
                                                                                    "step3": {"w": "2"}})
    cats = [r["category"] for r in diff_packs(a, b)]
    assert cats == ["weights.init", "seeds", "packages.numerics", "environment.numerics", "weights.later",
                    "packages.other", "environment.other"]  # "_" is volatile: never compared
    names = [c for c, _ in CATEGORIES]
    assert cats == sorted(cats, key=names.index)


def test_static_pack_and_bad_input(tmp_path, capsys):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("optim:\n  lr: 0.1\n  betas: [0.9, 0.99]\n")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["config-check", "pack", "-o", str(a), "--file", str(cfg), "--", "train.py", "--lr", "0.1"]) == 0
    cfg.write_text("optim:\n  lr: 0.2\n  betas: [0.9, 0.99]\n")
    assert main(["config-check", "pack", "-o", str(b), "--file", str(cfg), "--", "train.py", "--lr", "0.1"]) == 0
    capsys.readouterr()
    assert main(["config-check", "compare", str(a), str(b), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["differences"]
    keys = [(r["category"], r["key"]) for r in rows]
    assert keys == [("config files", str(cfg) + ": optim.lr")]
    assert main(["config-check", "pack", "-o", str(a)]) == 2  # taken: nothing overwritten
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    assert main(["config-check", "compare", str(tmp_path / "bad.json"), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "not a config_check pack (format" in err
    assert main(["config-check", "compare", str(tmp_path / "missing"), str(b)]) == 2


def test_secret_environment_values_are_digests():
    from engines.config_check.collect import environment

    env = environment({"HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "s", "PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["HF_TOKEN"].startswith("sha256:") and "hf_abc" not in env["HF_TOKEN"]
    assert env["AWS_SECRET_ACCESS_KEY"].startswith("sha256:")


def test_in_script_api(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        from torch import nn
        from probe_tui.config_check import ConfigCheck

        torch.manual_seed(0)
        model = nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        check = ConfigCheck(sys.argv[1], weight_steps=[0]).start(model)
        for _ in range(2):
            opt.zero_grad()
            model(torch.ones(4, 3)).sum().backward()
            opt.step()
        check.close()
    """))
    out = tmp_path / "pack.json"
    proc = subprocess.run([sys.executable, str(script), str(out)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pack = json.loads(out.read_text())
    assert set(pack["weights"]) == {"init", "step0"} and pack["weights"]["init"] != pack["weights"]["step0"]
    assert pack["hyperparameters"]["param_groups.0.lr"] == "0.5" and len(pack["data"]["batch0"]) == 4


@pilot_test
async def test_app_view_lists_the_differences():
    from textual.widgets import DataTable, Static

    from probe_tui.app.config_check_view import ConfigCheckApp

    result = {"a": "A", "b": "B", "ranks": [0], "differences": [
        {"category": "data", "key": "batch1.sample3", "a": "1", "b": "2", "why": "fed different samples",
         "detail": "", "rank": 0},
        {"category": "environment.numerics", "key": "NCCL_ALGO", "a": "Ring", "b": "Tree", "why": "kernels",
         "detail": "", "rank": 0}]}
    app = ConfigCheckApp(result)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one("#cc-table", DataTable)
        assert table.row_count == 2
        assert "fed different samples" in str(app.screen.query_one("#cc-why", Static).render())
        await pilot.press("down")
        await pilot.pause()
        assert "kernels" in str(app.screen.query_one("#cc-why", Static).render())
        await pilot.press("q")


def test_precision_debugger_runs_config_check(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        import torch
        from torch import nn
        from probe_tui import PrecisionDebugger

        cfg = sys.argv[1] + ".json"
        json.dump({"task": "config_check", "dump_path": sys.argv[1]}, open(cfg, "w"))
        debugger = PrecisionDebugger(config_path=cfg)
        model = nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.3)
        debugger.start(model)
        for _ in range(2):
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
            debugger.step()
        debugger.stop()
    """))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "dump")],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pack = json.loads(next((tmp_path / "dump").glob("*/rank0/config_check.json")).read_text())
    assert pack["hyperparameters"]["param_groups.0.lr"] == "0.3" and list(pack["weights"]) == ["init"]
    assert sorted(pack["data"]) == ["batch0", "batch1"]
