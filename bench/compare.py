"""Compare and selection benchmark: ``qkviz compare`` on every head, and the server's work for a large selection.

    python -m bench.compare [--run runs/minilm] [--tokens 5000] [--other RUN] [--points 10000] [--repeats 2]
                            [--browser] [--browser-repeats 5] [--out bench/results/compare.json]

Makes the MiniLM run when it is missing (the bundled corpus, ``--tokens`` tokens). Times ``qkviz -q compare``
end to end in a child process (wall time and peak memory) between the run and ``--other`` -- by default a copy
of the run itself: the work does not depend on the values, only on the tokens and heads (and the result is then
0 for every head, which the script checks). Then times what the app's server does for a lasso selection of
``--points`` points (at most all of the run's queries and keys): checking the relayed payload, building the
selection's table (every row, for the CSV) and the page's first rows, and writing the CSV. With ``--browser``,
also in headless Chromium (the run served in this process): a box over the whole of the single view's PCA
layout of layer 0 head 0 (every query and key selected), from the mouse's release to the table drawn.
Writes ``bench/results/compare.json`` (``--out``); ``--repeats`` times the compare and the selection that often.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import qkviz  # noqa: E402
from dash_app.panels.selection import selected_points, selection_frame, selection_table  # noqa: E402
from dash_app.data.run_data import RunData  # noqa: E402

from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402
from bench.figures.results import Results, figure, model_name, source, span  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]


def time_compare(run: Path, other: Path, table: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one ``qkviz compare`` child process (its own peak: its ``VmHWM``, ``bench.harness``)."""
    child = run_measured([*QKVIZ, "-q", "compare", "--run", str(run), "--run", str(other), "--out", str(table)],
                         stdout=subprocess.DEVNULL)
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz compare failed with exit status {child['returncode']}")
    return child["seconds"], child["peak_mb"]


def time_selection(run, count: int) -> dict:
    data = RunData(run, run.path.name)
    n_tokens = run.n_tokens
    points = np.random.default_rng(0).choice(2 * n_tokens, size=min(count, 2 * n_tokens), replace=False)
    payload = {"curves": (points >= n_tokens).astype(int).tolist(), "points": points.tolist()}
    data.norms(0, 0)                                     # read once, as the drawn figure already has
    start = time.perf_counter()
    chosen = selected_points(payload, n_tokens)
    frame = selection_frame(data, 0, 0, chosen)
    selection_table(data, frame)
    table_seconds = time.perf_counter() - start
    start = time.perf_counter()
    csv = frame.to_csv(index=False)
    csv_seconds = time.perf_counter() - start
    print(f"selection of {len(chosen):,} points: checked, tabled and first rows drawn in {table_seconds * 1000:.0f} ms; "
          f"CSV ({len(csv) / 1e6:.1f} MB) in {csv_seconds * 1000:.0f} ms")
    return {"points": len(chosen), "table_seconds": table_seconds, "csv_seconds": csv_seconds, "csv_mb": len(csv) / 1e6}


PLOT_AREA_JS = """() => {
  const graph = document.querySelector('#single-graph .js-plotly-plot');
  const box = graph.getBoundingClientRect(), size = graph._fullLayout._size;
  return [box.left + size.l, box.top + size.t, size.w, size.h];
}"""


def time_browser_selection(run) -> float:
    """Seconds from releasing a box over every point of the single view to the selection's table drawn."""
    from playwright.sync_api import sync_playwright
    from bench.support.browser import launch_chromium, new_page, served_in_thread, wait_idle

    from dash_app.app import create_app

    with served_in_thread(create_app([run.path])) as url, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page, _ = new_page(browser)
        page.goto(url + "?view=single&layer=0&head=0&method=pca&dim=2")
        page.wait_for_function("() => { const g = document.querySelector('#single-graph .js-plotly-plot');"
                               " return g && g.data && g.data.length > 4; }", timeout=120_000)
        wait_idle(page, 120_000)
        left, top, width, height = page.evaluate(PLOT_AREA_JS)
        page.mouse.move(left + 10, top + 10)
        page.click("#single-graph .modebar-btn[data-attr='dragmode'][data-val='select']")
        page.mouse.move(left + 2, top + 2)
        page.mouse.down()
        page.mouse.move(left + width - 2, top + height - 2, steps=10)
        start = time.perf_counter()
        page.mouse.up()
        page.wait_for_function("(n) => document.getElementById('selection-table').innerText.startsWith(n + ' points')",
                               arg=f"{2 * run.n_tokens:,}", timeout=120_000)
        seconds = time.perf_counter() - start
        browser.close()
    print(f"in the browser: a box over all {2 * run.n_tokens:,} points to its table drawn in {seconds:.2f} s")
    return seconds


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "minilm")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--other", type=Path, help="the run to compare with (default: a copy of --run)")
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--browser", action="store_true", help="also time a whole-layout selection in Chromium")
    parser.add_argument("--repeats", type=int, default=2, help="compares and selections timed (default 2)")
    parser.add_argument("--browser-repeats", type=int, default=5,
                        help="whole-layout selections timed in Chromium with --browser, each in a fresh page (default 5)")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/compare.json)")
    args = smoke_arguments(parser, argv, out='out', tokens=400, points=50, repeats=1, browser=False)
    recorder = Recorder("compare", vars(args), out=args.out)
    if not args.run.exists():
        qkviz.extract("minilm", REPO / "data" / "sentences.txt", args.run, max_tokens=args.tokens)
    run = qkviz.open_run(args.run)
    with tempfile.TemporaryDirectory() as scratch:
        other = args.other
        if other is None:
            other = Path(scratch) / "copy"
            shutil.copytree(args.run, other, ignore=shutil.ignore_patterns("projections", "indexes", "stats", "related"))
        timings = [time_compare(args.run, other, Path(scratch) / "change.csv") for _ in range(args.repeats)]
        table = pd.read_csv(Path(scratch) / "change.csv")
    seconds = [t for t, _ in timings]
    peak_mb = max(m for _, m in timings)
    print(f"qkviz compare: {len(table)} heads of {run.model_id} over {run.n_tokens:,} tokens in "
          f"{', '.join(f'{t:.1f}' for t in seconds)} s (peak {peak_mb:.0f} MB); mean JS distance "
          f"{table.mean_js.mean():.4f} (max {table.mean_js.max():.4f})")
    if args.other is None:
        assert (table.mean_js == 0).all(), "a run compared with its copy must give 0"
    selections = [time_selection(run, args.points) for _ in range(args.repeats)]
    browser = [time_browser_selection(run) for _ in range(args.browser_repeats)] if args.browser else []
    written = recorder.write(
        model=run.model_id, tokens=run.n_tokens, heads=len(table), with_itself=args.other is None,
        compare_seconds=summary(seconds), compare_peak_mb=peak_mb, selection_points=selections[0]["points"],
        selection_seconds=summary([s["table_seconds"] for s in selections]),
        csv_seconds=summary([s["csv_seconds"] for s in selections]), csv_mb=selections[0]["csv_mb"],
        browser_seconds=summary(browser) if browser else None)
    print(f"wrote {written}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

# -- compare and selection -------------------------------------------------------------------------
@figure("compare")
def compare(results: Results) -> str:
    result = results("compare")
    runs = result["compare_seconds"]["runs"]
    itself = (" with a copy of itself (every head's distance is then 0, as the bench checks)" if result["with_itself"]
              else " with another run")
    browser = result.get("browser_seconds")
    text = (f"`qkviz compare` of the {model_name(result['model'])} run ({result['tokens']:,} tokens)"
            f"{itself}, {result['heads']} heads, end to end in a child process: {span(result['compare_seconds'])} "
            f"(min / median / max of {runs}), peak RSS {result['compare_peak_mb']:,.0f} MB. The server's work for a "
            f"selection of {result['selection_points']:,} points (checking the payload, the table of every point for "
            f"the CSV, the page's first rows): {span(result['selection_seconds'], 2)}; the CSV ({result['csv_mb']:.1f} MB): "
            f"{span(result['csv_seconds'], 2)}.")
    if browser:
        text += (f" In headless Chromium, a box over the whole PCA layout of L0 H0 (all {2 * result['tokens']:,} "
                 f"queries and keys) shows its table "
                 + (f"{span(browser, 2)} (min / median / max of {browser['runs']})" if browser["runs"] > 1
                    else f"{browser['median']:.2f} s (one run)") + " after the mouse is released.")
    flags = f" --repeats {result['arguments']['repeats']}" + (" --browser" if browser else "") + (
        f" --browser-repeats {result['arguments']['browser_repeats']}" if browser and "browser_repeats" in result["arguments"]
        else "")
    return f"{text} `bench/compare.py{flags}` ({source(results, 'compare')}).\n"


if __name__ == "__main__":
    main()
