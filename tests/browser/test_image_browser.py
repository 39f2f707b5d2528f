"""Image runs in headless Chromium: the image view (a patch's attention over the image, a click makes another
patch the query), patch thumbnails on hover, colour by patch row, search by image id, and the matrix."""

import base64
import io

import numpy as np
import pytest
from PIL import Image
from support.browser import HEATMAP_CELL_JS, click_point, copy_run, open_view, screenshot_pixels, served_app, wait_idle

from dash_app import ids

#: the image view's heatmap: its z values row by row (NaN as null) and its title
HEATMAP_JS = """(graphId) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const trace = graph._fullData[0];
  return {z: Array.from(trace.z, row => Array.from(row, v => (v === null || Number.isNaN(v)) ? null : v)),
          title: graph._fullLayout.title.text, images: graph._fullLayout.images.length};
}"""


@pytest.fixture(scope="module")
def served(image_run, tmp_path_factory):
    run = copy_run(image_run, tmp_path_factory.mktemp("images") / "vit", atlas=False)
    with served_app([run.path]) as url:
        yield url, run


def test_the_image_view_draws_a_patch_attention_and_a_click_changes_the_query(served, page):
    url, run = served
    image, layer, head = 5, 1, 2
    open_view(page, url, f"run=vit&view=sentence&layer={layer}&head={head}&sentence={image}", ids.SENTENCE_GRAPH)
    drawn = page.evaluate(HEATMAP_JS, ids.SENTENCE_GRAPH)
    assert drawn["images"] == 1 and "CLS attends to" in drawn["title"]
    attention = run.attention(layer, head, image)
    rows, cols = run.image_input["grid"]
    np.testing.assert_allclose(np.array(drawn["z"][1:], dtype=float), attention[0, 1:].reshape(rows, cols), atol=1e-6)
    assert drawn["z"][0][0] == pytest.approx(attention[0, 0], abs=1e-6)       # CLS in the row above the image
    layer_mean = page.evaluate(HEATMAP_JS, ids.AGGREGATE_GRAPH)
    expected = np.mean([run.attention(layer, h, image)[0] for h in range(run.n_heads)], axis=0)
    np.testing.assert_allclose(np.array(layer_mean["z"][1:], dtype=float), expected[1:].reshape(rows, cols), atol=1e-6)
    # click patch (2, 3): it becomes the query, in the figure and the URL
    x, y = page.evaluate(HEATMAP_CELL_JS, [ids.SENTENCE_GRAPH, 1 + 2, 3])
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_function("() => /point=/.test(window.location.search)", timeout=15_000)
    wait_idle(page)
    page.wait_for_function(f"() => document.querySelector('#{ids.SENTENCE_GRAPH} .js-plotly-plot')._fullLayout"
                           ".title.text.includes('r2 c3')", timeout=15_000)
    drawn = page.evaluate(HEATMAP_JS, ids.SENTENCE_GRAPH)
    query = 1 + 2 * cols + 3
    np.testing.assert_allclose(np.array(drawn["z"][1:], dtype=float), attention[query, 1:].reshape(rows, cols), atol=1e-6)
    assert f"point={run.sentence_tokens(image).start + query}" in page.url


def test_the_image_shows_under_its_overlay(served, page):
    """The overlay is transparent where attention is weak: the image's own pixels show through there."""
    url, run = served
    open_view(page, url, "run=vit&view=sentence&layer=0&head=0&sentence=0", ids.SENTENCE_GRAPH)
    box = page.locator(f"#{ids.SENTENCE_GRAPH} .imagelayer image").bounding_box()
    pixels = screenshot_pixels(page, {"x": box["x"], "y": box["y"], "width": box["width"], "height": box["height"]})
    tiled = np.asarray(Image.open(io.BytesIO(base64.b64decode(
        page.locator(f"#{ids.SENTENCE_GRAPH} .imagelayer image").get_attribute("href").split(",", 1)[1]))))
    assert tiled.shape[2] == 3 and pixels.std() > 10                            # a photograph, not a blank
    small = np.asarray(Image.fromarray(pixels).resize((tiled.shape[1], tiled.shape[0]), Image.Resampling.BOX))
    assert np.corrcoef(small.reshape(-1).astype(float), tiled.reshape(-1).astype(float))[0, 1] > 0.6


def test_hover_shows_the_patch_and_colour_by_patch_row(served, page):
    url, run = served
    open_view(page, url, "run=vit&view=single&layer=1&head=0&method=pca&dim=2&colour=patch_row", ids.SINGLE_GRAPH, 2)
    colours = page.evaluate(f"() => Array.from(document.querySelector('#{ids.SINGLE_GRAPH} .js-plotly-plot')"
                            "._fullData[0].marker.color)")
    np.testing.assert_array_equal(np.array(colours, dtype=float), run.tokens.patch_row.to_numpy())
    options = page.evaluate(f"() => document.querySelector('#{ids.COLOUR_SELECT}').innerText")
    assert "patch row" in options
    token = int(np.flatnonzero(run.tokens.patch_row.to_numpy() == 2)[0])
    click_point(page, ids.SINGLE_GRAPH, 0, token)
    thumbnail = page.locator(f"#{ids.SINGLE_POINT} img.patch-thumbnail")
    thumbnail.wait_for(timeout=15_000)
    shown = np.asarray(Image.open(io.BytesIO(base64.b64decode(thumbnail.get_attribute("src").split(",", 1)[1]))))
    stored = run.patch_thumbnails()[token]
    scale = shown.shape[0] // stored.shape[0]
    np.testing.assert_array_equal(shown[::scale, ::scale], stored)


def test_search_by_image_id_marks_its_tokens(served, page):
    url, run = served
    open_view(page, url, "run=vit&view=single&layer=1&head=0&method=pca&dim=2&search=coffee", ids.SINGLE_GRAPH, 2)
    count = page.locator(f"#{ids.SEARCH_COUNT}").inner_text()
    coffee = run.sentences.text.tolist().index("coffee")
    assert count == f"{run.sentences.n_tokens.iat[coffee]} tokens (1 image by id)"
    matched = page.evaluate(f"() => document.querySelector('#{ids.SINGLE_GRAPH} .js-plotly-plot')._fullData"
                            ".filter(trace => trace.name && trace.name.includes('match')).map(trace => trace.x.length)")
    assert sum(matched) == 2 * run.sentences.n_tokens.iat[coffee], matched      # its queries and its keys, ringed


def test_the_matrix_draws_every_head_of_an_image_run(served, page):
    url, run = served
    open_view(page, url, "run=vit&view=matrix&method=pca", ids.MATRIX_GRAPH, 1)
    cells = page.evaluate(f"() => document.querySelector('#{ids.MATRIX_GRAPH} .js-plotly-plot')._fullData.length")
    assert cells >= 1
