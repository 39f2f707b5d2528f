"""The app's figure blocks (docs/app.md's speed and document view, docs/benchmarks.md's runs of ``bench/app.py`` and
their goals), rendered from ``bench/results/app.json`` and ``document_view.json``; registered with
:func:`bench.figures.results.figure` when imported."""

from __future__ import annotations

from bench.figures.results import BUNDLED, Results, figure, model_name, source
from bench.figures.goals import Goal, verdict

#: the app's goals (issue 17): the table's label, the sentence's, the ``bench/app.py`` figure, the goal, unit, scale;
#: each judged on what the user meets, from the action to the drawn result (a search on Enter to the matches drawn)
APP_GOALS = (("matrix view interactive after navigation (warm loads)", "the matrix view is interactive after navigation",
              "matrix warm ms", 1.5, "s", 1000),
             ("switching heads in the single view, click to drawn", "a head switch in the single view is drawn in",
              "head switch ms", 300, "ms", 1),
             ("search across all heads, Enter to the matches drawn", "a search across all heads is drawn, from Enter, in",
              "search Enter to drawn ms", 200, "ms", 1),
             ("bytes per single-head figure", "a single-head figure is", "single figure MB", 0.6, "MB", 1))
#: the result file whose runs the goals judge
APP_RESULT = "app"


def app_goal(label: str, key: str, bound: float, unit: str, scale: float, run: dict,
             result: str = APP_RESULT) -> Goal:
    """An app goal judged on ``run``'s median of the bench's ``key`` (``scale`` turns it into ``unit``)."""
    def read(found: dict) -> float | None:
        measured = next((each for each in found["runs"] if each["run"] == run["run"]), None)
        return None if measured is None or key not in measured else median(measured[key]) / scale
    return Goal(label, bound, unit, True, result, f"{model(run)}, median", read, digits=0 if unit == "ms" else 2)


def model(run: dict) -> str:
    return model_name(run.get("model") or run["run"])


def median(value) -> float:
    return value["median"] if isinstance(value, dict) else value


def held(run: dict) -> str:
    """What a run held when it was measured, from the bench's own record of it."""
    layouts = run.get("layouts")
    if layouts is None:
        return "layouts not recorded"
    made = ", ".join(f"{method} for {count} heads" for method, count in layouts.items()) or "no layouts"
    atlas = "a head atlas" if run.get("atlas") else "no head atlas"
    return f"{run.get('tokens', run['points per head'] // 2):,} tokens, 2D layouts: {made}; {atlas}"


@figure("app-runs")
def app_runs(results: Results) -> str:
    """docs/benchmarks.md: what each run held, and every goal against each run's median."""
    result = results("app")
    runs, floor = result["runs"], result["floor_ms"]
    heads = " and ".join(f"{model(run)} ({run['heads']} heads)" for run in runs)
    header = "| goal | " + " | ".join(model(run) for run in runs) + " |\n|---|" + "---|" * len(runs)
    rows = []
    for label, _, key, bound, unit, scale in APP_GOALS:
        cells = [verdict(app_goal(label, key, bound, unit, scale, run), results) if key in run
                 else "not measured" for run in runs]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    matrix = APP_GOALS[0]
    floor_says = (f"The floor alone (the empty page's median, {floor['median'] / 1000:.2f} s) is "
                  + ("over the matrix goal: no matrix can meet it in this browser on this machine."
                     if floor["median"] / matrix[5] > matrix[3] else "within the matrix goal."))
    adds = "; ".join(f"{model(run)} {(median(run['matrix warm ms']) - floor['median']) / 1000:.2f} s"
                     for run in runs)
    memory = "; ".join(f"{model(run)} {run['rss start MB']:,.0f} MB after start, {run['rss peak MB']:,.0f} MB at "
                       f"its peak" for run in runs)
    runs_held = "; ".join(f"{model(run)}: {held(run)}" for run in runs)
    missing = [name for key, name in BUNDLED.items() if key not in {run.get("model") or run["run"] for run in runs}]
    missing_says = (f" {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in the current result file: "
                    f"`python -m bench.app --run runs/minilm --run runs/smollm2 --repeats 5` measures both."
                    if missing else "")
    return (f"The runs: {heads}. What each held: {runs_held}.{missing_says}\n\n{header}\n" + "\n".join(rows) + "\n\n"
            f"{floor_says} The matrix adds to the floor (medians): {adds}. The server's resident memory: {memory}. "
            f"`bench/app.py --repeats {result['arguments']['repeats']}` ({source(results, 'app')}).\n")


@figure("app-summary")
def app_summary(results: Results) -> str:
    """docs/app.md's speed: the medians of ``bench/app.py`` against the goals, in one paragraph."""
    result = results("app")
    runs, floor = result["runs"], result["floor_ms"]
    parts = []
    for label, said, key, bound, unit, scale in APP_GOALS:
        measured = [run for run in runs if key in run]
        judged = "; ".join(verdict(app_goal(label, key, bound, unit, scale, run), results) for run in measured)
        parts.append(f"{said}: goal {judged}")
    about = ", ".join(f"{model(run)} ({run['heads']} heads" + (f", {run['tokens']:,} tokens)" if "tokens" in run
                                                              else f", {run['points per head']:,} points a head)")
                      for run in runs)
    return (f"{about}; medians of {result['arguments']['repeats']} in headless Chromium with software WebGL on a "
            f"{result['machine']['cpus']}-core machine: " + "; ".join(parts) + ". An empty Dash page with one "
            f"10,000-point WebGL graph is drawn {floor['median'] / 1000:.2f} s after navigation in the same "
            f"browser. `bench/app.py` ({source(results, 'app')}).\n")


#: the document view's goals (issue 28), on the medians of ``bench/document_view.py``: click to the map drawn
DOCUMENT_OPEN = Goal("a 3,000-token document's whole map drawn after the Document tab is clicked", 5.0, "s", True,
                     "document_view", "click to drawn, median", lambda found: found["open_to_drawn_3k"]["median"], 2)
DOCUMENT_SWITCH = Goal("a head switch at 8,192 tokens drawn after the click", 2.0, "s", True, "document_view",
                       "click to drawn, median", lambda found: found["head_switch_8k"]["median"], 2)


@figure("document-view")
def document_view(results: Results) -> str:
    """docs/app.md's document view: opening a document and switching heads, against their goals."""
    result = results("document_view")
    opened, switch, server = result["open_to_drawn_3k"], result["head_switch_8k"], result["server_compute_8k"]

    def row(label: str, value: dict, goal: Goal | None) -> str:
        said = verdict(goal, results) if goal else ""
        return f"| {label} | {value['min']:.2f} s | {value['median']:.2f} s | {value['max']:.2f} s | {said} |"
    rows = [row(f"Document tab clicked → whole map drawn, {opened['tokens']:,} tokens", opened, DOCUMENT_OPEN),
            row(f"head switch (Head menu) → new map drawn, {switch['tokens']:,} tokens", switch, DOCUMENT_SWITCH),
            row(f"server compute alone (map + profile), {switch['tokens']:,} tokens", server, None)]
    return ("| measure | min | median | max | goal |\n|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\n`bench/document_view.py`, {len(opened['values'])} heads each ({source(results, 'document_view')}).\n")
