"""One formatter for the CLI and the app (``probe_tui.formatting``): a size reads the same in the headless summary,
the progress line, the home table and the run summary screen; units travel in the summary key."""

import io
from pathlib import Path

from probe_tui.formatting import format_bytes, format_duration, summary_field

# 1.48 MB counted in 1000s, 1.41 MiB in 1024s: the CLI printed "1.4 MB" and the app "1.5 MB" for it
SIZE = 1_480_000


def _cli_lines(summary):
    from probe_tui.summary_view import print_mapping

    out = io.StringIO()
    print_mapping(summary, out)
    return out.getvalue().splitlines()


def test_a_size_reads_the_same_in_every_front_end():
    from probe_tui.app.discovery import run_row
    from probe_tui.app.screens.summary import _summary_items
    from probe_tui.progress import _extras

    class Info:
        path = "runs/r"
        size_bytes = SIZE

    expected = "1.5 MB"
    assert format_bytes(SIZE) == expected
    assert [line.split(None, 1)[1].strip() for line in _cli_lines({"size_bytes": SIZE})] == [expected]
    assert dict(_summary_items({"size_bytes": SIZE}))["size"] == expected
    assert run_row(Info(), Path("."))["size"] == expected
    assert _extras({"bytes": SIZE}) == expected


def test_summary_keys_carry_their_unit():
    assert summary_field("size_bytes", 2048) == ("size", "2.0 KB")
    assert summary_field("elapsed_s", 3.214) == ("elapsed", format_duration(3.214)) == ("elapsed", "3.2s")
    assert summary_field("records", 12) == ("records", "12")
    # a text value under a unit key is shown as it is, not taken for a number
    assert summary_field("size_bytes", "n/a") == ("size_bytes", "n/a")
    assert [format_bytes(n) for n in (None, float("nan"), 512, 2048, 5 * 1000 ** 3)] == [
        "—", "—", "512 B", "2.0 KB", "5.0 GB"]
