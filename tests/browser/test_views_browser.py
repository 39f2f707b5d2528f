"""Issue 17's view fixes, each checked in headless Chromium at a 1400 x 900 window: the Clicked point panel,
URL and ring agree; colour bars and legends; the views fill the window; 3D axes fit the cloud; the sentence
view's own layer / head selectors; the labelled heads map; token labels on zoom only; the matrix coloured by
one setting; search matches drawn visibly on top; PNG / SVG export of every view; the small wordings; one
start-up line."""

import re

import numpy as np
import pytest
from support.browser import (DRAWN_JS, WINDOW_SHARE_JS, click_point, copy_run, open_view, screenshot_pixels, start_server,
                             stop_server, wait_idle)

from dash_app import ids
from dash_app.figure_parts import MATCH_RING

#: page coordinates and [x, y] of point `index` of trace `trace` of a 2D graph
POINT_AT_JS = """([graphId, trace, index]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const layout = graph._fullLayout, data = graph._fullData[trace], box = graph.getBoundingClientRect();
  return [box.left + layout._size.l + layout.xaxis.l2p(data.x[index]),
          box.top + layout._size.t + layout.yaxis.l2p(data.y[index]), Number(data.x[index]), Number(data.y[index])];
}"""


@pytest.fixture(scope="module")
def served(related_data, tmp_path_factory):
    """The app over a copy of the tiny run with its head atlas and related heads (the server makes layouts
    in it); what the server printed is checked when the module ends (one start-up line, no Dash / Flask
    banner, no traceback)."""
    run = copy_run(related_data.run, tmp_path_factory.mktemp("views") / "tiny-views", atlas=False)
    server, url = start_server([run.path])
    yield url
    output = stop_server(server)
    assert "Traceback" not in output, output
    assert "Dash is running" not in output and "Serving Flask app" not in output, output
    assert len(re.findall(r"serving \S+ at http", output)) == 1, output


def choose(page, dropdown: str, option: str) -> None:
    """Pick ``option`` (its label) in a dcc.Dropdown (its menu opens in a layer of the page's own)."""
    page.click(f"#{dropdown}")
    page.get_by_role("option", name=option, exact=True).click()


def url_point(page) -> tuple[int, int]:
    return int(re.search(r"point=(\d+)", page.url)[1]), int(re.search(r"sentence=(\d+)", page.url)[1])


def test_the_clicked_point_panel_the_url_and_the_ring_agree(page, served, related_data):
    run = related_data.run
    for layer, head, trace, index in ((0, 1, 0, 5), (1, 2, 1, 40), (1, 3, 0, 77), (0, 0, 1, 12)):
        open_view(page, served, f"view=single&layer={layer}&head={head}&method=pca&dim=2", ids.SINGLE_GRAPH, 13)
        click_point(page, ids.SINGLE_GRAPH, trace, index)
        page.wait_for_function("() => /point=\\d+/.test(location.search)", timeout=20_000)
        page.wait_for_function("() => document.querySelector('#single-graph .js-plotly-plot')._fullData[11].x.length === 1",
                               timeout=20_000)
        wait_idle(page)
        point, sentence = url_point(page)
        row = run.tokens.iloc[point % run.n_tokens]
        assert sentence == int(row.sentence)
        page.wait_for_function("(text) => document.getElementById('single-point').innerText.includes(text)",
                               arg=f"sentence {sentence}, position {int(row.position)}", timeout=20_000)
        panel = page.inner_text(f"#{ids.SINGLE_POINT}")
        assert ("(key)" if point >= run.n_tokens else "(query)") in panel and str(row.token).strip() in panel
        # the ring (slot 11) sits on the point the URL names
        side, local = divmod(point, run.n_tokens)
        ring, clicked = page.evaluate("""([side, local]) => {
            const g = document.querySelector('#single-graph .js-plotly-plot');
            return [[g._fullData[11].x[0], g._fullData[11].y[0]], [g._fullData[side].x[local], g._fullData[side].y[local]]];
        }""", [side, local])
        assert ring == pytest.approx(clicked)
        # hovering another point names it under the panel; the panel still shows the clicked one
        other = (local + run.n_tokens // 2) % run.n_tokens
        x, y, _, _ = page.evaluate(POINT_AT_JS, [ids.SINGLE_GRAPH, 1 - side, other])
        page.mouse.move(x - 2, y)
        page.mouse.move(x, y)
        page.wait_for_function("() => document.getElementById('single-hover').innerText.includes('under the mouse')",
                               timeout=10_000)
        assert page.inner_text(f"#{ids.SINGLE_POINT}") == panel
        assert url_point(page) == (point, sentence)


def test_the_views_fill_the_window_and_3d_fits_its_cloud(page, served):
    shares = {}
    for view, graph, traces in (("matrix", ids.MATRIX_GRAPH, 6), ("single", ids.SINGLE_GRAPH, 13),
                                ("heads", ids.HEADS_GRAPH, 2)):
        open_view(page, served, f"view={view}&method=pca&dim=2", graph, traces)
        shares[view] = page.evaluate(WINDOW_SHARE_JS, graph)
    # [figure, plot area] shares of the window; before issue 17, on the MiniLM run: matrix [0.66, 0.57], single
    # [0.54, 0.41], heads [0.69, 0.54] (scripts/screenshots.py prints them)
    # issue 40 lowered the matrix's bounds (from 0.75 and 0.6): its graph starts lower (the message line is a fixed
    # two-line slot) and leaves ~35 px below it so that the page and the axes' labels fit the window whole
    # (matrix_grid.PAGE_HEIGHT_PX); it measures [0.67, 0.58] at 1400 x 900
    assert shares["matrix"][0] >= 0.65 and shares["matrix"][1] >= 0.55, shares
    assert shares["single"][0] >= 0.55 and shares["heads"][0] >= 0.75, shares
    # the cells' grid spans the plot area (its shape fitted to the window; test_app_views checks each head's layout
    # is a square on screen inside its cell)
    open_view(page, served, "view=matrix&method=pca&dim=2", ids.MATRIX_GRAPH, 6)
    grid, plot = page.evaluate("""() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
                                  const r = g.querySelector('.heatmaplayer image').getBoundingClientRect(), l = g._fullLayout;
                                  return [[r.width, r.height], [l.xaxis._length, l.yaxis._length]]; }""")
    assert grid == pytest.approx(plot, abs=2)

    open_view(page, served, "view=single&layer=1&head=2&method=pca&dim=3", ids.SINGLE_GRAPH, 13)
    scene = page.evaluate("""() => {
        const g = document.querySelector('#single-graph .js-plotly-plot'), scene = g._fullLayout.scene;
        const axes = ['xaxis', 'yaxis', 'zaxis'].map((name) => scene[name]);
        const spans = axes.map((axis, i) => {
            const values = [0, 1].flatMap((t) => Array.from(g._fullData[t]['xyz'[i]])).sort((a, b) => a - b);
            const inside = values.filter((v) => v >= axis.range[0] && v <= axis.range[1]).length / values.length;
            const span = values[Math.floor(values.length * 0.99)] - values[Math.floor(values.length * 0.01)];
            return [span / (axis.range[1] - axis.range[0]), inside];
        });
        return {visible: axes.every((axis) => axis.visible && axis.showgrid), spans: spans};
    }""")
    assert scene["visible"]
    longest = max(span for span, _ in scene["spans"])
    assert longest >= 0.7, scene                 # the cloud spans most of its box along its longest axis
    assert all(inside >= 0.98 for _, inside in scene["spans"]), scene


def colour_traces(page, graph: str) -> list[dict]:
    return page.evaluate("""(id) => document.querySelector('#' + id + ' .js-plotly-plot')._fullData.map((t) => ({
        name: t.name, showlegend: t.showlegend, showscale: t.marker ? t.marker.showscale : null,
        colorscale: t.marker && t.marker.colorscale ? t.marker.colorscale : null,
        ticktext: t.marker && t.marker.colorbar ? t.marker.colorbar.ticktext : null,
        title: t.marker && t.marker.colorbar && t.marker.colorbar.title ? t.marker.colorbar.title.text : null,
        colours: t.marker && t.marker.color && t.marker.color.length !== undefined && typeof t.marker.color !== 'string'
                 ? t.marker.color.length : 0, points: t.x ? t.x.length : 0}))""", graph)


def lightness(colour: str) -> float:
    if colour.startswith("#"):
        rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    else:
        rgb = [float(part) for part in re.findall(r"[\d.]+", colour)[:3]]
    return sum(rgb) / (3 * 255)


def test_colour_bars_read_as_counts_categories_get_a_legend_and_no_scale_starts_white(page, served, related_data):
    open_view(page, served, "view=single&layer=0&head=1&method=pca&dim=2&colour=frequency", ids.SINGLE_GRAPH, 13)
    queries, keys = colour_traces(page, ids.SINGLE_GRAPH)[:2]
    assert "log scale" in queries["title"] and queries["ticktext"][0] == "1" and "10" in queries["ticktext"]
    for trace in (queries, keys):
        assert lightness(trace["colorscale"][0][1]) < 0.85           # the low end is a clear tint, not white
    for colour, names in (("punctuation", ["word", "punctuation", "special token"]),
                          ("position_mod5", ["0", "1", "2", "3", "4"])):
        open_view(page, served, f"view=single&layer=0&head=1&method=pca&dim=2&colour={colour}", ids.SINGLE_GRAPH, 13)
        traces = colour_traces(page, ids.SINGLE_GRAPH)
        assert traces[0]["showscale"] is False and traces[1]["showscale"] is False
        assert [trace["name"] for trace in traces[13:] if trace["showlegend"]][-len(names):] == names
        assert page.locator("#single-graph .colorbar").count() == 0
        # the same colouring, every head of the matrix at once
        open_view(page, served, f"view=matrix&method=pca&dim=2&colour={colour}", ids.MATRIX_GRAPH, 5)
        traces = colour_traces(page, ids.MATRIX_GRAPH)
        assert all(trace["colours"] == trace["points"] > 0 for trace in traces[:2])
        assert [trace["name"] for trace in traces[6:]] == names             # after the cells (slot 5)
    open_view(page, served, "view=matrix&method=pca&dim=2&colour=norm", ids.MATRIX_GRAPH, 5)
    traces = colour_traces(page, ids.MATRIX_GRAPH)
    assert all(trace["colours"] == trace["points"] > 0 for trace in traces[:2])
    assert page.locator("#matrix-graph .colorbar").count() == 2
    # choosing the colour in the matrix sets it for the single view too
    choose(page, ids.MATRIX_COLOUR, "normalised position")
    page.wait_for_function("() => location.search.includes('colour=position')", timeout=10_000)


def test_the_sentence_view_has_its_layer_and_head_and_the_heads_map_is_labelled(page, served):
    open_view(page, served, "view=sentence&layer=0&head=1&method=pca&dim=2&sentence=2", ids.SENTENCE_GRAPH, 3)
    assert "layer 0 head 1" in page.inner_text(f"#{ids.SENTENCE_MESSAGE}")
    low = page.evaluate("() => document.querySelector('#aggregate-graph .js-plotly-plot')._fullData[0].colorscale[0][1]")
    assert lightness(low) < 0.9                                  # the mean-attention map's low end is not white
    for control, option, expected in ((ids.SENTENCE_HEAD, "3", "head=3"), (ids.SENTENCE_LAYER, "1", "layer=1&head=3")):
        choose(page, control, option)
        page.wait_for_function("(text) => location.search.includes(text)", arg=expected, timeout=10_000)
        wait_idle(page)
    page.wait_for_function("() => document.getElementById('sentence-message').innerText.includes('layer 1 head 3')",
                           timeout=10_000)
    assert "view=sentence" in page.url
    # the weighting switch (issue 38): value-weighted lines, kept in the URL
    page.locator(f"#{ids.SENTENCE_WEIGHTING} input[value='value']").check()
    page.wait_for_function("() => location.search.includes('weighting=value')", timeout=10_000)
    page.wait_for_function("() => document.getElementById('sentence-message').innerText.includes('α·‖W_O v‖')",
                           timeout=10_000)

    open_view(page, served, "view=heads&method=pca&dim=2", ids.HEADS_GRAPH, 2)
    texts = page.evaluate("() => Array.from(document.querySelector('#heads-graph .js-plotly-plot')._fullData[0].text)")
    assert texts == [f"L{flat // 4} H{flat % 4}" for flat in range(8)]
    assert page.locator("#heads-graph .textpoint").count() >= 8
    legend, bar = (page.locator(f"#heads-graph {part}").first.bounding_box() for part in (".legend", ".colorbar"))
    overlap_x = min(legend["x"] + legend["width"], bar["x"] + bar["width"]) - max(legend["x"], bar["x"])
    overlap_y = min(legend["y"] + legend["height"], bar["y"] + bar["height"]) - max(legend["y"], bar["y"])
    assert overlap_x <= 0 or overlap_y <= 0, (legend, bar)


def test_token_labels_show_only_when_zoomed_in(page, served, related_data):
    n_points = 2 * related_data.run.n_tokens
    assert n_points > 300                                       # too many to label at once
    open_view(page, served, "view=single&layer=1&head=2&method=pca&dim=2", ids.SINGLE_GRAPH, 13)
    page.click(f"#{ids.SINGLE_OPTIONS} >> text=token labels")
    page.wait_for_timeout(1500)
    wait_idle(page)
    modes = "() => { const g = document.querySelector('#single-graph .js-plotly-plot'); return [g.data[0].mode, g.data[1].mode]; }"
    assert page.evaluate(modes) == ["markers", "markers"]
    # zoom on a small window around one query: few points in view, labels drawn
    page.evaluate("""() => { const g = document.querySelector('#single-graph .js-plotly-plot');
        const x = g._fullData[0].x[0], y = g._fullData[0].y[0], d = 0.01 * (g._fullLayout.xaxis.range[1] - g._fullLayout.xaxis.range[0]);
        Plotly.relayout(g, {'xaxis.range': [x - d, x + d], 'yaxis.range': [y - d, y + d]}); }""")
    page.wait_for_function(f"() => ({modes})()[0] === 'markers+text'", timeout=10_000)
    assert page.locator("#single-graph .textpoint").count() > 0 or page.evaluate(
        "() => Number(document.querySelector('#single-graph .js-plotly-plot').dataset.labelsInView) <= 300")
    page.evaluate("() => Plotly.relayout(document.querySelector('#single-graph .js-plotly-plot'), "
                  "{'xaxis.autorange': true, 'yaxis.autorange': true})")
    page.wait_for_function(f"() => ({modes})()[0] === 'markers'", timeout=10_000)


def ring_pixels(page, graph: str, trace: int, index: int) -> int:
    """How many pixels of the match ring's colour lie within 8 px of point ``index`` of ``trace``."""
    x, y, _, _ = page.evaluate(POINT_AT_JS, [graph, trace, index])
    pixels = screenshot_pixels(page, {"x": x - 8, "y": y - 8, "width": 16, "height": 16}).astype(int)
    ring = np.array([int(MATCH_RING[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - ring).sum(axis=2) < 60).sum())


def test_a_rare_tokens_match_is_drawn_ringed_on_top(page, served, related_data):
    tokens = related_data.run.tokens.token.str.strip().str.lower()
    counts = tokens.value_counts()
    rare = next(token for token in counts.index[::-1] if counts[token] == 1 and token.isalpha() and len(token) > 3)
    open_view(page, served, f"view=single&layer=1&head=2&method=pca&dim=2&search={rare}", ids.SINGLE_GRAPH, 13)
    page.wait_for_function("() => document.getElementById('search-count').innerText === '1 token'", timeout=10_000)
    assert page.evaluate("() => document.querySelector('#single-graph .js-plotly-plot')._fullData[2].x.length") == 1
    page.mouse.move(5, 5)
    page.wait_for_timeout(500)
    assert ring_pixels(page, ids.SINGLE_GRAPH, 2, 0) >= 10
    assert ring_pixels(page, ids.SINGLE_GRAPH, 3, 0) >= 10

    open_view(page, served, f"view=matrix&method=pca&dim=2&search={rare}", ids.MATRIX_GRAPH, 5)
    page.wait_for_function("() => document.querySelector('#matrix-graph .js-plotly-plot')._fullData[2].x.length === 8",
                           timeout=10_000)
    page.mouse.move(5, 5)
    page.wait_for_timeout(500)
    assert all(ring_pixels(page, ids.MATRIX_GRAPH, 2, head) >= 4 for head in range(8))
    labels = page.evaluate("() => Array.from(document.querySelector('#matrix-graph .js-plotly-plot')._fullData[4].text)")
    assert all(not label.endswith(" cl") for label in labels)
    open_view(page, served, f"view=matrix&method=pca&dim=2&search={rare}&sort=clusters", ids.MATRIX_GRAPH, 5)
    labels = page.evaluate("() => Array.from(document.querySelector('#matrix-graph .js-plotly-plot')._fullData[4].hovertext)")
    assert all(re.search(r"· [12] clusters?$", label.split("<br>")[0]) for label in labels), labels


@pytest.mark.parametrize("view, graph, traces, name", [
    ("matrix", ids.MATRIX_GRAPH, 5, "matrix"), ("single", ids.SINGLE_GRAPH, 13, "single-head"),
    ("sentence", ids.SENTENCE_GRAPH, 3, "sentence"), ("positions", ids.POSITIONS_GRAPH, 1, "positions"),
    ("heads", ids.HEADS_GRAPH, 2, "heads")])
def test_every_view_exports_png_and_svg(page, served, view, graph, traces, name):
    open_view(page, served, f"view={view}&layer=1&head=2&method=pca&dim=2&sentence=1", graph, traces)
    size = page.evaluate("(id) => { const l = document.querySelector('#' + id + ' .js-plotly-plot')._fullLayout;"
                         " return [l.width, l.height]; }", graph)
    for form in ("png", "svg"):
        button = page.locator(f'button[id*=\'"graph":"{graph}"\'][id*=\'"format":"{form}"\']')
        with page.expect_download(timeout=30_000) as download:
            button.click()
        path = download.value.path()
        assert download.value.suggested_filename == f"qkviz-{name}.{form}"
        content = open(path, "rb").read()
        if form == "png":                       # one image of the whole figure, at twice the screen's pixels
            assert content[:8] == b"\x89PNG\r\n\x1a\n"
            width, height = int.from_bytes(content[16:20], "big"), int.from_bytes(content[20:24], "big")
            assert (width, height) == (2 * round(size[0]), 2 * round(size[1]))
        else:
            text = content.decode("utf-8")
            assert text.lstrip().startswith("<svg") and text.rstrip().endswith("</svg>")
            assert f'width="{round(size[0])}"' in text


def test_a_hidden_views_graphs_enter_the_page_when_it_first_shows(page, served):
    """The matrix page holds one graph; a view's graphs are put in when it first shows, drawn at once, and kept
    (the same element) when it shows again."""
    graphs_js = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(graph => graph.parentElement.id)"
    open_view(page, served, "view=matrix&method=pca&dim=2", ids.MATRIX_GRAPH)
    assert page.evaluate(graphs_js) == [ids.MATRIX_GRAPH]
    assert page.evaluate(f"() => document.getElementById('{ids.SINGLE_GRAPH}')") is None
    page.click("#view-tabs >> text=Single head")
    page.wait_for_function(DRAWN_JS, arg=[ids.SINGLE_GRAPH, 13], timeout=30_000)
    wait_idle(page)
    assert sorted(page.evaluate(graphs_js)) == sorted([ids.MATRIX_GRAPH, ids.SINGLE_GRAPH])
    page.evaluate(f"() => {{ window.singleGraph = document.getElementById('{ids.SINGLE_GRAPH}'); }}")
    page.click("#view-tabs >> text=Matrix")
    wait_idle(page)
    page.click("#view-tabs >> text=Single head")
    wait_idle(page)
    assert page.evaluate(f"() => document.getElementById('{ids.SINGLE_GRAPH}') === window.singleGraph")
    assert sorted(page.evaluate(graphs_js)) == sorted([ids.MATRIX_GRAPH, ids.SINGLE_GRAPH])
