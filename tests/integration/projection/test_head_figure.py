"""``Run.plot``: one head's layout as a Plotly figure, coloured like the app, exported offline with kaleido."""

import numpy as np
import plotly.colors
import pytest

import qkviz
from qkviz.report.token_colours import token_features

LAYER, HEAD = 1, 2


@pytest.fixture
def plot_run(tiny_run, tmp_path):
    """A copy of the tiny Llama run with the PCA layouts (2D and 3D) of one head only."""
    from support.browser import copy_run

    run = qkviz.open_run(copy_run(tiny_run("llama"), tmp_path / "run", atlas=False).path)
    qkviz.project(run, methods=["pca"], dims=[2, 3], layers=[LAYER], heads=[HEAD], progress=False)
    return run


def luminance(colour: str) -> float:
    red, green, blue = plotly.colors.hex_to_rgb(colour) if colour.startswith("#") else \
        plotly.colors.unlabel_rgb(colour)
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def test_categorical_colourings_have_a_legend_and_every_point_once(plot_run):
    n = plot_run.n_tokens
    layout = plot_run.projection(LAYER, HEAD, method="pca")
    figure = plot_run.plot(LAYER, HEAD, colour="type")
    assert [trace.name for trace in figure.data] == ["queries", "keys"]
    np.testing.assert_allclose(np.asarray(figure.data[0].x), layout[:n, 0])
    np.testing.assert_allclose(np.asarray(figure.data[1].y), layout[n:, 1])
    assert figure.data[0].marker.symbol == "circle" and figure.data[1].marker.symbol == "diamond"
    assert list(figure.data[0].hovertext) == [t.replace("<", "&lt;").replace(">", "&gt;") for t in plot_run.tokens.token]
    assert "coloraxis" not in figure.layout or figure.layout.coloraxis.colorbar.title.text is None

    punctuation = plot_run.plot(LAYER, HEAD, colour="punctuation")
    classes = token_features(plot_run.tokens).punctuation.to_numpy()
    counts = {trace.name: len(trace.x) for trace in punctuation.data}
    assert counts["word, query"] == counts["word, key"] == int((classes == 0).sum())
    assert counts["special token, key"] == int((classes == 2).sum()) > 0
    assert sum(counts.values()) == 2 * n and all(trace.showlegend is not False for trace in punctuation.data)
    modulo = plot_run.plot(LAYER, HEAD, colour="position_mod5")
    assert {trace.name for trace in modulo.data} >= {f"position mod 5 = {v}, key" for v in range(5)}


@pytest.mark.parametrize("colour, title", [("position", "normalised position"), ("norm", "vector norm"),
                                           ("frequency", "token frequency in the corpus (log10)")])
def test_continuous_colourings_have_a_titled_colour_bar_visible_on_white(plot_run, colour, title):
    n = plot_run.n_tokens
    figure = plot_run.plot(LAYER, HEAD, colour=colour)
    assert figure.layout.coloraxis.colorbar.title.text == title
    assert figure.layout.template.layout.plot_bgcolor == "white"
    scale = figure.layout.coloraxis.colorscale
    assert max(luminance(scale[0][1]), luminance(scale[-1][1])) < 0.92, scale
    values = np.concatenate([np.asarray(trace.marker.color) for trace in figure.data])
    if colour == "norm":
        expected = np.linalg.norm(plot_run.queries(LAYER, HEAD), axis=1)
        np.testing.assert_allclose(values[:n], expected, rtol=1e-6)
        np.testing.assert_allclose(values[n:], np.linalg.norm(plot_run.keys(LAYER, HEAD), axis=1), rtol=1e-6)
    if colour == "frequency":
        counts = token_features(plot_run.tokens).frequency.to_numpy()
        assert counts.max() > 10
        np.testing.assert_allclose(values[:n], np.log10(counts), rtol=1e-6)


def test_the_best_cached_layout_is_taken_and_a_missing_one_is_made(plot_run, tmp_path):
    assert "pca 2D" in plot_run.plot(LAYER, HEAD).layout.title.text
    assert plot_run.plot(LAYER, HEAD, dim=3).data[0].type == "scatter3d"
    assert not plot_run.has_projection(LAYER, HEAD, "tsne")
    assert "tsne 2D" in plot_run.plot(LAYER, HEAD, method="tsne", progress=False).layout.title.text   # made now
    assert plot_run.has_projection(LAYER, HEAD, "tsne")
    with pytest.raises(qkviz.QkvizError, match="unknown colour 'hue'; choose one of type, position"):
        plot_run.plot(LAYER, HEAD, colour="hue")


def test_attention_tsne_is_preferred_once_it_is_made(tiny_run, tmp_path):
    from support.browser import copy_run

    run = qkviz.open_run(copy_run(tiny_run("llama"), tmp_path / "run", atlas=False).path)
    qkviz.project(run, methods=["pca", "attn-tsne"], dims=[2], layers=[0], heads=[1], progress=False)
    figure = run.plot(0, 1, colour="position")
    assert "attn-tsne 2D" in figure.layout.title.text
    np.testing.assert_allclose(np.asarray(figure.data[0].x), run.projection(0, 1, method="attn-tsne")[:run.n_tokens, 0])


def test_write_image_works_offline(plot_run, tmp_path):
    figure = plot_run.plot(LAYER, HEAD, colour="punctuation")
    figure.write_image(tmp_path / "head.svg")
    figure.write_image(tmp_path / "head.png", scale=1)
    svg = (tmp_path / "head.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "special token, key" in svg
    assert (tmp_path / "head.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
