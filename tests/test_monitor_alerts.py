"""Alert rules: EMA history of |value| (beta 0.99), turbulence up / down / both, NaN and inf, thresholds."""

import numpy as np
import pytest

from engines.monitor.alerts import AlertEngine, RuleSpec


def _describe(metrics):
    return lambda sid: ("grad_reduced", f"layer{sid}.weight", f"layer{sid}", metrics[sid])


def _run(engine, rows, metrics):
    out = []
    for step, values in enumerate(rows):
        ids = np.arange(len(values))
        out.append(engine.check(step, ids, np.array(values, dtype=float), _describe(metrics)))
    return out


def test_turbulence_compares_with_the_ema_before_it_is_updated():
    engine = AlertEngine([RuleSpec("AnomalyTurbulence", 0.5, "up")])
    history = [1.0, 1.0, 1.0, 1.6]
    alerts = _run(engine, [[v] for v in history], ["norm"])
    assert [len(a) for a in alerts] == [0, 0, 0, 1]
    alert = alerts[3][0]
    assert alert.step == 3 and alert.kind == "up" and alert.value == 1.6 and alert.baseline == pytest.approx(1.0)
    assert alert.module == "layer0" and alert.metric == "norm" and "layer0.weight" in alert.message


def test_ema_uses_beta_099_and_absolute_values():
    engine = AlertEngine([RuleSpec("AnomalyTurbulence", 0.1, "up")])
    _run(engine, [[-2.0], [4.0]], ["mean"])
    # after step 0: 2.0; step 1 (4.0) alerts and enters clipped to 2.2: 0.99 * 2 + 0.01 * 2.2 = 2.002
    (alert,) = engine.check(2, np.array([0]), np.array([2.3]), _describe(["mean"]))
    assert alert.baseline == pytest.approx(2.002)
    engine = AlertEngine([RuleSpec("AnomalyTurbulence", 1.0, "up")])
    _run(engine, [[-2.0], [3.0]], ["mean"])  # no alert: 3 < 2 * 2, enters as is: 0.99 * 2 + 0.01 * 3
    (alert,) = engine.check(2, np.array([0]), np.array([4.1]), _describe(["mean"]))
    assert alert.baseline == pytest.approx(2.01)


@pytest.mark.parametrize("direction, fires", [("up", [True, False]), ("down", [False, True]), ("both", [True, True])])
def test_turbulence_directions(direction, fires):
    engine = AlertEngine([RuleSpec("AnomalyTurbulence", 0.5, direction)])
    _run(engine, [[1.0, 1.0]], ["norm", "norm"])
    alerts = engine.check(1, np.array([0, 1]), np.array([1.6, 0.4]), _describe(["norm", "norm"]))
    assert [a.series for a in alerts] == [i for i, f in enumerate(fires) if f]


def test_turbulence_ignores_min_and_max_and_the_first_sample():
    engine = AlertEngine([RuleSpec("AnomalyTurbulence", 0.1, "both")])
    alerts = _run(engine, [[100.0, 100.0], [1.0, 1.0]], ["max", "norm"])
    assert alerts[0] == [] and [a.metric for a in alerts[1]] == ["norm"]


def test_nan_rule_catches_nan_inf_counts_and_threshold():
    engine = AlertEngine([RuleSpec("AnomalyNan", 10.0)])
    metrics = ["norm", "max", "nans", "norm", "norm"]
    alerts = engine.check(0, np.arange(5), np.array([np.nan, np.inf, 3.0, 11.0, 9.0]), _describe(metrics))
    assert [(a.series, a.kind) for a in alerts] == [(0, "nan"), (1, "inf"), (2, "count"), (3, "threshold")]


def test_nan_rule_without_inf():
    engine = AlertEngine([RuleSpec("AnomalyNan", None, include_inf=False)])
    alerts = engine.check(0, np.arange(2), np.array([np.inf, np.nan]), _describe(["norm", "norm"]))
    assert [a.kind for a in alerts] == ["nan"]


def test_first_rule_wins_and_non_finite_values_stay_out_of_the_history():
    engine = AlertEngine([RuleSpec("AnomalyNan"), RuleSpec("AnomalyTurbulence", 0.5, "both")])
    alerts = _run(engine, [[1.0], [np.nan], [1.2]], ["norm"])
    assert [a.rule for a in alerts[1]] == ["AnomalyNan"]
    assert alerts[2] == []  # the history is still 1.0, not NaN


def test_rule_spec_from_msprobe_config():
    spec = RuleSpec.from_config({"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}})
    assert (spec.name, spec.threshold, spec.direction) == ("AnomalyTurbulence", 0.5, "up")
    with pytest.raises(ValueError, match="rule_name"):
        RuleSpec.from_config({"rule_name": "Nope"})
    with pytest.raises(ValueError, match="threshold"):
        RuleSpec.from_config({"rule_name": "AnomalyTurbulence"})


def test_a_spike_enters_the_history_clipped_so_the_next_normal_step_is_not_a_drop():
    engine = AlertEngine([RuleSpec("AnomalyTurbulence", 0.5, "both")])
    alerts = _run(engine, [[1.0], [1.0], [1e4], [1.0]], ["norm"])
    assert [len(a) for a in alerts] == [0, 0, 1, 0]
    # the history took 1.5 (the band's edge), not 1e4: 0.99 * 1 + 0.01 * 1.5
    (alert,) = engine.check(4, np.array([0]), np.array([10.0]), _describe(["norm"]))
    assert alert.baseline == pytest.approx(0.99 * (0.99 * 1.0 + 0.01 * 1.5) + 0.01 * 1.0)
