"""How heavy the report's pages are and how fast they open: ``python -m bench.report_pages``.

Writes the report of a MiniLM run (``qkviz report``; the run is made when missing: MiniLM over the bundled
corpus, ``--tokens`` tokens, with head updates, every default projection and the head atlas with syntax) and
opens each page from ``file://`` in Debian's headless Chromium (Playwright's Python package,
``/usr/bin/chromium``; software rendering, no GPU; every request that is not a local file is refused and
counted). Per page it prints:

* the page's own bytes, and the bytes of the local scripts it loads (``<script src>``: the shared
  plotly.js, stored once beside the pages), and what opening the page cold reads in all;
* the time to open, from the start of navigation: to the load event, and to every Plotly graph on the
  page drawn (each ``Plotly.newPlot`` promise resolved, then two animation frames), the median of
  ``--repeats`` cold opens (a fresh browser context each);
* the CPU time of the page's main thread until then (``ThreadTime`` of the DevTools Performance
  metrics): on a machine other work keeps busy, the figure to compare pages by;
* graphs drawn / graphs on the page, refused network requests and console errors (both must be 0).

The first row, ``floor/floor.html``, is a page with the shared plotly.js and one 2 x 2 heatmap: what loading
plotly.js alone takes in the same browser. Goal (issue 17): at most 1.5 MB per page and 2 s to open.
``--report DIR`` (repeatable) also measures a report directory already written (e.g. by an older qkviz),
its pages opened in turn with the new ones. Writes ``bench/results/report_pages.json`` (``--out``): each page's
row as printed, and the run's layouts. ``--smoke``: the report of the run given (its PCA layouts and atlas made),
each page opened once, the result in a temporary file.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.support.browser import launch_chromium  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, source  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]
#: the page's ``Plotly.newPlot`` calls, each recorded with the time its promise resolves
RECORD_PLOTS_JS = """(() => {
  window.__plotsDone = [];
  let plotly;
  Object.defineProperty(window, 'Plotly', {configurable: true, get() { return plotly; }, set(value) {
    plotly = value;
    const newPlot = value.newPlot;
    value.newPlot = function (...args) {
      const drawn = newPlot.apply(this, args);
      window.__plotsDone.push(Promise.resolve(drawn).then(() => performance.now()));
      return drawn;
    };
  }});
})();"""
#: once loaded: graphs on the page, graphs drawn, and the times (ms after navigation start)
OPENED_JS = """async () => {
  const times = await Promise.all(window.__plotsDone || []);
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  const painted = performance.now();
  const navigation = performance.getEntriesByType('navigation')[0];
  const drawn = [...document.querySelectorAll('.plotly-graph-div')].filter(g => g._fullLayout).length;
  return {graphs: document.querySelectorAll('.plotly-graph-div').length, drawn, plotted: times.length,
          load: navigation.loadEventEnd, last_plot: Math.max(0, ...times), painted};
}"""
LOCAL_SCRIPT = re.compile(r'<script[^>]*\bsrc="([^":]+)"')


def ensure_run(path: Path, tokens: int, methods: str | None = None) -> None:
    """The demo's run, when ``path`` holds none: MiniLM, head updates, every default projection (or ``methods``),
    the head atlas with syntax. A run without layouts or without an atlas is given them."""
    import qkviz
    from qkviz.analysis import load_atlas

    if not (path / "manifest.json").exists():
        subprocess.run([*QKVIZ, "extract", "--model", "minilm", "--out", str(path), "--max-tokens", str(tokens),
                        "--head-update"], check=True)
    run = qkviz.open_run(path)
    if not any(run.projection_counts().values()):
        subprocess.run([*QKVIZ, "-q", "project", "--run", str(path), "--jobs", "2",
                        *(["--method", methods] if methods else [])], check=True)
    if load_atlas(run) is None:
        subprocess.run([*QKVIZ, "-q", "stats", "--run", str(path), "--syntax"], check=True)


def page_bytes(page: Path) -> tuple[int, dict[str, int]]:
    """The page's bytes, and those of each local script it loads (by path relative to the report)."""
    text = page.read_text(encoding="utf-8")
    scripts = {source: (page.parent / source).stat().st_size for source in LOCAL_SCRIPT.findall(text)}
    return page.stat().st_size, scripts


def open_page(browser, page_path: Path) -> dict:
    """One cold open of ``page_path`` in a fresh context, with every non-file request refused."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    refused: list[str] = []
    errors: list[str] = []

    def refuse(route):
        refused.append(route.request.url)
        route.abort()

    context.route(re.compile(r"^(?!file:).*"), refuse)
    context.add_init_script(RECORD_PLOTS_JS)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    devtools = context.new_cdp_session(page)
    devtools.send("Performance.enable")
    page.goto(page_path.resolve().as_uri(), wait_until="load", timeout=120_000)
    opened = page.evaluate(OPENED_JS)
    metrics = {metric["name"]: metric["value"] for metric in devtools.send("Performance.getMetrics")["metrics"]}
    context.close()
    return {**opened, "cpu": metrics["ThreadTime"] * 1e3, "refused": len(refused), "errors": errors}


def floor_page(directory: Path) -> Path:
    """A page with the shared plotly.js and one 2 x 2 heatmap: what loading plotly.js alone takes."""
    import plotly.graph_objects as go

    from qkviz.report import figure_html, page, shared_assets

    for name, content in shared_assets().items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(content)
    path = directory / "floor.html"
    path.write_text(page("floor", [figure_html(go.Figure(go.Heatmap(z=[[0, 1], [1, 0]])))]), encoding="utf-8")
    return path


def measure(pages: list[Path], repeats: int) -> list[dict]:
    """Each page's bytes and its medians over ``repeats`` cold opens, the pages taken in turn each round (so a
    machine busy for a while slows all alike)."""
    from playwright.sync_api import sync_playwright

    opens: dict[Path, list[dict]] = {path: [] for path in pages}
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        for _ in range(repeats):
            for path in pages:
                opens[path].append(open_page(browser, path))
        browser.close()
    rows = []
    for path, runs in opens.items():
        own, scripts = page_bytes(path)
        rows.append({"page": f"{path.parent.name}/{path.name}", "own": own, "scripts": scripts,
                     "load": statistics.median(o["load"] for o in runs),
                     "drawn": statistics.median(max(o["load"], o["painted"]) for o in runs),
                     "cpu": statistics.median(o["cpu"] for o in runs),
                     "graphs": runs[0]["graphs"], "drawn_graphs": min(o["drawn"] for o in runs),
                     "refused": sum(o["refused"] for o in runs),
                     "errors": sorted({error for o in runs for error in o["errors"]})})
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'page':<24} {'page MB':>8} {'+ scripts MB':>12} {'cold read MB':>12} {'load s':>7} "
          f"{'drawn s':>8} {'cpu s':>6} {'graphs':>7} {'refused':>7} {'errors':>6}")
    for row in rows:
        scripts = sum(row["scripts"].values())
        print(f"{row['page']:<24} {row['own'] / 1e6:>8.2f} {scripts / 1e6:>12.2f} {(row['own'] + scripts) / 1e6:>12.2f} "
              f"{row['load'] / 1e3:>7.2f} {row['drawn'] / 1e3:>8.2f} {row['cpu'] / 1e3:>6.2f} {row['drawn_graphs']:>3}/{row['graphs']:<3} "
              f"{row['refused']:>7} {len(row['errors']):>6}")
    for report in dict.fromkeys(row["page"].split("/")[0] for row in rows):
        mine = [row for row in rows if row["page"].startswith(report + "/") and not row["page"].endswith("floor.html")]
        if not mine:
            continue
        shared = {source: size for row in mine for source, size in row["scripts"].items()}
        pages = sum(row["own"] for row in mine)
        print(f"{report}: pages {pages / 1e6:.2f} MB, shared scripts (once): {sum(shared.values()) / 1e6:.2f} MB "
              f"({', '.join(shared) or 'none'}); per page with its share of the shared scripts: "
              f"{(pages + sum(shared.values())) / len(mine) / 1e6:.2f} MB")
    for row in rows:
        for error in row["errors"]:
            print(f"console error on {row['page']}: {error}")


def run_layouts(run: Path) -> set[str]:
    """The run's stored layouts, as ``method-dimD`` (from each projection's ``.json``)."""
    import json

    found = set()
    for path in (run / "projections").glob("*.json"):
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))["spec"]
            found.add(f"{spec['method']}-{spec['dim']}d")
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return found


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "minilm")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--report", type=Path, action="append", default=[],
                        help="also measure this report directory (already written, e.g. by an older qkviz)")
    parser.add_argument("--methods", help="the projections made for a run without layouts (default: qkviz "
                        "project's own)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only-reports", action="store_true",
                        help="measure only the --report directories (no MiniLM report of --run)")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/report_pages.json)")
    args = smoke_arguments(parser, argv, repeats=1, methods="pca")
    if args.only_reports:
        print_table(measure([*(path for directory in args.report for path in sorted(directory.glob("*.html")))],
                            args.repeats))
        return
    recorder = Recorder("report_pages", vars(args), out=args.out)
    ensure_run(args.run, args.tokens, args.methods)
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report"
        subprocess.run([*QKVIZ, "-q", "report", "--run", str(args.run), "--out", str(report)], check=True)
        floor_directory = Path(scratch) / "floor"
        floor_directory.mkdir()
        pages = [floor_page(floor_directory), *sorted(report.glob("*.html")),
                 *(path for directory in args.report for path in sorted(directory.glob("*.html")))]
        rows = measure(pages, args.repeats)
        print_table(rows)
    layouts = sorted(run_layouts(args.run))
    for row in rows:
        row["page"] = "floor.html" if row["page"].endswith("floor.html") else row["page"].removeprefix("report/")
    print(f"wrote {recorder.write(goal_mb=1.5, goal_seconds=2.0, run_layouts=layouts, pages=rows)}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: issue 17's goals for the report's pages: each page as a browser opens it cold (its own bytes and every script it
#: loads, shared or not), and from the open to every graph drawn
PAGE_SIZE = Goal("a report page's size", 1.5, "MB", True, "report_pages", "the largest page, read cold",
                 lambda found: max(cold_bytes(row) for row in report_page_rows(found)) / 1e6, 2)

PAGE_TIME = Goal("a report page open, every graph drawn", 2.0, "s", True, "report_pages",
                 "the slowest page, median of the cold opens",
                 lambda found: max(row["drawn"] for row in report_page_rows(found)) / 1e3, 2)

def report_page_rows(result: dict) -> list[dict]:
    """The report's pages in ``bench/report_pages.py``'s result, without the floor (plotly.js alone)."""
    return [row for row in result["pages"] if row["page"] != "floor.html"]

def cold_bytes(row: dict) -> int:
    """What a browser reads to open a page cold: the page and every script it loads."""
    return row["own"] + sum(row["scripts"].values())

# -- the report's pages ----------------------------------------------------------------------------
@figure("report-pages")
def report_pages(results: Results) -> str:
    result = results("report_pages")
    floor = next(row for row in result["pages"] if row["page"] == "floor.html")
    pages = report_page_rows(result)
    rows = [f"| `{row['page']}` | {row['own'] / 1e6:.2f} MB | {sum(row['scripts'].values()) / 1e6:.2f} MB, once | "
            f"{cold_bytes(row) / 1e6:.2f} MB | {row['drawn'] / 1e3:.2f} s | {row['cpu'] / 1e3:.2f} s | "
            f"{row['drawn_graphs']} of {row['graphs']} |" for row in pages]
    rows.append(f"| plotly.js alone (one 2 × 2 heatmap) | | {sum(floor['scripts'].values()) / 1e6:.2f} MB | "
                f"{cold_bytes(floor) / 1e6:.2f} MB | {floor['drawn'] / 1e3:.2f} s | {floor['cpu'] / 1e3:.2f} s | |")
    refused = sum(row["refused"] for row in result["pages"])
    errors = sum(len(row["errors"]) for row in result["pages"])
    # layouts as method-dimD (a result of an earlier bench/report_pages.py named the projections folder's entries)
    layouts = ", ".join(name for name in result.get("run_layouts") or [] if re.fullmatch(r"[\w-]+-\dd", name))
    return ("| page | size | + shared plotly.js | read cold | open, every graph drawn | main-thread CPU | graphs drawn |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"Medians of {result['arguments']['repeats']} cold opens{f'; the run has {layouts} layouts' if layouts else ''}. "
            f"Goals (issue 17), each page as a browser opens it cold: size {verdict(PAGE_SIZE, results)}; time to "
            f"open {verdict(PAGE_TIME, results)}. Requests refused: {refused}; console errors: {errors}. "
            f"`bench/report_pages.py --repeats {result['arguments']['repeats']}` ({source(results, 'report_pages')}).\n")


if __name__ == "__main__":
    main()
