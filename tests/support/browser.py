"""Helpers for the app's tests: a tiny projected run (and a copy with a head atlas), ``qkviz serve`` in a
subprocess, headless Chromium (starting the server and Chromium: ``bench.support.browser``, which the benches share).

Chromium is Debian's (``/usr/bin/chromium``, installed by ``scripts/test.sh`` through
``scripts/debian_packages.sh``), driven by Playwright's Python package; Playwright's own browser download is
never used. A missing Chromium fails the browser tests (it is never a skip).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from bench.support.browser import (  # noqa: F401  (re-exported for the tests)
    CHROMIUM,
    CHROMIUM_ARGS,
    BrowserError,
    free_port,
    launch_chromium,
    start_server,
    stop_server,
)

#: true once no Dash callback is pending and every graph on the page has been drawn
IDLE_JS = """() => !document.querySelector('[data-dash-is-loading="true"]')"""
#: page coordinates of point ``index`` of trace ``trace`` in a 2D graph
POINT_JS = """([graphId, trace, index]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const layout = graph._fullLayout, data = graph._fullData[trace];
  const box = graph.getBoundingClientRect();
  return [box.left + layout._size.l + layout.xaxis.l2p(data.x[index]),
          box.top + layout._size.t + layout.yaxis.l2p(data.y[index])];
}"""


#: of the points ``indexes`` of ``trace``, the one whose nearest other drawn point (of any visible trace) is farthest
#: away on screen, and that distance in pixels: Plotly picks the point nearest the mouse, so a click on a point that
#: another covers opens that other
ISOLATED_JS = """([graphId, trace, indexes]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const layout = graph._fullLayout;
  const pixel = (data, i) => [layout.xaxis.l2p(data.x[i]), layout.yaxis.l2p(data.y[i])];
  const drawn = [];
  graph._fullData.forEach((data, t) => {
    if (data.visible !== true || !data.x || !data.y || data.hoverinfo === 'skip') { return; }
    for (let i = 0; i < data.x.length; i++) {
      const [px, py] = pixel(data, i);
      if (Number.isFinite(px) && Number.isFinite(py)) { drawn.push([t, i, px, py]); }   // lines' gaps are null
    }
  });
  let best = [indexes[0], -1];
  for (const index of indexes) {
    const [x, y] = pixel(graph._fullData[trace], index);
    let nearest = Infinity;
    for (const [t, i, px, py] of drawn) {
      if ((t === trace && i === index) || (px === x && py === y && t !== trace)) { continue; }
      nearest = Math.min(nearest, Math.hypot(px - x, py - y));
    }
    if (nearest > best[1]) { best = [index, nearest]; }
  }
  return best;
}"""


#: the shares of the window's area that a graph's figure (its part in view) and its plot area cover
#: whether a graph is drawn and shown with at least ``traces`` traces
DRAWN_JS = """([graphId, traces]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  return graph && graph.offsetParent !== null && graph._fullData && graph._fullData.length >= traces;
}"""
#: page coordinates of the centre of cell (row, column) of a graph's first trace, a heatmap
HEATMAP_CELL_JS = """([graphId, row, column]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const layout = graph._fullLayout, data = graph._fullData[0], box = graph.getBoundingClientRect();
  return [box.left + layout._size.l + layout.xaxis.d2p(data.x[column]),
          box.top + layout._size.t + layout.yaxis.d2p(data.y[row])];
}"""
WINDOW_SHARE_JS = """(id) => {
  const graph = document.querySelector('#' + id + ' .js-plotly-plot'), box = graph.querySelector('.main-svg')
    .getBoundingClientRect(), layout = graph._fullLayout, area = window.innerWidth * window.innerHeight;
  const clipped = Math.max(0, Math.min(box.right, window.innerWidth) - Math.max(box.left, 0)) *
                  Math.max(0, Math.min(box.bottom, window.innerHeight) - Math.max(box.top, 0));
  const plot = layout.xaxis && layout.xaxis.visible !== undefined ? layout.xaxis._length * layout.yaxis._length
               : layout._size.w * layout._size.h;
  return [clipped / area, plot / area];
}"""
#: a PNG (base64) -> [width, height, its RGBA pixels in base64], decoded by the page's own canvas
DECODE_PNG_JS = """async (encoded) => {
  const image = new Image();
  image.src = 'data:image/png;base64,' + encoded;
  await image.decode();
  const canvas = document.createElement('canvas');
  canvas.width = image.width; canvas.height = image.height;
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  const bytes = context.getImageData(0, 0, image.width, image.height).data;
  let text = '';
  for (let i = 0; i < bytes.length; i += 32768) { text += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768)); }
  return [image.width, image.height, btoa(text)];
}"""


def make_app_run(model: Path, corpus: Path, directory: Path, max_sentences: int = 20):
    """A run of ``model`` over ``corpus`` with every head's PCA layout in 2D and 3D (UMAP / t-SNE left out)."""
    import qkviz
    from qkviz.cli import main

    run = qkviz.extract(str(model), corpus, directory, max_sentences=max_sentences)
    assert main(["-q", "project", "--run", str(run.path), "--method", "pca", "--dim", "2,3"]) == 0
    return run


def copy_run(run, directory: Path, atlas: bool = True):
    """A copy of ``run`` in ``directory`` (its layouts included), with its head atlas made by
    ``qkviz stats`` when ``atlas``; the original is left without one."""
    import shutil

    import qkviz
    from qkviz.cli import main

    shutil.copytree(run.path, directory)
    if atlas:
        assert main(["-q", "stats", "--run", str(directory)]) == 0
    return qkviz.open_run(directory)


@contextlib.contextmanager
def served_app(run_paths: list[Path], **options):
    """``qkviz serve`` over ``run_paths`` (:func:`start_server`'s ``options``) for a module's tests: yields its URL;
    on leaving, stops it and fails when it logged a traceback."""
    server, url = start_server(run_paths, **options)
    yield url
    output = stop_server(server)
    assert "Traceback" not in output, output


def new_page(browser) -> tuple[object, list[str]]:
    """A 1400 x 1000 page, and the list its uncaught JavaScript errors are collected in."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return page, errors


def console_errors(page) -> list[str]:
    """The list the errors ``page`` logs in its console from now on are collected in (their first 300 characters):
    Dash's own complaints (a callback whose output is not in the page, a failed request) are logged, not thrown."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text[:300]) if message.type == "error" else None)
    return errors


@contextlib.contextmanager
def chromium_page():
    """A page of a new headless Chromium, for a module's tests; closing it fails the tests' teardown when the
    page met an uncaught JavaScript error. (Close it before the server it reads stops: a fetch in flight to a
    stopped server is such an error.)"""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page, errors = new_page(browser)
        yield page
        browser.close()
        assert not errors, errors


def wait_idle(page, timeout_ms: int = 20_000) -> None:
    page.wait_for_function(IDLE_JS, timeout=timeout_ms)


def open_view(page, url: str, query: str, graph: str, traces: int = 1) -> None:
    """Open ``url?query`` and wait until ``graph`` is drawn with ``traces`` traces and the callbacks are done."""
    page.goto(f"{url}?{query}")
    page.wait_for_function(DRAWN_JS, arg=[graph, traces], timeout=30_000)
    wait_idle(page)
    page.wait_for_timeout(300)


def click_point(page, graph_id: str, trace: int, index: int, settle_s: float = 5.0) -> None:
    """Hover, then click, point ``index`` of ``trace`` in a 2D graph (Plotly picks points on hover), once the
    point has stopped moving (a responsive graph may still be resizing to its container: a click on where the
    point was a moment ago misses it)."""
    x, y = page.evaluate(POINT_JS, [graph_id, trace, index])
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        page.wait_for_timeout(150)
        now = page.evaluate(POINT_JS, [graph_id, trace, index])
        if abs(now[0] - x) < 0.5 and abs(now[1] - y) < 0.5:
            break
        x, y = now
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y)
    page.mouse.click(x, y)


def isolated_point(page, graph_id: str, trace: int, indexes) -> int:
    """Of the points ``indexes`` of ``trace`` in a 2D graph, the one a click picks most surely (:data:`ISOLATED_JS`)."""
    index, pixels = page.evaluate(ISOLATED_JS, [graph_id, trace, [int(i) for i in indexes]])
    assert pixels > 2, f"every candidate point of trace {trace} is covered by another ({pixels:.1f} px)"
    return int(index)


@contextlib.contextmanager
def served_in_thread(app):
    """Serve a built Dash ``app`` in this process (a thread; no background layouts): yields its URL."""
    import threading

    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()


def screenshot_pixels(page, clip: dict | None = None):
    """uint8 ``[height, width, 3]``: what the page shows (inside ``clip``: x, y, width, height), decoded by the
    browser itself (WebGL canvases cannot be read back, a screenshot can)."""
    import base64

    import numpy as np

    png = page.screenshot(clip=clip) if clip else page.screenshot()
    width, height, data = page.evaluate(DECODE_PNG_JS, base64.b64encode(png).decode())
    return np.frombuffer(base64.b64decode(data), dtype=np.uint8).reshape(height, width, 4)[..., :3]
