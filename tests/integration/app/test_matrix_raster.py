"""The matrix view's rasterised thumbnails (dash_app/views/matrix/raster.py) on a real tiny run, no browser."""

import base64
import json
import os
import struct
import zlib

import numpy as np
import pytest
from plotly.io.json import to_json_plotly

from dash_app.figure_parts import KEY_COLOUR, QUERY_COLOUR, png_bytes
from dash_app.data.run_data import RunData
from dash_app.data.token_search import TokenSearch
from dash_app.state.view_state import ViewState
from dash_app.views.matrix import grid as matrix_grid, points as matrix_points, raster as matrix_raster, view as matrix_view
from qkviz.core.errors import QkvizError
from qkviz.store.run import open_stored_run
from support.browser import copy_run


def decode_png(png: bytes) -> np.ndarray:
    """An RGBA PNG whose rows carry no filter (as :func:`dash_app.figure_parts.png_bytes` writes them) back to pixels."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks = 8, {}
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        body = png[offset + 8:offset + 8 + length]
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == struct.unpack(">I", png[offset + 8 + length:offset + 12 + length])[0]
        chunks[kind] = chunks.get(kind, b"") + body
        offset += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour_type) == (8, 6)
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, 1 + 4 * width)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(height, width, 4)


def hex_rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])


def test_a_thumbnail_has_pixels_only_where_the_points_are():
    rng = np.random.default_rng(0)
    queries = rng.uniform(0.0, 0.2, size=(500, 2))                 # bottom left corner (y grows upwards)
    keys = np.stack([rng.uniform(0.8, 1.0, 500), rng.uniform(0.8, 1.0, 500)], axis=1)       # top right
    image = matrix_raster.head_thumbnail(np.concatenate([queries, keys]).astype(np.float32), pixels=50)
    alpha = image[..., 3]
    drawn_rows, drawn_columns = np.nonzero(alpha)
    bottom_left = (drawn_rows >= 40) & (drawn_columns < 10)        # image rows run downwards
    top_right = (drawn_rows < 10) & (drawn_columns >= 40)
    assert (bottom_left | top_right).all() and bottom_left.any() and top_right.any()
    assert np.abs(image[45, 5, :3].astype(int) - hex_rgb(QUERY_COLOUR)).max() <= 4     # queries green
    assert np.abs(image[5, 45, :3].astype(int) - hex_rgb(KEY_COLOUR)).max() <= 4       # keys pink
    assert alpha[20:30, 20:30].max() == 0                          # nothing between
    assert np.array_equal(decode_png(png_bytes(image, level=9)), image)


def test_density_sets_opacity_and_nan_points_are_left_out():
    points = np.array([[0.05, 0.05]] * 9 + [[0.95, 0.95], [np.nan, np.nan], [0.5, 0.5]], np.float32)
    image = matrix_raster.head_thumbnail(points, pixels=10)
    assert image[9, 0, 3] == 255 and 0 < image[0, 9, 3] < image[9, 0, 3]   # nine points opaque, one faint
    assert np.count_nonzero(image[..., 3]) == 3


def test_a_continuous_colouring_uses_each_sides_scale():
    points = np.array([[0.1, 0.1], [0.9, 0.9], [0.1, 0.9], [0.9, 0.1]], np.float32)   # queries 0-1, keys 2-3
    image = matrix_raster.head_thumbnail(points, np.array([0.0, 1.0, 0.0, 1.0], np.float32), "position",
                                         (0.0, 1.0), pixels=10)
    def near(pixel, colour):                                          # colours are rounded to multiples of 8
        return np.abs(pixel.astype(float) - colour).max() <= matrix_raster.COLOUR_STEP / 2

    assert near(image[8, 1, :3], matrix_raster.side_scale(0)[0])           # a query at the low end
    assert near(image[0, 9, :3], matrix_raster.side_scale(0)[-1])          # ... and one at the high end
    assert near(image[0, 1, :3], matrix_raster.side_scale(1)[0])           # a key at the low end
    assert not near(image[0, 1, :3], matrix_raster.side_scale(0)[0])


def test_the_threshold_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(matrix_raster.RASTER_POINTS_ENV, raising=False)
    assert matrix_raster.raster_threshold() == matrix_raster.RASTER_POINTS
    monkeypatch.setenv(matrix_raster.RASTER_POINTS_ENV, "12")
    assert matrix_raster.raster_threshold() == 12
    monkeypatch.setenv(matrix_raster.RASTER_POINTS_ENV, "many")
    with pytest.raises(QkvizError, match="QKVIZ_MATRIX_RASTER_POINTS='many' is not a number"):
        matrix_raster.raster_threshold()


@pytest.fixture
def raster_data(app_run, tmp_path, monkeypatch):
    """A writable copy of the tiny run, its matrix drawn as images (threshold 0)."""
    monkeypatch.setenv(matrix_raster.RASTER_POINTS_ENV, "0")
    return RunData(copy_run(app_run, tmp_path / "run", atlas=False), "tiny")


def sheet_grid(raster_data) -> matrix_grid.Grid:
    return matrix_view.matrix_parts(raster_data, ViewState(method="pca"), None).grid


def test_heads_and_sheets_are_cached_in_memory_and_sheets_on_disk(raster_data):
    grid = sheet_grid(raster_data)
    cache = matrix_raster.HeadThumbnails(raster_data)
    first = cache.sheet("pca", "type", grid)
    assert first.startswith("data:image/png;base64,") and cache.drawn == 8 and cache.sheets_drawn == 1
    assert cache.sheet("pca", "type", grid) == first and (cache.drawn, cache.sheets_drawn) == (8, 1)      # memory
    assert len(os.listdir(cache.directory)) == 1
    again = matrix_raster.HeadThumbnails(raster_data)
    assert again.sheet("pca", "type", grid) == first and (again.drawn, again.sheets_drawn) == (0, 0)      # disk
    again.sheet("pca", "punctuation", grid)
    assert again.sheets_drawn == 1 and len(os.listdir(cache.directory)) == 2          # another colouring: drawn
    kept = np.ones(8, bool)
    kept[3] = False
    assert again.sheet("pca", "type", grid, kept) != first and again.drawn == 16      # a filter: the heads, faded
    _, layout_file = raster_data.layout_entry(0, 1, "pca", 2)
    stamp = layout_file.stat().st_mtime_ns
    os.utime(layout_file, ns=(stamp + 10**9, stamp + 10**9))                          # the layout made again
    assert matrix_raster.HeadThumbnails(raster_data).sheet("pca", "type", grid) == first  # same pixels ...
    assert len(os.listdir(cache.directory)) == 4                                     # ... drawn again, a new file


def test_each_head_is_drawn_from_its_own_layout_where_its_points_lie(raster_data):
    """The sheet holds, in each head's square, exactly the pixels its points fall in, the same pixels
    :func:`head_thumbnail` draws at the square's size; the square lies where ``place()`` puts the points; a head a
    filter dims is faded."""
    grid = sheet_grid(raster_data)
    width, height, side = matrix_raster.sheet_pixels(grid)
    kept = np.ones(8, bool)
    kept[5] = False
    cache = matrix_raster.HeadThumbnails(raster_data)
    sheet = decode_png(base64.b64decode(cache.sheet("pca", "type", grid, kept).split(",", 1)[1]))
    assert sheet.shape == (height, width, 4)
    corners = matrix_raster.head_corners(grid)
    layouts = raster_data.all_layouts("pca").points
    drawn = np.zeros((height, width), bool)
    across, down = grid.cell_px
    for flat in range(8):
        left, top = corners[flat]
        square = sheet[top:top + side, left:left + side]
        expected = np.zeros(side * side, bool)
        expected[matrix_raster.pixel_index(layouts[flat], side)] = True
        assert np.array_equal(square[..., 3].ravel() > 0, expected), flat
        own = cache.thumbnail(flat // 4, flat % 4, "pca", "type", side)[1]
        faded = np.rint(own[..., 3] * matrix_raster.DIMMED_OPACITY).astype(np.uint8)
        assert np.array_equal(square[..., 3], faded if flat == 5 else own[..., 3])
        drawn[top:top + side, left:left + side] = True
        # the points place() draws, in pixels of the plot area, lie in the head's square (to a pixel)
        x, y, _ = matrix_points.place(layouts[[flat]], grid, np.arange(raster_data.run.n_tokens), False, heads=[flat])
        column, row = np.asarray(x) / matrix_grid.CELL * across, (grid.n_rows * matrix_grid.CELL - np.asarray(y)) / matrix_grid.CELL * down
        assert left - 1 <= column.min() and column.max() <= left + side + 1
        assert top - 1 <= row.min() and row.max() <= top + side + 1
    assert sheet[~drawn][..., 3].max() == 0                                           # nothing outside the squares


def test_a_rasterised_matrix_places_its_image_over_the_grid_and_clicks_open_heads(raster_data):
    figure, message = matrix_view.render_matrix(raster_data, ViewState(method="pca"), None, None)
    assert "image of all its" in message
    payload = json.loads(to_json_plotly(figure))
    queries, keys, query_matches, _, labels, heads = payload["data"][:6]
    grid = sheet_grid(raster_data)
    images = payload["layout"]["images"]
    assert len(images) == 1 and images[0]["source"].startswith("data:image/png")
    assert (images[0]["x"], images[0]["y"], images[0]["sizex"], images[0]["sizey"]) == (
        0, grid.n_rows * matrix_grid.CELL, grid.n_cols * matrix_grid.CELL, grid.n_rows * matrix_grid.CELL)
    origins = grid.origins()
    # one invisible heatmap cell per head, its centre in the head's cell, its customdata the flat head
    assert heads["type"] == "heatmap" and heads["opacity"] == 0
    cells = {flat: (heads["x"][column], heads["y"][row]) for row, flats in enumerate(heads["customdata"])
             for column, flat in enumerate(flats)}
    assert sorted(cells) == list(range(8))
    for flat, (x, y) in cells.items():
        assert origins[flat, 0] < x < origins[flat, 0] + matrix_grid.CELL
        assert origins[flat, 1] < y < origins[flat, 1] + matrix_grid.CELL
    row, column = next((r, c) for r, flats in enumerate(heads["customdata"]) for c, flat in enumerate(flats) if flat == 6)
    assert heads["text"][row][column] == "L1 H2" and labels["hovertext"][6] == "L1 H2"
    assert queries["x"] == keys["x"] == [] and not [trace for trace in payload["data"] if trace["type"] == "scattergl"]


def test_search_matches_are_drawn_over_the_images(raster_data):
    search = TokenSearch(raster_data.token_index, lambda method: raster_data.all_layouts(method).points)
    matches = search.matches("the", False)
    state = ViewState(method="pca", search="the")
    figure, _ = matrix_view.render_matrix(raster_data, state, None, matches)
    assert len(figure.data[2].x) == 8 * len(matches) and len(figure.layout.images) == 1
    patch = matrix_view.search_patch(raster_data, state, None, matches)[0].to_plotly_json()
    changed = {tuple(operation["location"]): operation["params"]["value"] for operation in patch["operations"]}
    assert set(changed) == {("data", 2), ("data", 3), ("data", 4, "text"), ("data", 4, "hovertext"),
                            ("data", 5, "text")}                               # the images and click targets kept
    assert changed[("data", 2)]["x"]["dtype"] == "u2"                              # typed arrays, not lists
    assert len(np.frombuffer(base64.b64decode(changed[("data", 2)]["x"]["bdata"]), np.uint16)) == len(
        figure.data[2].x)
    assert figure.data[2].type == "scattergl"                   # matches in WebGL; none: an empty SVG trace again
    cleared = matrix_view.search_patch(raster_data, ViewState(method="pca"), None, None)[0].to_plotly_json()
    assert [operation["params"]["value"]["type"] for operation in cleared["operations"]
            if operation["location"] in (["data", 2], ["data", 3])] == ["scatter", "scatter"]


def test_a_continuous_colouring_gets_its_colour_bars(raster_data):
    figure, _ = matrix_view.render_matrix(raster_data, ViewState(method="pca", colour="norm"), None, None)
    bars = [trace for trace in figure.data if getattr(trace, "marker", None) and getattr(trace.marker, "showscale", None)]
    assert [bar.marker.colorbar.title.text for bar in bars] == ["queries: vector norm", "keys: vector norm"]
    low, high = matrix_raster.HeadThumbnails(raster_data).value_range("norm")
    assert bars[0].marker.cmin == low and bars[0].marker.cmax == high
    assert low == pytest.approx(min(raster_data.norms(layer, head).min() for layer in range(2) for head in range(4)))


def test_a_small_run_keeps_its_points(app_run, monkeypatch):
    monkeypatch.delenv(matrix_raster.RASTER_POINTS_ENV, raising=False)
    figure, _ = matrix_view.render_matrix(RunData(open_stored_run(app_run.path), "tiny"), ViewState(method="pca"), None, None)
    assert not figure.layout.images and figure.data[0].name == "queries"


def test_many_heads_are_drawn_as_one_image_unless_the_environment_sets_the_threshold(monkeypatch):
    """Past RASTER_TOTAL_POINTS over all heads (the bundled MiniLM's 72 heads over 5,000 tokens), an image; a
    threshold set in the environment decides alone."""
    from types import SimpleNamespace

    def run(tokens: int, heads: int):
        return SimpleNamespace(run=SimpleNamespace(n_tokens=tokens), n_total_heads=heads)

    monkeypatch.delenv(matrix_raster.RASTER_POINTS_ENV, raising=False)
    assert matrix_raster.rasterised(run(5000, 72)) and matrix_raster.rasterised(run(9123, 1024))
    assert not matrix_raster.rasterised(run(300, 8))
    assert matrix_raster.rasterised(run(10_001, 1))                              # past the per-head threshold
    monkeypatch.setenv(matrix_raster.RASTER_POINTS_ENV, "1000000")
    assert not matrix_raster.rasterised(run(5000, 72))
