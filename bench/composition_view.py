"""The composition view at 1,024 heads in headless Chromium: the layer matrix, and a layer opened from it
(``bench.circuits_scale``'s ``view`` part, which names the run and writes the result).

:func:`time_view` computes the run's circuits when missing (``qkviz.explain.compute_circuits``, what
``qkviz stats --circuits`` runs after the atlas; timed), starts ``qkviz serve`` on it and, in a 1400 x 900 window,
times each round: navigation to the layer x layer matrix drawn (its heatmaps shown, no callback pending), alternating
a cold context and a warm reload (a reload of a page already loaded in its context: where a round times the warm load
first, its context loads the page once untimed before; until 2026-12-07 it did not, and those rounds' warm loads
were cold ones); then the click on a cell to that cell's layer's head graph drawn. Every round's figures are kept.

Each round also times the **floor**: a Dash page holding nothing but the same layer matrix (the figure the app draws,
in the page's layout from the start, :data:`FLOOR_APP`), loaded cold in a new context of its own, before the app's
cold load in even rounds and after it in odd ones: what any Dash page drawing this figure pays on this machine
(Dash's renderer, React, Plotly's bundle), so that the app's own cost can be told from the stack's. The floor's page
loads the same plotly.js as the app's (its own build where set-up made one, :mod:`dash_app.plotly_bundle`); the
result says which (``plotly_js``).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.app import page_plotly_js, start, stop
from bench.harness import run_measured
from bench.matrix_grid import WINDOW, serve
from bench.support.browser import launch_chromium
from dash_app import ids
from dash_app.views.composition_layers import LAYERS_FROM_HEADS

REPO = Path(__file__).resolve().parent.parent
#: the layer matrix drawn: shown, its heatmaps in the page, nothing pending; the time recorded once
MATRIX_DRAWN = """() => {
  const graph = document.querySelector('#%s .js-plotly-plot');
  const ready = graph && graph.offsetParent !== null && graph._fullData
                && graph._fullData.some(t => t.type === 'heatmap') && graph.querySelector('.heatmaplayer image')
                && !document.querySelector('[data-dash-is-loading="true"]');
  return ready && (window.__matrix = window.__matrix || performance.now());
}""" % ids.COMPOSITION_LAYER_GRAPH
#: the head graph of layer ``arg`` drawn after the click: shown, its heads' trace in the page, the layer picked
OPENED_DRAWN = """(layer) => {
  const graph = document.querySelector('#%s .js-plotly-plot');
  const picked = document.querySelector('#%s').innerText.trim() === String(layer);
  const ready = picked && graph && graph.offsetParent !== null && graph._fullData
                && graph._fullData.some(t => t.name === 'heads')
                && !document.querySelector('[data-dash-is-loading="true"]');
  return ready && performance.now();
}""" % (ids.COMPOSITION_GRAPH, ids.COMPOSITION_LAYERS)
#: page coordinates of cell (target, source) of the first matrix
CELL = """([target, source]) => {
  const graph = document.querySelector('#%s .js-plotly-plot');
  const layout = graph._fullLayout, box = graph.getBoundingClientRect();
  return [box.left + layout.xaxis._offset + layout.xaxis.l2p(source),
          box.top + layout.yaxis._offset + layout.yaxis.l2p(target)];
}""" % ids.COMPOSITION_LAYER_GRAPH


#: the floor: ``python -c FLOOR_APP PORT FIGURE_JSON`` serves a Dash page of one graph (the layer matrix's id, so that
#: :data:`MATRIX_DRAWN` reads it) showing the figure in ``FIGURE_JSON``
FLOOR_APP = """
import sys, flask, plotly.io
from dash import Dash, dcc
from dash_app import ids
from dash_app.plotly_bundle import page_scripts
server = flask.Flask(__name__)
app = Dash(__name__, server=server, external_scripts=page_scripts(server, "/"))
app.layout = dcc.Graph(id=ids.COMPOSITION_LAYER_GRAPH, figure=plotly.io.read_json(sys.argv[2]), style={"height": "85vh"})
app.run(port=int(sys.argv[1]), debug=False)
"""


def summary(values: list[float]) -> dict:
    return {"min_ms": round(min(values)), "median_ms": round(statistics.median(values)), "max_ms": round(max(values)),
            "runs_ms": [round(value) for value in values]}


def circuits_made(run: Path) -> dict:
    """The run's circuits, computed when missing (timed); their sample."""
    import qkviz

    made = None
    if qkviz.open_run(run).circuits is None:       # the circuits alone (``qkviz stats --circuits`` adds the atlas)
        measured = run_measured([sys.executable, "-c", "import sys, qkviz; from qkviz.explain import compute_circuits; "
                                 "compute_circuits(qkviz.open_run(sys.argv[1]), progress=False)", str(run)], cwd=REPO)
        if measured["returncode"] != 0:
            raise SystemExit(f"qkviz stats --circuits failed on {run}")
        made = {"seconds": round(measured["seconds"], 1), "peak_mb": round(measured["peak_mb"])}
    opened = qkviz.open_run(run)
    sample = opened.circuits.attrs["sample"]
    return {"computed": made, "tokens": sample["n_tokens"], "heads": opened.n_layers * opened.n_heads,
            "rows": len(opened.circuits), "n_layers": opened.n_layers}


def open_composition(page, url: str, heads: int) -> None:
    """Open the view; a model of 256 heads or fewer (a smoke run's) opens on its head graph: its layer matrix is
    asked for by the level control."""
    page.goto(url)
    if heads <= LAYERS_FROM_HEADS:
        page.locator(f"#{ids.COMPOSITION_LEVEL} input[value='layers']").check()


def floor_page(run: Path, directory: Path) -> tuple[subprocess.Popen, str]:
    """The floor's server (:data:`FLOOR_APP`) on the run's layer matrix as the app first draws it (the view's own
    drawing at its controls' first values, the matrix level), and its address."""
    import qkviz
    from bench.support.browser import free_port
    from dash_app.data.run_data import RunData
    from dash_app.views import composition

    data = RunData(qkviz.open_run(run), run.name)
    figure, _message = composition.render_composition(
        data, data.run.circuits, (0, 0), list(composition.SIDES), "contribution", 0, composition.DEFAULT_TOP,
        composition.ALL, composition.ALL, 0, "layers")
    path = directory / "layer-matrix.json"
    path.write_text(figure.to_json(), encoding="utf-8")
    port = free_port()
    return start([sys.executable, "-c", FLOOR_APP, str(port), str(path)], port), f"http://127.0.0.1:{port}/"


def cold_floor(browser, url: str) -> float:
    """Navigation to the floor's matrix drawn, in a new context (nothing cached)."""
    context = browser.new_context(viewport=WINDOW)
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function(MATRIX_DRAWN, timeout=120_000, polling="raf")
        return page.evaluate("() => window.__matrix")
    finally:
        context.close()


def time_view(run: Path, repeats: int) -> dict:
    """Every round's navigation-to-matrix and click-to-opened-layer milliseconds, and the floor's (see the module)."""
    from playwright.sync_api import sync_playwright

    circuits = circuits_made(run)
    n_layers = circuits["n_layers"]
    url_query = "?view=composition&method=pca"
    server, url = serve([run])
    floor_server, floor_url = floor_page(run, Path(tempfile.mkdtemp(prefix="qkviz-floor-")))
    cold, warm, opened, clicked, floor = [], [], [], [], []
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            first = browser.new_page(viewport=WINDOW)              # the first open reads the circuits (not timed)
            open_composition(first, url + url_query, circuits["heads"])
            first.wait_for_function(MATRIX_DRAWN, timeout=600_000, polling="raf")
            first.close()
            cold_floor(browser, floor_url)                          # the floor's first load (not timed)
            for round_ in range(repeats):
                if round_ % 2 == 0:
                    floor.append(cold_floor(browser, floor_url))
                context = browser.new_context(viewport=WINDOW)
                page = context.new_page()
                for kind in (("cold", "warm") if round_ % 2 == 0 else ("warm", "cold")):
                    if kind == "cold" and page.url != "about:blank":
                        context.close()
                        context = browser.new_context(viewport=WINDOW)
                        page = context.new_page()
                    if kind == "warm" and page.url == "about:blank":   # a reload is warm only after a first load
                        open_composition(page, url + url_query, circuits["heads"])
                        page.wait_for_function(MATRIX_DRAWN, timeout=120_000, polling="raf")
                    open_composition(page, url + url_query, circuits["heads"])
                    page.wait_for_function(MATRIX_DRAWN, timeout=120_000, polling="raf")
                    (cold if kind == "cold" else warm).append(page.evaluate("() => window.__matrix"))
                target = n_layers - 1 - round_ % max(n_layers - 1, 1)
                source = max(target - 1, 0)
                x, y = page.evaluate(CELL, [target, source])
                page.mouse.move(x - 2, y)
                page.mouse.move(x, y)
                time.sleep(0.3)
                started = page.evaluate("() => performance.now()")
                page.mouse.click(x, y)
                done = page.wait_for_function(OPENED_DRAWN, arg=target, timeout=120_000, polling="raf")
                opened.append(done.json_value() - started)
                clicked.append([target, source])
                context.close()
                if round_ % 2 == 1:
                    floor.append(cold_floor(browser, floor_url))
            browser.close()
    finally:
        stop(floor_server)
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return {"circuits": circuits, "plotly_js": page_plotly_js(), "layers": {"cold": summary(cold), "warm": summary(warm)},
            "opened": {**summary(opened), "cells": clicked}, "floor": {"cold": summary(floor)}}
