"""How fast, and how large, the matrix view is drawn at 1,024 heads, in a real browser (issue 28, point 1):

    python -m bench.matrix_grid --run RUN        # a run of 32 x 32 heads with its PCA layouts

``RUN`` is, e.g., a copy of ``bench.modern_model``'s run (32 x 32 heads over 8 key-value heads, 9,123 tokens) with
``qkviz project --run RUN --method pca``. Starts ``qkviz serve --background none`` on it, waits until the server has
read every head's layout (its start-up warm-up), and drives Debian's headless Chromium (software WebGL, no GPU) in a
1400 x 900 window:

* **load to drawn**: milliseconds from the start of navigation to the matrix drawn (its six traces in the page and no
  callback pending), ``--repeats`` times each way, alternating: *cold*, a new browser context (nothing cached), then
  *warm*, a reload of the same page (Plotly's bundle and the assets cached); min, median and max of each;
* **fill**: the drawn grid (the cells' heatmap) as shares of the window's width and height, for the run, and, unless
  ``--no-grids``, for runs of 6 x 12, 12 x 12, 30 x 9 and 32 x 32 heads over two sentences built in ``--grids-dir``
  (``bench.support.grid_runs``; the goal: >= 60% of the width and >= 55% of the height);
* the matrix figure's bytes: the larger of the callback's response and the page's layout (which holds the first
  run's matrix when its heads are one image).

Writes ``--out`` (``bench/results/matrix_grid.json``) with the date, the machine and its load average, and the
arguments. ``--smoke``: one repeat, the fill measured on the run given as ``--grid-run`` (no grid built), the result
in a temporary file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.support.browser import CHROMIUM, free_port, launch_chromium  # noqa: E402
from bench.figures.goals import Goal  # noqa: E402

WINDOW = {"width": 1400, "height": 900}
#: the matrix drawn: its six traces, shown, nothing pending; records the time once
DRAWN = """() => {
  const graph = document.querySelector('#matrix-graph .js-plotly-plot');
  const ready = graph && graph.offsetParent !== null && graph._fullData && graph._fullData.length >= 6
                && graph.querySelector('.heatmaplayer image') && !document.querySelector('[data-dash-is-loading="true"]');
  return ready && (window.__done = window.__done || performance.now());
}"""
FILL = """() => { const r = document.querySelector('#matrix-graph .heatmaplayer image').getBoundingClientRect();
  return [(Math.min(r.right, innerWidth) - Math.max(r.left, 0)) / innerWidth,
          (Math.min(r.bottom, innerHeight) - Math.max(r.top, 0)) / innerHeight]; }"""


def serve(runs: list[Path], timeout: float = 600.0) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "qkviz", "serve", "--port", str(port), "--background", "none"]
    for run in runs:
        command += ["--run", str(run)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, HF_HUB_OFFLINE="1"))
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5)
            return server, url
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise RuntimeError(f"qkviz serve did not answer at {url} within {timeout} s")


def load(page, url: str) -> float:
    """Milliseconds from navigation to the matrix drawn."""
    page.goto(url)
    page.wait_for_function(DRAWN, timeout=300_000, polling="raf")
    return page.evaluate("() => window.__done")


def summary(values: list[float]) -> dict:
    return {"min_ms": round(min(values)), "median_ms": round(statistics.median(values)), "max_ms": round(max(values)),
            "runs_ms": [round(value) for value in values]}


def time_loads(browser, url: str, repeats: int) -> dict:
    """``repeats`` cold loads (a new context each) and as many warm reloads, alternating, and the figure's bytes."""
    cold, warm, sizes = [], [], []
    for _ in range(repeats):
        context = browser.new_context(viewport=WINDOW)
        page = context.new_page()
        page.on("response", lambda response: sizes.append(len(response.body()))
                if response.status == 200 and ("_dash-layout" in response.url or "_dash-update-component" in response.url
                                               and '"matrix-graph"' in response.request.post_data) else None)
        cold.append(load(page, url))
        warm.append(load(page, url))
        context.close()
    return {"cold": summary(cold), "warm": summary(warm), "figure_bytes": max(sizes) if sizes else None}


def fill(browser, url: str, runs: int) -> list[list[float]]:
    page = browser.new_page(viewport=WINDOW)
    shares = []
    for index in range(runs):
        load(page, f"{url}?run={index}&view=matrix&method=pca")
        shares.append([round(share, 3) for share in page.evaluate(FILL)])
    page.close()
    return shares


def grid_runs(directory: Path) -> dict[str, Path]:
    from bench.support.grid_runs import GRIDS, grid_run

    directory.mkdir(parents=True, exist_ok=True)          # --grids-dir may name a folder not made yet
    corpus = directory / "sentences.txt"
    corpus.write_text("\n".join((ROOT / "data" / "sentences.txt").read_text(encoding="utf-8").splitlines()[:2]) + "\n",
                      encoding="utf-8")
    return {name: Path(grid_run(directory, name, corpus, max_sentences=2).path) for name in GRIDS}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run; ``bench.support.tiny_run``): the run,
#: and the same run as the one grid whose fill is measured
SMOKE_ARGUMENTS = ("--run", "{run}", "--grid-run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a 32 x 32-head run with its PCA 2D layouts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--grids-dir", type=Path, default=None, help="where the grids' runs are built (a temporary "
                        "directory by default; kept and reused when given)")
    parser.add_argument("--no-grids", action="store_true", help="measure only the run's fill")
    parser.add_argument("--grid-run", type=Path, action="append", default=[], help="an existing run of a grid to "
                        "measure the fill of instead of building them (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/matrix_grid.json")
    args = smoke_arguments(parser, argv, repeats=1)
    from playwright.sync_api import sync_playwright

    from qkviz import open_run

    run = open_run(args.run)
    recorder = Recorder("matrix_grid", vars(args), args.out)
    result = {"chromium": str(CHROMIUM),
              "run": {"path": str(args.run), "layers": run.n_layers, "heads": run.n_heads, "tokens": run.n_tokens},
              "window": WINDOW}
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        started = time.monotonic()
        server, url = serve([args.run])
        try:
            result["server_start_s"] = round(time.monotonic() - started, 1)
            first = browser.new_page(viewport=WINDOW)          # the first load waits for the server's warm-up
            result["first_load_after_start_ms"] = round(load(first, url))
            first.close()
            result["load_to_drawn"] = time_loads(browser, url, args.repeats)
            result["fill"] = {f"{run.n_layers}x{run.n_heads} ({run.n_tokens:,} tokens)": fill(browser, url, 1)[0]}
        finally:
            server.terminate()
            server.wait(timeout=30)
        if not args.no_grids:
            runs = ({f"{r.n_layers}x{r.n_heads}": r.path for r in map(open_run, args.grid_run)} if args.grid_run
                    else grid_runs(args.grids_dir or Path(scratch)))
            server, url = serve(list(runs.values()))
            try:
                result["fill"].update(dict(zip(runs, fill(browser, url, len(runs)))))
            finally:
                server.terminate()
                server.wait(timeout=30)
        browser.close()
    print(f"wrote {recorder.write(**result)}")


# The goals the README's summary blocks (``bench.figures.readme``) judge from this bench's result file, each by
# ``bench.figures.goals.verdict``.

#: a 1,024-head model's matrix (issue 28): navigation to the matrix drawn, the first load of a page (cold) and a
#: reload (warm), both judged
MATRIX_1024 = Goal("a 1,024-head matrix drawn after navigation, cold", 3, "s", True, "matrix_grid", "cold median",
                   lambda found: found["load_to_drawn"]["cold"]["median_ms"] / 1000, 1)
MATRIX_1024_WARM = Goal("a 1,024-head matrix drawn after navigation, on reload", 3, "s", True, "matrix_grid",
                        "reload median", lambda found: found["load_to_drawn"]["warm"]["median_ms"] / 1000, 1)

#: the share of a 1400 × 900 window the 32 × 32 matrix fills (issue 28), width and height
MATRIX_FILL = (Goal("the 1,024-head matrix's width in a 1400 × 900 window", 60, "%", False, "matrix_grid", "width",
                    lambda found: 100 * next(iter(found["fill"].values()))[0], 0),
               Goal("the 1,024-head matrix's height in a 1400 × 900 window", 55, "%", False, "matrix_grid", "height",
                    lambda found: 100 * next(iter(found["fill"].values()))[1], 0))


if __name__ == "__main__":
    main()
