"""The compare sample as a new user runs it (sample_configs/README.md): two demo runs, then
``probe-tui --run sample_configs/compare.json``; the one-screen summary names the injected fault first, one line
a suspect, at 80 columns and when piped."""

import glob
import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from engines.compare.hdf5_out import read_results  # noqa: E402
from probe_tui.cli import main  # noqa: E402
from probe_tui.summary_view import print_mapping  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "sample_configs"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def table_lines(text: str):
    """The suspects table's data lines (after the header rule), colours removed."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Top suspects"))
    rule = next(i for i in range(start, len(lines)) if set(lines[i].strip()) <= set("━╇"))
    return [line for line in lines[rule + 1:] if line.strip() and "more rows" not in line]


def test_compare_sample_prints_each_suspect_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("statistics.json", "statistics_lowp.json"):
        assert main(["--run", str(SAMPLES / name)]) == 0
    capsys.readouterr()
    assert main(["--run", str(SAMPLES / "compare.json")]) == 0
    piped = capsys.readouterr().err
    rows = table_lines(piped)
    cells = [[c.strip() for c in row.split("│")] for row in rows]
    # the injected fault (exp and sum in bf16 between two casts, engines/adapters/torch/demo_model.py) first,
    # once for all four steps, with the source line that starts it
    assert cells[0][0] == "naive_softmax.0 +2 → dropout.3" and cells[0][1] == "0-3", piped
    assert cells[0][4].startswith("demo_model.py:")
    labels = [c[0] for c in cells]
    assert len(rows) == 10 and len(set(labels)) == len(labels), piped

    summary_path = glob.glob(str(tmp_path / "probe_dump" / "2*" / "summary.json"))[0]
    summary = json.loads(Path(summary_path).read_text())
    screen = Terminal()
    monkeypatch.setenv("COLUMNS", "80")
    print_mapping(summary, screen)
    narrow = table_lines(screen.getvalue())
    assert len(narrow) == 10 and all(len(line) <= 80 for line in narrow), screen.getvalue()

    # the stored ranking keeps every entry: the region once per step
    div = read_results(Path(summary_path).parent, "divergence", ["record", "kind", "step"])
    region = [s for r, k, s in zip(div["record"], div["kind"], div["step"]) if r == "Tensor.to.0.forward" and k == 4]
    assert sorted(region) == [0, 1, 2, 3]
    group = summary["suspect_groups"][0]
    assert group["steps"] == [0, 1, 2, 3] and group["entries"] == 4 and group["n_ops"] == 3
