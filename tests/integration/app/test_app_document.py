"""The document view's server side on a real tiny run (no browser): registered and in the URL, its image bounded
and coloured from qkviz.analysis, every relayed zoom checked."""

import base64
import zlib

import numpy as np
import pytest

from dash_app.app import build_app
from dash_app.data.run_data import RunData
from dash_app.url_state import parse_url, to_url
from dash_app.state.view_registry import view_names
from dash_app.views import document, document_figure
from qkviz.analysis import document_head, document_overview, repeated_span
from qkviz.core import LogitRule


@pytest.fixture(scope="module")
def data(app_run):
    return RunData(app_run, "tiny")


def png_pixels(uri: str) -> np.ndarray:
    """The RGB pixels of an unfiltered 8-bit RGB PNG (as figure_parts.png_bytes writes it)."""
    raw = base64.b64decode(uri.split(",", 1)[1])
    width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    body, at = b"", 8
    while at < len(raw):
        length, kind = int.from_bytes(raw[at:at + 4], "big"), raw[at + 4:at + 8]
        if kind == b"IDAT":
            body += raw[at + 8:at + 8 + length]
        at += 12 + length
    rows = np.frombuffer(zlib.decompress(body), np.uint8).reshape(height, 1 + 3 * width)
    return rows[:, 1:].reshape(height, width, 3)


def test_the_view_is_registered_and_in_the_url(data):
    assert "document" in view_names()
    state, notices = parse_url("?view=document&sentence=3&layer=1&head=2", [data.shape])
    assert (state.view, state.sentence, state.layer, state.head) == ("document", 3, 1, 2) and not notices
    assert "sentence=3" in to_url(state, [data.shape])
    build_app([data])                                            # its callbacks register with the shell's


def test_the_image_is_the_pooled_map_coloured_and_bounded(data):
    cache = document.DocumentCache(data)
    sentence = int(np.flatnonzero(data.sentences.n_tokens.to_numpy() <= document.LABELLED_TOKENS)[0])
    pooled, profile = cache.whole(1, 2, sentence, "max")
    rows = data.run.sentence_tokens(sentence)
    ids = data.tokens.token_id.to_numpy()[rows]
    special = data.tokens.is_special.to_numpy()[rows]
    expected, expected_profile = document_overview(document_head(data.run, 1, 2, sentence), special, repeated_span(ids),
                                                    (document.MAP_PIXELS, document.MAP_PIXELS))
    assert np.array_equal(pooled.values, expected.values)
    assert profile.previous_token == expected_profile.previous_token
    trace = document_figure.image_trace(pooled)
    pixels = png_pixels(trace["source"])
    n = rows.stop - rows.start
    assert pixels.shape == (n, n, 3) and trace["dx"] == 1.0 and trace["x0"] == 0.0
    assert np.all(pixels[np.triu_indices(n, 1)] == document_figure.MASKED_RGB)       # a decoder: no key after its query
    assert np.all(pixels[np.tril_indices(n)].min(axis=-1) < 255)            # allowed: tinted by their weight
    assert (pixels[0, 0] == document_figure.SCALE_RGB[-1]).all()                   # the first query's weight is 1
    figure = document_figure.map_figure(pooled, data.display_text[rows], "t", "r")
    assert figure.layout.xaxis.ticktext[0].endswith(" 0")                   # a short document: tokens labelled


def test_a_long_documents_image_is_capped_at_the_plot_size():
    generator = np.random.default_rng(0)
    head = document.DocumentHead(generator.normal(size=(1500, 4)), generator.normal(size=(1500, 4)),
                                 LogitRule(0.5, causal=True))
    pooled, _ = document_overview(head, np.zeros(1500, bool), None, (document.MAP_PIXELS, document.MAP_PIXELS))
    trace = document_figure.image_trace(pooled)
    assert png_pixels(trace["source"]).shape == (document.MAP_PIXELS, document.MAP_PIXELS, 3)
    assert trace["dx"] * document.MAP_PIXELS == pytest.approx(1500)


@pytest.mark.parametrize("relayout, expected", [
    ({"xaxis.range[0]": 9.5, "xaxis.range[1]": 40.5, "yaxis.range[0]": 50.2, "yaxis.range[1]": 19.5},
     ((20, 51), (10, 41))),
    ({"xaxis.range": [-1e300, 1e300]}, ((5, 9), (0, 100))),
    ({"xaxis.autorange": True, "yaxis.autorange": True}, ((0, 100), (0, 100))),
    ({"xaxis.range": [50, 50.1]}, ((5, 9), (48, 52))),                           # at least MIN_REGION tokens
    ({"autosize": True}, None), ({"xaxis.range": ["1", None]}, None), ({"xaxis.range": [float("nan"), 3]}, None),
    ({"xaxis.range": [True, 3]}, None), ({"xaxis.range": [1, 2, 3]}, None), ("x" * 1000, None), (None, None),
])
def test_every_zoom_the_browser_relays_is_checked(relayout, expected):
    assert document.zoomed_region(relayout, {"rows": [5, 9], "columns": [0, 100]}, 100) == expected


@pytest.mark.parametrize("drawn", [None, "x", {"rows": "x"}, {"rows": [9, 5]}, {"rows": [0, 10**9]},
                                   {"rows": [True, 3]}, {"rows": [0.5, 3]}])
def test_a_forged_region_store_is_the_whole_document(drawn):
    assert document.zoomed_region({"xaxis.range": [9.5, 40.5]}, drawn, 100) == ((0, 100), (10, 41))


def test_document_options_name_their_length(data):
    options = document.document_options(data, current=30)
    assert options[0]["label"].startswith(f"0: {int(data.sentences.n_tokens[0])} tokens")
    assert document.document_options(data, "zzzz-no-such-text", current=2)[0]["value"] == 2


def test_a_head_asked_for_twice_at_once_is_computed_once(data, monkeypatch):
    import threading
    import time

    calls = []

    def slow_overview(*arguments):
        calls.append(arguments)
        time.sleep(0.3)
        return document_overview(*arguments)

    monkeypatch.setattr(document, "document_overview", slow_overview)
    cache = document.DocumentCache(data)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.whole(0, 1, 2, "mean"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 3 and all(result is results[0] for result in results)
