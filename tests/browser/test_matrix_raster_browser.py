"""The matrix drawn as images (the raster threshold lowered to 0 for the tiny run), in headless Chromium: every
head's thumbnail is an image in its cell, hovering a cell names its head, a click opens it, and a search's
matches are drawn over the dimmed images."""

import re

import pytest
from support.browser import DECODE_PNG_JS, POINT_JS, click_point, copy_run, launch_chromium, start_server, stop_server, wait_idle

from dash_app.views.matrix_raster import RASTER_POINTS_ENV, SEARCH_IMAGE_OPACITY, THUMBNAIL_PIXELS

DRAWN = """([graphId, traces]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  return graph && graph.offsetParent !== null && graph._fullData && graph._fullData.length >= traces;
}"""
IMAGES_JS = """() => Array.from(document.querySelectorAll('#matrix-graph .layer-above image'))
                      .map(image => image.getAttribute('href'))"""


@pytest.fixture(scope="module")
def served(app_run, tmp_path_factory):
    """The app over a copy of the tiny run with every matrix thumbnail drawn as an image."""
    run = copy_run(app_run, tmp_path_factory.mktemp("raster") / "tiny-raster", atlas=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RASTER_POINTS_ENV, "0")
        server, url = start_server([run.path])
    yield url
    output = stop_server(server)
    assert "Traceback" not in output, output


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        yield page
        browser.close()
        assert not errors, errors


def test_thumbnails_are_images_a_click_opens_the_head_and_matches_are_drawn_on_top(page, served):
    page.goto(served)
    page.wait_for_function(DRAWN, arg=["matrix-graph", 5], timeout=30_000)
    wait_idle(page)
    sources = page.evaluate(IMAGES_JS)
    assert len(sources) == 8 and all(source.startswith("data:image/png;base64,") for source in sources)
    width, height, pixels = page.evaluate(DECODE_PNG_JS, sources[0].split(",", 1)[1])
    assert (width, height) == (THUMBNAIL_PIXELS, THUMBNAIL_PIXELS)
    import base64

    assert max(base64.b64decode(pixels)[3::4]) > 0                          # the head's points are in it
    assert "image of all its" in page.inner_text("#matrix-message")
    assert page.evaluate("() => document.querySelector('#matrix-graph .js-plotly-plot')._fullData[0].type") == "scattergl"

    # hovering a cell of layer 1 head 2 (flat 6) names the head; a click opens it
    index = page.evaluate("""() => Array.from(document.querySelector('#matrix-graph .js-plotly-plot')
                             ._fullData[0].customdata).indexOf(6)""")
    x, y = page.evaluate(POINT_JS, ["matrix-graph", 0, index])
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y)
    page.wait_for_function("() => (document.querySelector('#matrix-graph .hovertext') || {}).textContent === 'L1 H2'",
                           timeout=10_000)
    click_point(page, "matrix-graph", 0, index)
    page.wait_for_function(DRAWN, arg=["single-graph", 12], timeout=20_000)
    wait_idle(page)
    assert "layer=1&head=2" in page.url

    # back to the matrix with a search: matches drawn in every head over the dimmed images
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
    opacities = page.evaluate("""() => document.querySelector('#matrix-graph .js-plotly-plot')._fullLayout.images
                                 .map(image => image.opacity)""")
    assert opacities == [SEARCH_IMAGE_OPACITY] * 8
    assert len(page.evaluate(IMAGES_JS)) == 8
