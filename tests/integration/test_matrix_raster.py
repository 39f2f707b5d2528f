"""The matrix view's rasterised thumbnails (dash_app/views/matrix_raster.py) on a real tiny run, no browser."""

import base64
import json
import os
import struct
import zlib

import numpy as np
import pytest
from plotly.io.json import to_json_plotly

from dash_app.figure_parts import KEY_COLOUR, QUERY_COLOUR, png_bytes
from dash_app.run_data import RunData
from dash_app.token_search import TokenSearch
from dash_app.state import ViewState
from dash_app.views import matrix as matrix_view, matrix_grid, matrix_points, matrix_raster
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


def test_thumbnails_are_cached_in_memory_and_on_disk(raster_data):
    cache = matrix_raster.HeadThumbnails(raster_data)
    first = cache.all("pca", "type")
    assert cache.drawn == 8 and all(uri.startswith("data:image/png;base64,") for uri in first)
    assert cache.all("pca", "type") == first and cache.drawn == 8                    # memory
    assert len(os.listdir(cache.directory)) == 8
    again = matrix_raster.HeadThumbnails(raster_data)
    assert again.all("pca", "type") == first and again.drawn == 0                     # disk
    again.all("pca", "punctuation")
    assert again.drawn == 8 and len(os.listdir(cache.directory)) == 16                # another colouring: drawn
    _, layout_file = raster_data.layout_entry(0, 1, "pca", 2)
    stamp = layout_file.stat().st_mtime_ns
    os.utime(layout_file, ns=(stamp + 10**9, stamp + 10**9))                          # the layout made again
    assert matrix_raster.HeadThumbnails(raster_data).all("pca", "type")[1] == first[1]  # same pixels ...
    assert len(os.listdir(cache.directory)) == 17                                    # ... drawn again, a new file


def test_a_thumbnail_is_drawn_from_the_heads_own_layout(raster_data):
    cache = matrix_raster.HeadThumbnails(raster_data, pixels=40)
    image = decode_png(base64.b64decode(cache.thumbnail(1, 2, "pca", "type").split(",", 1)[1]))
    points = raster_data.all_layouts("pca").points[1 * 4 + 2]
    expected = np.zeros(40 * 40, bool)
    expected[matrix_raster.pixel_index(points, 40)] = True
    assert np.array_equal(image[..., 3].ravel() > 0, expected)


def test_a_rasterised_matrix_places_images_in_the_cells_and_clicks_open_heads(raster_data):
    figure, message = matrix_view.render_matrix(raster_data, ViewState(method="pca"), None, None)
    assert "image of all its" in message
    payload = json.loads(to_json_plotly(figure))
    queries, keys, query_matches, _, labels, heads = payload["data"][:6]
    images = payload["layout"]["images"]
    assert len(images) == 8 and all(image["source"].startswith("data:image/png") for image in images)
    layouts = raster_data.all_layouts("pca").points
    grid = matrix_view.matrix_parts(raster_data, ViewState(method="pca"), None).grid
    origins = grid.origins()
    for flat, image in enumerate(images):      # the points place() draws lie inside the head's image (to a grid unit)
        x, y, _ = matrix_points.place(layouts[[flat]], grid, np.arange(raster_data.run.n_tokens), False, heads=[flat])
        assert image["x"] - 1 <= x.min() and x.max() <= image["x"] + image["sizex"] + 1
        assert image["y"] - image["sizey"] - 1 <= y.min() and y.max() <= image["y"] + 1
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
    assert len(figure.data[2].x) == 8 * len(matches) and len(figure.layout.images) == 8
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
