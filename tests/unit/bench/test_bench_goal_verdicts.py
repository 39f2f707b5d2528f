"""The verdicts of the search, extraction, matrix, app, explain and faithful figure blocks agree with what their pages
define, each worked out here from bench/results/*.json on its own (not through the goals' own reads):

* a search is judged from Enter to *its own* matches drawn: every search of the app's result files has one server
  timing of its own, its answer arrived before it was drawn, and the page's verdict is the median of the searches;
* every run of the extraction goal is on the page, and the verdict is the median of every pair of every run of the
  latest run's code;
* the matrix goals are judged cold and warm, both verdicts shown;
* a head counted faithful meets both conditions, partner recall and trustworthiness;
* explain's memory is stated as measured, a computed figure only labelled as computed;
* the direct effects are judged on the median of every round's paired ratio (direct effects over the forward pass).

Reads the result files and renders the blocks; runs no bench."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.figures.pages import FIGURES      # importing the pages registers every block
from bench.figures.results import Results
from bench.direct_effects import DIRECT_EFFECTS_TIME
from bench.faithful_sample import faithful_heads
from qkviz.neighbours import RECALL_GOAL, TRUST_GOAL
from support import REPO


def figures(name: str) -> dict:
    return json.loads((REPO / "bench" / "results" / f"{name}.json").read_text(encoding="utf-8"))["figures"]


def block(name: str) -> str:
    return FIGURES[name](Results(REPO))


def said(met: bool) -> str:
    return "met" if met else "**not met**"


def line_of(text: str, start: str) -> str:
    found = [line for line in text.splitlines() if line.startswith(start)]
    assert len(found) == 1, f"no single line starting {start!r} in:\n{text}"
    return found[0]


# -- the app's search: Enter to its own matches drawn -------------------------------------------------------------

@pytest.mark.parametrize("name", ["app", "app_100k"])
def test_every_search_is_timed_to_its_own_matches_with_its_own_server_timing(name):
    for run in figures(name)["runs"]:
        searches = run.get("searches")
        assert searches, f"{name}.json, {run['run']}: no per-search record (measured before a search waited for its own matches)"
        drawn, server = run["search Enter to drawn ms"], run["search server ms"]
        assert drawn["runs"] == server["runs"] == len(searches), (name, run["run"], drawn["runs"], server["runs"])
        assert len({search["query"] for search in searches}) == len(searches)
        for search in searches:
            assert search["matrix requests"] >= 1 and search["answered before drawn"], (name, search)
            assert search["server ms"] <= search["Enter to drawn ms"], (name, search)
        assert sorted(drawn["values"]) == sorted(search["Enter to drawn ms"] for search in searches)
        assert sorted(server["values"]) == sorted(search["server ms"] for search in searches)


def test_the_search_verdict_at_100000_tokens_is_the_median_of_its_searches():
    run = figures("app_100k")["runs"][0]
    median = statistics.median(search["Enter to drawn ms"] for search in run["searches"])
    row = line_of(block("app-100k"), "| search across all heads, Enter to the matches drawn |")
    assert f"≤ 300 ms, {said(median <= 300)} (MiniLM, median: {median:,.0f} ms)" in row


def test_the_app_summary_judges_each_runs_search_on_its_median():
    result = figures("app")
    text = block("app-summary")
    for run in result["runs"]:
        median = statistics.median(search["Enter to drawn ms"] for search in run["searches"])
        assert f"≤ 200 ms, {said(median <= 200)} (" in text and f"median: {median:,.0f} ms)" in text


# -- extraction: every run reported, judged on every run of today's code -----------------------------------------

#: (result file, model, whether a goal is judged on it): the goal's measure (held-out text at the goal's count) and
#: the measure before it (the bundled corpus at 10,000 tokens), whose runs are listed and never judged
EXTRACT_FILES = [("extract_minilm_100k", "MiniLM", True), ("extract_smollm2_10k", "SmolLM2", True),
                 ("extract_minilm", "MiniLM", False), ("extract_smollm2", "SmolLM2", False)]


def check_the_extraction_block(root: Path, text: str) -> None:
    for name, model, goal in EXTRACT_FILES:
        path = root / "bench" / "results" / f"{name}.json"
        if not path.exists():
            assert not goal or f"{model}'s not measured yet (`python -m bench.extract --model {model.lower()}`)" in text
            continue
        found = json.loads(path.read_text(encoding="utf-8"))["figures"]
        runs = found["runs"]
        assert runs[-1]["ratio"] == found["ratio"], "the latest run is the file's own figures"
        if goal:
            latest = runs[-1]["code"]
            judged = runs[-1:] if latest == "unknown" else [run for run in runs if run["code"] == latest]
            median = statistics.median(value for run in judged for value in run["ratio"]["values"])
            assert f"{model}'s ≤ 1.25, {said(median <= 1.25)} (median of every pair of every run of the latest run's " \
                   f"code: {median:.2f})" in text
        what = "held-out text" if goal else "the bundled corpus"
        listed = text.split(f"{model}'s runs ({found['tokens']:,} tokens, {what}), every one written", 1)[1].split(". ")[0]
        for run in runs:
            ratio = run["ratio"]
            assert f"{ratio['runs']} pairs {ratio['min']:.2f} / {ratio['median']:.2f} / {ratio['max']:.2f}" in listed
        for run in found.get("runs_not_kept", []):
            assert f"{run['pairs']} pairs, median {run['median']:.2f}" in listed
        assert listed.count("judged") == len(runs)
        assert listed.count("the measure before, not judged") == (0 if goal else len(runs))


def test_the_extraction_verdict_covers_every_run_and_the_page_lists_them():
    check_the_extraction_block(REPO, block("extract-goal"))


def test_a_goal_file_is_judged_on_every_pair_of_its_latest_code_and_lists_every_run(tmp_path):
    """A goal file of three runs: one of earlier code (not judged, listed), two of the latest code, whose six pairs
    judge the goal (their median 1.35: not met, where the latest run's own median, 1.5, or the earlier code's, 1.1,
    would say otherwise)."""
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    for name in ("extract_minilm", "extract_smollm2"):
        (results / f"{name}.json").write_text((REPO / "bench" / "results" / f"{name}.json").read_text())
    record = json.loads((REPO / "bench" / "results" / "extract_minilm.json").read_text())
    record["arguments"].update(tokens=100_000, corpus="held-out")

    def run(code: str, values: list[float]) -> dict:
        ratio = {"min": min(values), "median": statistics.median(values), "max": max(values), "runs": len(values),
                 "values": values}
        return {"date": "2026-12-08T10:00:00+00:00", "commit": "abc", "code": code,
                "load_average": {"min": 0.5, "max": 1.5}, "tokens": 99_990, "ratio": ratio,
                "ratio_without_model_load": ratio}

    runs = [run("before", [1.1, 1.1, 1.1]), run("today", [1.1, 1.2, 1.3]), run("today", [1.4, 1.5, 1.6])]
    record["figures"] = {"tokens": 99_990, "ratio": runs[-1]["ratio"], "runs": runs, "runs_not_kept": [],
                         "child_extract": {"tokens": 99_990, "seconds": 40.0, "peak_mb": 700, "run_mb": 980}}
    (results / "extract_minilm_100k.json").write_text(json.dumps(record))
    text = FIGURES["extract-goal"](Results(tmp_path))
    assert "MiniLM's ≤ 1.25, **not met** (median of every pair of every run of the latest run's code: 1.35)" in text
    assert "2026-12-08 (earlier code, not judged; load 0.5–1.5): 3 pairs 1.10 / 1.10 / 1.10" in text
    assert "(`bench/results/extract_minilm_100k.json`)" in text        # the peak read from the goal's own run
    check_the_extraction_block(tmp_path, text)


# -- the matrix: cold and warm ---------------------------------------------------------------------------------------

def test_the_matrix_floor_goal_is_judged_cold_and_warm():
    text = block("matrix-floor")
    for run in figures("matrix_floor")["runs"]:
        row = line_of(text, f"| {run['grid']} heads, {run['tokens']:,} tokens |")
        verdicts = row.split(" | ")[-2:]
        for kind, shown in zip(("cold", "warm"), verdicts):
            ratio = statistics.median(run["matrix"][kind]["values"]) / statistics.median(run["floor"][kind]["values"])
            assert abs(ratio - run["ratio"][kind]) < 0.006
            assert shown.startswith(f"≤ 1.2×, {said(run['ratio'][kind] <= 1.2)} ({run['heads']:,} heads, {kind} ")


def test_the_1024_head_matrix_is_judged_cold_and_on_reload():
    loads = figures("matrix_grid")["load_to_drawn"]
    text = block("modern-table")
    for kind, word in (("cold", "cold"), ("warm", "reload")):
        median = statistics.median(loads[kind]["runs_ms"]) / 1000
        assert f"{word} ≤ 3 s, {said(median <= 3)} ({word} median: {median:.1f} s)" in text


# -- faithful heads: recall and trust, both ---------------------------------------------------------------------------

def test_a_head_counted_faithful_meets_both_conditions():
    models = figures("faithful_sample")["models"]
    text = block("trust-ceiling")
    for model, found in models.items():
        rows = [row for row in found["rows"] if row["method"] == "attn-tsne"]
        both = sum(row["recall"] >= RECALL_GOAL and row["trust"] >= TRUST_GOAL for row in rows)
        goal = len(found["heads"]) * 14 / 16
        assert (f"≥ {goal:.0f} heads, {said(both >= goal)} (heads of {len(found['heads'])} with recall ≥ "
                f"{RECALL_GOAL:.2f} and trustworthiness ≥ {TRUST_GOAL:.2f}, both: {both} heads)") in text
    trusted_only = {"rows": [{"method": "attn-tsne", "recall": 0.1, "trust": 0.95},
                             {"method": "attn-tsne", "recall": 0.4, "trust": 0.95},
                             {"method": "attn-tsne", "recall": 0.4, "trust": 0.5}]}
    assert faithful_heads({"m": trusted_only}, "m", "attn-tsne") == 1


# -- explain: memory as measured -----------------------------------------------------------------------------------

def test_explains_memory_is_stated_as_measured_and_a_computed_figure_labelled_so():
    memory = figures("explain")["memory"]
    text = block("explain-speed")
    line = line_of(text, "- **Memory, measured**")
    measured, computed = line.split("**Computed**, not measured")
    assert f"the whole process {memory['peak_mb']:,.0f} MB" in measured
    for name, peak in (memory.get("step_peak_mb") or {}).items():
        assert peak is None or f"{name} {peak:,.0f} MB" in measured
    assert f"{memory['largest_parts_block_mb']:,.0f} MB" in computed
    assert f"{memory['largest_parts_block_mb']:,.0f} MB" not in measured
    assert "held at once" not in text


# -- direct effects: the ratio of each round's pair ----------------------------------------------------------------

def test_the_direct_effects_verdict_is_the_median_of_every_rounds_paired_ratio():
    found = figures("direct_effects")
    ratios = []
    for token in found["tokens"]:
        orders = token["orders"]
        assert len({tuple(order) for order in orders}) == min(len(orders), 3), "the ways' order turns each round"
        ratios += [ours / theirs for ours, theirs in zip(token["direct effects"]["values"], token["forward"]["values"])]
    median = statistics.median(ratios)
    assert abs(found["ratio"]["median"] - median) <= 0.01 * median      # the file's seconds are rounded to 1 ms
    text = line_of(block("direct-effects-speed"), "- **Ratio**")
    assert f"goal {DIRECT_EFFECTS_TIME.bound_text()}, {said(median <= DIRECT_EFFECTS_TIME.bound)} (" in text
