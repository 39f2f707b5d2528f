"""The app bench's figure blocks (``bench/app.py`` measures): the app's browser timings on the pages, each goal
with its verdict (the README's, ``docs/app.md``'s, ``docs/benchmarks.md``'s and ``docs/scale.md``'s blocks).
"""

from __future__ import annotations


from bench.figures.goals import Goal, verdict
from bench.figures.results import BUNDLED, Results, figure, model_name, source, span

# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

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
            f"browser.{loaded_plotly(result)} `bench/app.py` ({source(results, 'app')}).\n")


def loaded_plotly(result: dict) -> str:
    """Which plotly.js the app's pages and the floor loaded, where the run says (``bench.app.page_plotly_js``)."""
    return f" The app's pages and the floor loaded {result['plotly_js']}." if "plotly_js" in result else ""

#: the app's goals at 100,000 tokens (docs/benchmarks.md), each on what the user meets: the bench's figure, the
#: label, the bound in ms (a search on Enter to the matches drawn, not the server's part of it)
APP_GOALS_MS = {"matrix warm ms": ("matrix view, navigation to drawn, later loads", 2000),
                "head switch ms": ("head switch, click to drawn", 500),
                "search Enter to drawn ms": ("search across all heads, Enter to the matches drawn", 300)}

def milliseconds(value, unit: str = "ms") -> str:
    """A timing in ms (a summary's min / median / max, or one value), written in ``unit``: ms or s."""
    if isinstance(value, dict):
        return span(value, 2, " s", 1000) if unit == "s" else span(value, 0, " ms")
    return f"{value / 1000:.2f} s" if unit == "s" else f"{value:,.0f} ms"

def met(results: Results, run: dict, key: str) -> str:
    """The verdict on one of the app's goals at 100,000 tokens, from ``bench/results/app_100k.json``."""
    label, bound = APP_GOALS_MS[key]
    unit, scale = ("s", 1000) if bound >= 1000 else ("ms", 1)
    return verdict(app_goal(label, key, bound / scale, unit, scale, run, "app_100k"), results)

APP_MISSING = ("Not measured in the current result files: `python -m bench.app --run RUN --repeats 5 --json "
               "bench/results/app_100k.json` on a 100,000-token run with every head's PCA layouts (`python "
               "bench/scale.py --stages extract,project-pca` makes one) measures it.\n")

def app_result(results: Results) -> tuple[dict, dict] | None:
    """``bench/results/app_100k.json`` and its one run, or None when it is missing."""
    if not results.exists("app_100k"):
        return None
    result = results("app_100k")
    return result, result["runs"][0]

@figure("app-100k")
def app_100k(results: Results) -> str:
    if not (found := app_result(results)):
        return APP_MISSING
    result, run = found
    rows = [("empty Dash page with one 10,000-point WebGL graph (the floor)", milliseconds(result["floor_ms"], "s"), ""),
            ("matrix view, navigation to drawn: first load after the server starts (one)",
             milliseconds(run["matrix cold ms"], "s"), ""),
            ("matrix view, navigation to drawn: later loads", milliseconds(run["matrix warm ms"], "s"),
             met(results, run, "matrix warm ms"))]
    if "matrix coloured ms" in run:
        rows.append(("the matrix coloured by an atlas statistic", milliseconds(run["matrix coloured ms"], "s"), ""))
    if "positions ms" in run:
        rows.append(("Positions view", milliseconds(run["positions ms"], "s"), ""))
    rows += [("head switch in the single view, click to the new head drawn", milliseconds(run["head switch ms"]),
              met(results, run, "head switch ms")),
             ("search across all heads, Enter to the matches drawn", milliseconds(run["search Enter to drawn ms"]),
              met(results, run, "search Enter to drawn ms")),
             ("… of which the server's callback", milliseconds(run["search server ms"]), ""),
             ("bytes per head switch", f"{run['single figure MB']:.2f} MB", ""),
             ("bytes of the matrix figure", f"{run['matrix figure MB']:.2f} MB", ""),
             ("server memory: after start / peak", f"{run['rss start MB']:,.0f} / {run['rss peak MB']:,.0f} MB", "")]
    table = "\n".join(f"| {label} | {value} | {goal} |" for label, value, goal in rows)
    return (f"MiniLM, {run['points per head'] // 2:,} tokens ({run['points per head']:,} points a head, "
            f"{run['heads'].replace(' x ', ' × ')} heads, every head's PCA layout); min / median / max of "
            f"{result['arguments']['repeats']} or more.\n\n| | measured | goal |\n|---|---|---|\n{table}\n\n"
            f"`bench/app.py --repeats {result['arguments']['repeats']} --json bench/results/app_100k.json` "
            f"({source(results, 'app_100k')}).\n")

@figure("scale-app")
def scale_app(results: Results) -> str:
    if not (found := app_result(results)):
        return APP_MISSING
    result, run = found
    return (f"Medians of {result['arguments']['repeats']} or more: the matrix view is drawn "
            f"{milliseconds(run['matrix warm ms']['median'], 's')} after navigation ({met(results, run, 'matrix warm ms')}), where "
            f"an empty Dash page with one WebGL graph takes {milliseconds(result['floor_ms']['median'], 's')}; a head "
            f"switch takes {milliseconds(run['head switch ms']['median'])} from the click to the new head drawn "
            f"({met(results, run, 'head switch ms')}); an all-head search is drawn "
            f"{milliseconds(run['search Enter to drawn ms']['median'])} after Enter "
            f"({met(results, run, 'search Enter to drawn ms')}), {milliseconds(run['search server ms']['median'])} of it "
            f"on the server; the server peaks at {run['rss peak MB']:,.0f} MB. "
            f"({source(results, 'app_100k')}.)\n")

@figure("app")
def app(results: Results) -> str:
    result = results("app")
    runs = result["runs"]

    def timing(value) -> str:
        return (span(value, 0, " ms") if isinstance(value, dict)
                else "not measured" if value is None else f"{value:,.0f} ms")
    rows = [("matrix view, navigation to drawn: cold (one)", "matrix cold ms"),
            ("matrix view, navigation to drawn: warm", "matrix warm ms"),
            ("matrix coloured by an atlas statistic", "matrix coloured ms"), ("Positions view", "positions ms"),
            ("head switch, click to the new head drawn", "head switch ms"),
            ("search across all heads, Enter to the matches drawn", "search Enter to drawn ms"),
            ("… of which the server's callback", "search server ms")]
    rows = [(label, key) for label, key in rows if any(key in run for run in runs)]
    header = "| min / median / max | " + " | ".join(f"{run['run']} ({run['heads']} heads, {run['points per head']:,} "
                                                       f"points a head)" for run in runs) + " |"
    table = "\n".join(f"| {label} | " + " | ".join(timing(run.get(key)) for run in runs) + " |" for label, key in rows)
    sizes = "; ".join(f"{run['run']}: a head switch sends {run['single figure MB']:.2f} MB, the matrix "
                      f"{run['matrix figure MB']:.2f} MB, the server peaks at {run['rss peak MB']:,.0f} MB" for run in runs)
    floor = result["floor_ms"]
    return (f"{header}\n|---|" + "---|" * len(runs) + f"\n{table}\n\n{sizes}. An empty Dash page with one "
            f"10,000-point WebGL graph (the floor) is drawn {timing(floor)} after navigation. "
            f"`bench/app.py --repeats {result['arguments']['repeats']}` ({source(results, 'app')}).\n")
