"""The app's ways with large runs, in headless Chromium on the tiny run: the matrix drawn as an image (the raster
threshold lowered to 0) -- every head's points in one image over the grid, no WebGL context started, hovering a cell
names its head, a click opens it, a search's matches drawn over the images -- and a head switch in the single view that sends
the new head's points (uint16 steps, drawn within a pixel of their exact place) without the tokens' texts and ids,
which the drawn figure keeps."""

import base64
import re

import numpy as np
import pytest
from support.browser import DECODE_PNG_JS, DRAWN_JS, chromium_page, copy_run, served_app, wait_idle

from dash_app.views.matrix.raster import RASTER_POINTS_ENV
from dash_app.views.single_figure import STEPS, to_steps

#: the single view's queries trace: how many texts, its first and last id, its first three x
TRACE_JS = """() => { const d = document.querySelector('#single-graph .js-plotly-plot')._fullData[0];
  return {texts: d.text.length, ids: [Number(d.customdata[0]), Number(d.customdata[d.customdata.length - 1])],
          x: Array.from(d.x).slice(0, 3)}; }"""
#: counts the WebGL contexts the page asks for (in window.__webgl), from before its scripts run
COUNT_WEBGL_JS = """(() => { window.__webgl = 0; const getContext = HTMLCanvasElement.prototype.getContext;
  HTMLCanvasElement.prototype.getContext = function (kind, ...rest) {
    if (String(kind).includes('webgl')) { window.__webgl++; }
    return getContext.call(this, kind, ...rest); }; })()"""
#: page coordinates of the centre of head ``flat``'s cell in the matrix's click heatmap (slot 5)
CELL_JS = """(flat) => {
  const graph = document.querySelector('#matrix-graph .js-plotly-plot'), layout = graph._fullLayout;
  const cells = graph._fullData[5], box = graph.getBoundingClientRect();
  const row = cells.customdata.findIndex(r => r.includes(flat)), column = cells.customdata[row].indexOf(flat);
  return [box.left + layout._size.l + layout.xaxis.l2p(cells.x[column]),
          box.top + layout._size.t + layout.yaxis.l2p(cells.y[row])];
}"""
IMAGES_JS = """() => Array.from(document.querySelectorAll('#matrix-graph .layer-above image'))
                      .map(image => image.getAttribute('href'))"""


@pytest.fixture(scope="module")
def served(app_run, tmp_path_factory):
    """The app over a copy of the tiny run with every matrix thumbnail drawn as an image."""
    run = copy_run(app_run, tmp_path_factory.mktemp("raster") / "tiny-raster", atlas=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RASTER_POINTS_ENV, "0")     # read by the server at its start
        with served_app([run.path]) as url:
            yield url


@pytest.fixture(scope="module")
def page(served):
    """The browser, closed before the server stops."""
    with chromium_page() as page:
        yield page


def test_thumbnails_are_images_a_click_opens_the_head_and_matches_are_drawn_on_top(page, served):
    page.add_init_script(COUNT_WEBGL_JS)
    page.goto(served)
    page.wait_for_function(DRAWN_JS, arg=["matrix-graph", 6], timeout=30_000)
    # the page may show the matrix's first drawing (made for a default window) before its callbacks have sent this
    # window's size: wait for the size sent (assets/clientside.js, matrixViewport), then for the drawing it asks for
    page.wait_for_function("() => window.__qkvizViewport && window.__qkvizViewport.sent", timeout=30_000)
    wait_idle(page)
    sources = page.evaluate(IMAGES_JS)
    assert len(sources) == 1 and sources[0].startswith("data:image/png;base64,")      # every head in one image ...
    width, height, pixels = page.evaluate(DECODE_PNG_JS, sources[0].split(",", 1)[1])
    plot = page.evaluate("() => { const s = document.querySelector('#matrix-graph .js-plotly-plot')._fullLayout._size;"
                         " return [s.w, s.h]; }")
    # ... about a pixel for each of the plot's (the server fits the grid to the window the browser gave, less the
    # page's bars as it estimates them: within a few percent of the plot's height)
    assert abs(width - plot[0]) <= 1 and abs(height - plot[1]) <= 0.05 * plot[1]
    assert max(base64.b64decode(pixels)[3::4]) > 0                                    # the heads' points are in it
    assert "image of all its" in page.inner_text("#matrix-message")
    assert page.evaluate("() => document.querySelector('#matrix-graph .js-plotly-plot')._fullData[5].type") == "heatmap"
    assert page.evaluate("() => window.__webgl") == 0                          # images and SVG only: no WebGL
    assert page.locator("#matrix-graph canvas").count() == 0

    # hovering the cell of layer 1 head 2 (flat 6) names the head; a click opens it
    x, y = page.evaluate(CELL_JS, 6)
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y)
    page.wait_for_function("() => (document.querySelector('#matrix-graph .hovertext') || {}).textContent === 'L1 H2'",
                           timeout=10_000)
    page.mouse.click(x, y)
    page.wait_for_function(DRAWN_JS, arg=["single-graph", 12], timeout=20_000)
    wait_idle(page)
    assert "layer=1&head=2" in page.url

    # back to the matrix with a search: matches drawn in every head over the images
    page.fill("#search-input", "the")
    page.press("#search-input", "Enter")
    page.click("#view-tabs >> text=Matrix")
    page.wait_for_function("""() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
                              return g.offsetParent !== null && g._fullData[2].x.length > 0; }""", timeout=20_000)
    wait_idle(page)
    assert re.search(r"view=matrix.*search=the", page.url)
    heads = page.evaluate("""() => new Set(Array.from(document.querySelector('#matrix-graph .js-plotly-plot')
                             ._fullData[2].customdata)).size""")
    assert heads == 8
    assert page.evaluate(IMAGES_JS) == sources                                # the images kept as drawn


def test_a_head_switch_keeps_the_tokens_texts_and_ids(page, served, app_run):
    responses = []
    page.on("response", lambda response: responses.append(response)
            if "_dash-update-component" in response.url and response.status == 200 else None)
    page.goto(served + "?view=single&layer=0&head=0&method=pca")
    page.wait_for_function(DRAWN_JS, arg=["single-graph", 12], timeout=30_000)
    wait_idle(page)
    first = page.evaluate(TRACE_JS)
    responses.clear()
    page.click("#next-head")
    page.wait_for_function("() => document.querySelector('#single-graph .js-plotly-plot').layout.title.text"
                           ".includes('layer 0 head 1 ·')", timeout=20_000)
    wait_idle(page)
    switched = page.evaluate(TRACE_JS)
    n_tokens = app_run.n_tokens
    assert switched["texts"] == first["texts"] == n_tokens and switched["ids"] == [0, n_tokens - 1]
    assert switched["x"] != first["x"]                                         # the new head's points
    layout = app_run.projection(0, 1, "pca", 2).astype(np.float64)
    assert switched["x"] == to_steps(layout)[:3, 0].tolist()                  # sent as uint16 steps ...
    # ... each drawn within a pixel of where its exact coordinates would be
    low, extent = layout.min(axis=0), float(np.max(layout.max(axis=0) - layout.min(axis=0)))
    exact = (layout - low) * STEPS / extent
    pixels_per_step = page.evaluate("""() => { const axis = document.querySelector('#single-graph .js-plotly-plot')
                                       ._fullLayout.xaxis; return axis._length / (axis.range[1] - axis.range[0]); }""")
    assert np.abs(to_steps(layout) - exact).max() * pixels_per_step < 1
    figures = [response.json()["response"]["single-graph"]["figure"] for response in responses
               if "single-graph.figure" in (response.request.post_data or "")]
    changed = [operation["location"] for operation in figures[-1]["operations"]]   # a Patch, not a figure
    assert ["data", 0, "x"] in changed and ["data", 2] in changed and ["layout"] in changed
    assert not [location for location in changed if location[:2] in (["data", 0], ["data", 1])
                and location[2:] in (["text"], ["customdata"])]
    # hovering a point still names its token (the text kept from the first drawing)
    from support.browser import POINT_JS as point_js
    x, y = page.evaluate(point_js, ["single-graph", 0, 0])
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y)
    page.wait_for_function("() => !!document.querySelector('#single-graph .hovertext')", timeout=10_000)
