"""SVG snapshot of the online check's view at 80x24, on a store written by the engine from fixed rows.

Regenerate after a deliberate change of looks with ``pytest tests/test_app_snapshots_online.py --snapshot-update``
and look at the report before committing the SVG.
"""

from tests.test_app_online_check import make_online_run
from tests.test_app_snapshots_views import snap_view


def test_online_check_80x24(snap_compare, tmp_path):
    path = make_online_run(tmp_path / "online_run")
    assert snap_view(snap_compare, tmp_path, "80x24", path,
                     lambda s: getattr(s, "result", None) is not None and s.selected is not None)
