"""The app's figure blocks (docs/app.md's speed and document view, docs/benchmarks.md's runs of ``bench/app.py`` and
their goals), rendered from ``bench/results/app.json`` and ``document_view.json``; registered with
:func:`figure_results.figure` when imported."""

from __future__ import annotations

from figure_results import BUNDLED, Results, figure, model_name, source, verdict

#: the app's goals (issue 17): the table's label, the sentence's, the ``bench/app.py`` figure, the goal, unit, scale
APP_GOALS = (("matrix view interactive after navigation (warm loads)", "the matrix view is interactive after navigation",
              "matrix warm ms", 1500, "s", 1000),
             ("switching heads in the single view, click to drawn", "a head switch in the single view is drawn in",
              "head switch ms", 300, "ms", 1),
             ("search across all heads: the server's callback", "a search across all heads takes the server",
              "search server ms", 200, "ms", 1),
             ("bytes per single-head figure", "a single-head figure is", "single figure MB", 0.6, "MB", 1))
#: the names the bench's runs go by on the pages


def model(run: dict) -> str:
    return model_name(run.get("model") or run["run"])


def median(value) -> float:
    return value["median"] if isinstance(value, dict) else value


def amount(value: float, unit: str, scale: float) -> str:
    return f"{value / scale:.2f} {unit}" if unit in ("s", "MB") else f"{value / scale:,.0f} {unit}"


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
    header = "| goal, median | " + " | ".join(model(run) for run in runs) + " |\n|---|" + "---|" * len(runs)
    rows = []
    for label, _, key, goal, unit, scale in APP_GOALS:
        cells = [f"{amount(median(run[key]), unit, scale)}, {verdict(median(run[key]) <= goal)}" if key in run
                 else "not measured" for run in runs]
        rows.append(f"| {label}: ≤ {amount(goal, unit, scale)} | " + " | ".join(cells) + " |")
    matrix_goal = APP_GOALS[0][3]
    floor_says = (f"The floor alone (the empty page's median, {amount(floor['median'], 's', 1000)}) is "
                  + ("over the matrix goal: no matrix can meet it in this browser on this machine."
                     if floor["median"] > matrix_goal else "within the matrix goal."))
    adds = "; ".join(f"{model(run)} {amount(median(run['matrix warm ms']) - floor['median'], 's', 1000)}"
                     for run in runs)
    memory = "; ".join(f"{model(run)} {run['rss start MB']:,.0f} MB after start, {run['rss peak MB']:,.0f} MB at "
                       f"its peak" for run in runs)
    runs_held = "; ".join(f"{model(run)}: {held(run)}" for run in runs)
    missing = [name for key, name in BUNDLED.items() if key not in {run.get("model") or run["run"] for run in runs}]
    missing_says = (f" {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in the current result file: "
                    f"`python bench/app.py --run runs/minilm --run runs/smollm2 --repeats 5` measures both."
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
    for _, said, key, goal, unit, scale in APP_GOALS:
        measured = [run for run in runs if key in run]
        values = " and ".join(f"{amount(median(run[key]), unit, scale)} ({model(run)})" for run in measured)
        met = all(median(run[key]) <= goal for run in measured)
        parts.append(f"{said} {values}, goal ≤ {amount(goal, unit, scale)} {verdict(met)}")
    about = ", ".join(f"{model(run)} ({run['heads']} heads" + (f", {run['tokens']:,} tokens)" if "tokens" in run
                                                              else f", {run['points per head']:,} points a head)")
                      for run in runs)
    return (f"{about}; medians of {result['arguments']['repeats']} in headless Chromium with software WebGL on a "
            f"{result['machine']['cpus']}-core machine: " + "; ".join(parts) + ". An empty Dash page with one "
            f"10,000-point WebGL graph is drawn {amount(floor['median'], 's', 1000)} after navigation in the same "
            f"browser. `bench/app.py` ({source(results, 'app')}).\n")


@figure("document-view")
def document_view(results: Results) -> str:
    """docs/app.md's document view: opening a document and switching heads, against their goals."""
    result = results("document_view")
    opened, switch, server = result["open_to_drawn_3k"], result["head_switch_8k"], result["server_compute_8k"]

    def row(label: str, value: dict, goal: float | None) -> str:
        said = f"≤ {goal:.0f} s, " + verdict(value["median"] <= goal) if goal else ""
        return f"| {label} | {value['min']:.2f} s | {value['median']:.2f} s | {value['max']:.2f} s | {said} |"
    rows = [row(f"Document tab clicked → whole map drawn, {opened['tokens']:,} tokens", opened, opened.get("goal_s")),
            row(f"head switch (Head menu) → new map drawn, {switch['tokens']:,} tokens", switch, switch.get("goal_s")),
            row(f"server compute alone (map + profile), {switch['tokens']:,} tokens", server, None)]
    return ("| measure | min | median | max | goal (median) |\n|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\n`bench/document_view.py`, {len(opened['values'])} heads each ({source(results, 'document_view')}).\n")
