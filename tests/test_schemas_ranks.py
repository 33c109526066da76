"""rank/step lists: "a-b" ranges normalise to the sorted set of the integers they cover (property tests)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schemas
from schemas.types import RANK_STEP_MAX, compact_ranks

small = st.integers(min_value=0, max_value=200)
big = st.integers(min_value=0, max_value=RANK_STEP_MAX)


@st.composite
def rank_item(draw):
    """One list element and the integers it stands for."""
    kind = draw(st.sampled_from(["int", "str", "range"]))
    if kind == "int":
        n = draw(big)
        return n, {n}
    if kind == "str":
        n = draw(big)
        return draw(st.sampled_from([str(n), f" {n} "])), {n}
    low = draw(small)
    high = draw(st.integers(min_value=low, max_value=low + 60))
    text = draw(st.sampled_from([f"{low}-{high}", f"{low} - {high}"]))
    return text, set(range(low, high + 1))


@settings(max_examples=150, deadline=None)
@given(st.lists(rank_item(), max_size=12), st.sampled_from(["rank", "step"]))
def test_rank_step_normalised_sorted_unique(items, key):
    raw = [item for item, _ in items]
    expected = sorted(set().union(*[covered for _, covered in items]))
    job = schemas.load_config({"task": "statistics", key: raw})
    assert getattr(job, key) == expected
    # dumps compact runs into ranges and load back to the same list
    dumped = schemas.dump_config(job)[key]
    assert schemas.load_config({"task": "statistics", key: dumped}) == job
    assert len(dumped) <= len(expected)


@settings(max_examples=150, deadline=None)
@given(st.lists(big, max_size=40))
def test_compact_ranks_covers_exactly(values):
    out = compact_ranks(values)
    covered = set()
    for item in out:
        if isinstance(item, str):
            low, high = map(int, item.split("-"))
            assert high - low >= 2  # only runs of three or more become ranges
            covered.update(range(low, high + 1))
        else:
            covered.add(item)
    assert covered == set(values)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=RANK_STEP_MAX), st.integers(min_value=0, max_value=RANK_STEP_MAX))
def test_reversed_ranges_always_rejected(a, b):
    low, high = sorted((a, b))
    if low == high:
        return
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "statistics", "step": [f"{high}-{low}"]})
    assert err.value.errors[0].path == "step[0]"


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=RANK_STEP_MAX + 1), st.booleans(),
                 st.floats(allow_nan=False, allow_infinity=False), st.none()))
def test_out_of_domain_elements_rejected(value):
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "statistics", "rank": [0, value]})
    assert [i.path for i in err.value.errors] == ["rank[1]"]


def test_monitor_and_compare_rank_lists_use_the_same_parser():
    job = schemas.load_config({"task": "monitor", "monitor": {"wg_distribution": True, "module_ranks": ["2-4", 0]}})
    assert job.monitor.module_ranks == [0, 2, 3, 4]
    job = schemas.load_config({"task": "compare", "compare": {"target_path": "a", "golden_path": "b",
                                                              "rank": [3, "0-1"], "step": ["5"]}})
    assert (job.compare.rank, job.compare.step) == ([0, 1, 3], [5])


def test_largest_range_is_accepted():
    job = schemas.load_config({"task": "statistics", "step": [f"0-{RANK_STEP_MAX}"]})
    assert len(job.step) == RANK_STEP_MAX + 1
    assert schemas.dump_config(job)["step"] == [f"0-{RANK_STEP_MAX}"]
