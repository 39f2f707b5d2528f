"""Every "exact" in the families' result files is exact as docs/families.md defines it: within 1e-5 of the model's
own eager attention (a type's own bound only with its stated reason of precision) and at least 0.05 from uniform;
every "not shown exact" misses that; the files record that definition and the page states it in its own words.
Reads bench/results/family_sweep.json and bench/results/families.json; loads no model."""

from __future__ import annotations

import json

import pytest

from bench.figures.definitions import Bound, Definition, problems, record, unstated
from support.family_exactness import FAMILY_EXACT, MIN_DEPARTURE, NOT_SHOWN, TOLERANCE
from support import REPO


def result(name: str) -> dict:
    return json.loads((REPO / "bench" / "results" / f"{name}.json").read_text(encoding="utf-8"))["figures"]


def test_every_verdict_of_the_family_sweep_is_the_page_definition():
    figures = result("family_sweep")
    lines = [line for release in figures["releases"]
             for line in problems(FAMILY_EXACT, release["rows"], where=f"transformers {release['transformers']}: ")]
    lines += problems(FAMILY_EXACT, [], recorded=figures.get("definition"), root=REPO)
    assert not lines, "\n".join(lines)


def test_every_verdict_of_the_families_table_bench_is_the_page_definition():
    figures = result("families")
    recorded = figures.get("definition")     # files before the definition was recorded give its two bounds
    assert figures["bound"] == {"tolerance": TOLERANCE, "min_departure": MIN_DEPARTURE}
    lines = problems(FAMILY_EXACT, figures["families"], recorded=recorded, root=REPO)
    assert not lines, "\n".join(lines)


def test_the_page_states_the_bounds_its_figures_are_held_to():
    assert not unstated(FAMILY_EXACT, REPO)
    assert TOLERANCE == 1e-5 and MIN_DEPARTURE == 0.05      # the numbers FAMILY_EXACT's stated words give


# the helper itself, on rows made up here

WORD = Definition("exact", "docs/families.md", otherwise=("not shown exact",),
                  bounds=(Bound("max_error", most=1e-5, stated="to 1e-5 in float32", own={"odd": (1e-3, "float16")}),
                          Bound("departure_from_uniform", least=0.05, stated="at least 0.05 from uniform")))


def row(status: str, error: float | None, departure: float = 0.5, name: str = "a") -> dict:
    return {"model_type": name, "status": status, "max_error": error, "departure_from_uniform": departure}


@pytest.mark.parametrize("rows, expected", [
    ([row("exact", 1e-7)], []),
    ([row("exact", 2e-5)], ["a is called exact: max_error 2e-05 > 1e-05"]),
    ([row("exact", 1e-7, 0.02)], ["a is called exact: departure_from_uniform 0.02 < 0.05"]),
    ([row("exact", None)], ["a is called exact: max_error not recorded"]),
    ([row("exact", 5e-4, name="odd")], []),
    ([row("exact", 2e-3, name="odd")], ["odd is called exact: max_error 0.002 > 0.001 (its own bound)"]),
    ([row("not shown exact", 1e-7)], ["a is called not shown exact, yet meets every bound of exact"]),
    ([row("not shown exact", 1e-7, 0.01)], []),
    ([{"model_type": "b", "status": "refused"}], []),
])
def test_a_verdict_disagreeing_with_its_definition_is_named(rows, expected):
    assert problems(WORD, rows) == expected


def test_a_recorded_definition_other_than_the_declared_one_is_named():
    assert problems(WORD, [], recorded=record(WORD)) == []
    other = {**record(WORD), "bounds": [{**record(WORD)["bounds"][0], "most": 2e-3}, record(WORD)["bounds"][1]]}
    assert len(problems(WORD, [], recorded=other)) == 1


def test_a_bound_the_page_does_not_state_is_named(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "families.md").write_text("Exact: to 1e-5 in float32; odd has its own.\n<!-- figures:x -->\n"
                                                   "at least 0.05 from uniform\n<!-- /figures -->\n")
    assert unstated(WORD, tmp_path) == ["docs/families.md does not state exact's bound on departure_from_uniform: "
                                        "'at least 0.05 from uniform'"]


def test_an_own_bound_needs_a_reason():
    with pytest.raises(ValueError, match="gives no reason"):
        Bound("max_error", most=1e-5, own={"odd": (1e-3, " ")})
    assert NOT_SHOWN in FAMILY_EXACT.otherwise
