"""The matrix view against the floor, in one browser and one run (issue 39, point 1):

    python -m bench.matrix_floor --run runs/minilm --run RUN_1024 [--repeats 5]

The **floor** is the project's empty page: a Dash page with one Plotly graph of 10,000 WebGL points and nothing else
(``bench.app.FLOOR_APP``), what any Dash app drawing one Plotly figure pays (loading Plotly's bundle, starting
WebGL). For each ``--run`` (its PCA 2D layouts made), ``qkviz serve --background none`` serves it beside the floor's
app, and Debian's headless Chromium (software WebGL, no GPU) in a 1400 x 900 window times, ``--repeats`` rounds:

* **cold**: a new browser context (nothing cached), from the start of navigation to the page drawn (the floor's
  graph, or the matrix's six traces with its heads' image, no callback pending);
* **warm**: a reload of the same page (Plotly's bundle and the assets cached).

Each round times the floor and the matrix one after the other, the floor first in even rounds and the matrix
first in odd ones, so that both meet the same load. The **ratio** is the matrix's median over the floor's median,
cold and warm; the goal is judged on both (a new visitor, and a reload), each verdict shown. Writes ``--out``
(``bench/results/matrix_floor.json``) with the date, the machine, its load average and the arguments. ``--smoke``:
one round on the run given, the result in a temporary file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from bench.app import FLOOR_APP, start, stop  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, source, span  # noqa: E402
from bench.harness import Recorder, smoke_arguments, summary  # noqa: E402
from bench.matrix_grid import DRAWN as MATRIX_DRAWN, WINDOW, serve  # noqa: E402
from bench.support.browser import CHROMIUM, free_port, launch_chromium  # noqa: E402

#: the floor's graph drawn; records the time once
FLOOR_DRAWN = """() => {
  const graph = document.querySelector('#graph .js-plotly-plot');
  const ready = graph && graph._fullData && graph._fullData.length >= 1 && !document.querySelector('[data-dash-is-loading="true"]');
  return ready && (window.__done = window.__done || performance.now());
}"""
#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--run", "{run}")


def drawn_ms(page, url: str, drawn: str) -> float:
    """Milliseconds from navigation to ``drawn`` true in ``page``."""
    page.goto(url)
    page.wait_for_function(drawn, timeout=300_000, polling="raf")
    return page.evaluate("() => window.__done")


def cold_and_warm(browser, url: str, drawn: str) -> tuple[float, float]:
    """A load in a new context (cold), then a reload of the same page (warm)."""
    context = browser.new_context(viewport=WINDOW)
    try:
        page = context.new_page()
        return drawn_ms(page, url, drawn), drawn_ms(page, url, drawn)
    finally:
        context.close()


def bench_run(browser, run: Path, floor_url: str, repeats: int) -> dict:
    from qkviz import open_run

    opened = open_run(run)
    server, url = serve([run])
    try:
        context = browser.new_context(viewport=WINDOW)       # the first load waits for the server's warm-up
        drawn_ms(context.new_page(), url, MATRIX_DRAWN)
        context.close()
        times: dict[str, dict[str, list[float]]] = {"floor": {"cold": [], "warm": []}, "matrix": {"cold": [], "warm": []}}
        for round_number in range(repeats):
            order = [("floor", floor_url, FLOOR_DRAWN), ("matrix", url, MATRIX_DRAWN)]
            for name, address, drawn in order if round_number % 2 == 0 else order[::-1]:
                cold, warm = cold_and_warm(browser, address, drawn)
                times[name]["cold"].append(cold)
                times[name]["warm"].append(warm)
    finally:
        server.terminate()
        server.wait(timeout=30)
    found = {"run": str(run), "heads": opened.n_layers * opened.n_heads, "grid": f"{opened.n_layers} x {opened.n_heads}",
             "tokens": opened.n_tokens,
             **{name: {kind: summary(values, 0) for kind, values in kinds.items()} for name, kinds in times.items()}}
    found["ratio"] = {kind: round(statistics.median(times["matrix"][kind]) / statistics.median(times["floor"][kind]), 2)
                      for kind in ("cold", "warm")}
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, action="append", required=True, help="a run with its PCA 2D layouts "
                        "(repeatable: e.g. the bundled MiniLM's 72 heads and a 1,024-head run)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/matrix_floor.json")
    args = smoke_arguments(parser, argv, repeats=1)
    from playwright.sync_api import sync_playwright

    recorder = Recorder("matrix_floor", vars(args), args.out)
    port = free_port()
    floor = start([sys.executable, "-c", FLOOR_APP, str(port)], port)
    runs = []
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            for run in args.run:
                started = time.monotonic()
                runs.append(bench_run(browser, run, f"http://127.0.0.1:{port}/", args.repeats))
                print(f"{run}: matrix / floor, cold {runs[-1]['ratio']['cold']}, warm {runs[-1]['ratio']['warm']} "
                      f"({time.monotonic() - started:.0f} s)")
            browser.close()
    finally:
        stop(floor)
    print(f"wrote {recorder.write(chromium=str(CHROMIUM), window=WINDOW, runs=runs)}")


def ratio(heads: int, kind: str):
    """Reads the result file's ``kind`` (cold or warm) ratio of its run of ``heads`` heads (None: not measured)."""
    def read(found: dict) -> float | None:
        run = next((run for run in found["runs"] if run["heads"] == heads), None)
        return None if run is None else run["ratio"][kind]
    return read


# The goals the pages' figure blocks judge from this bench's result file, each by ``bench.figures.goals.verdict``.

#: issue 39: the matrix drawn in at most 1.2 times the floor's time, at 72 heads (MiniLM) and at 1,024, judged cold
#: (a new visitor: a new browser context) and warm (a reload): ``{(heads, kind): goal}``
MATRIX_FLOOR = {(heads, kind): Goal(f"the {heads:,}-head matrix over the floor, {kind}", 1.2, "×", True, "matrix_floor",
                                    f"{heads:,} heads, {kind} medians' ratio", ratio(heads, kind), 2)
                for heads in (72, 1024) for kind in ("cold", "warm")}


@figure("matrix-floor")
def matrix_floor(results: Results) -> str:
    """docs/scale.md: the matrix against the floor, cold and warm, per run, with the goal's verdict."""
    result = results("matrix_floor")
    rows = []
    for heads in (72, 1024):
        run = next((run for run in result["runs"] if run["heads"] == heads), None)
        if run is None:
            rows.append(f"| {heads:,}-head matrix | not measured | | | | | | | |")
            continue
        rows.append(f"| {run['grid']} heads, {run['tokens']:,} tokens | {span(run['floor']['cold'], 2, ' s', 1000)} | "
                    f"{span(run['matrix']['cold'], 2, ' s', 1000)} | {run['ratio']['cold']:.2f}× | "
                    f"{span(run['floor']['warm'], 2, ' s', 1000)} | {span(run['matrix']['warm'], 2, ' s', 1000)} | "
                    f"{run['ratio']['warm']:.2f}× | {verdict(MATRIX_FLOOR[heads, 'cold'], results)} | "
                    f"{verdict(MATRIX_FLOOR[heads, 'warm'], results)} |")
    repeats = result["arguments"]["repeats"]
    return ("| run | floor, cold | matrix, cold | cold ratio | floor, warm | matrix, warm | warm ratio | goal, cold | "
            "goal, warm |\n|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"Min / median / max of {repeats} rounds, the floor and the matrix alternating which goes first. "
            f"`python -m bench.matrix_floor --run RUN --run RUN_1024 --repeats {repeats}` ({source(results, 'matrix_floor')}).\n")


if __name__ == "__main__":
    main()
