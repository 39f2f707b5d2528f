"""bench/figures/goals.py: one function says whether a goal is met, from the quantity its declaration names."""

from __future__ import annotations

import pytest

from bench.figures import goals


def files(**results):
    """A stand-in for bench.figures.results.Results: result files by name."""
    return lambda name: results[name]


DRAWN = goals.Goal("a matrix drawn", 3, "s", True, "grid", "cold median", lambda found: found["cold_ms"] / 1000)
RECALL = goals.Goal("recall on every head", 0.3, "", False, "sweep", "lowest head",
                    lambda found: min(found["recall"]) if found["recall"] else None, 3)


def test_a_bound_is_met_up_to_and_at_it_and_not_past_it():
    assert goals.verdict(DRAWN, files(grid={"cold_ms": 3000})) == "≤ 3 s, met (cold median: 3.0 s)"
    assert goals.verdict(DRAWN, files(grid={"cold_ms": 4446})) == "≤ 3 s, **not met** (cold median: 4.4 s)"


def test_a_lower_bound_is_judged_the_other_way():
    assert goals.verdict(RECALL, files(sweep={"recall": [0.5, 0.31]})).startswith("≥ 0.3, met")
    assert goals.verdict(RECALL, files(sweep={"recall": [0.5, 0.29]})) == "≥ 0.3, **not met** (lowest head: 0.290)"


def test_a_goal_whose_quantity_is_missing_is_not_judged():
    with pytest.raises(goals.NotJudged, match="holds no lowest head"):
        goals.verdict(RECALL, files(sweep={"recall": []}))


def test_every_verdict_and_stated_bound_is_recorded():
    goals.ISSUED.clear()
    goals.STATED.clear()
    said = goals.verdict(DRAWN, files(grid={"cold_ms": 1000}))
    assert goals.ISSUED == [(DRAWN, said)]
    assert RECALL.stated() == "≥ 0.3" and goals.STATED == ["≥ 0.3"]


def test_a_goal_over_several_files_reads_them_all():
    largest = goals.Goal("every command's peak", 4, "GB", True, ("a", "b"), "the largest peak",
                         lambda found: max(result["peak"] for result in found.values()), 2)
    assert goals.verdict(largest, files(a={"peak": 1.0}, b={"peak": 4.5})) == \
        "≤ 4 GB, **not met** (the largest peak: 4.50 GB)"
