"""Related heads in the app (no browser): the single view's list, the matrix ordered by the clustering, the
Heads map; a run without ``qkviz related`` names the command, and one made while the app runs is read."""

import numpy as np
import pytest
from support.browser import copy_run
from support.component_tree import find, texts
from dash import html

from dash_app import ids
from dash_app.panels import related as related_panel
from dash_app.views import heads as heads_view
from dash_app.views.matrix import grid as matrix_grid, view as matrix_view
from dash_app.app import build_app, next_state, open_runs
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState
from dash_app.url_state import parse_url, to_url
from qkviz.cli import main
from qkviz.analysis.atlas.head_similarity import related_heads


def test_without_a_similarity_every_place_names_qkviz_related_and_it_appears_once_made(app_run, tmp_path):
    data = RunData(copy_run(app_run, tmp_path / "later", atlas=False), "later")
    line = f"No head similarity for this run yet: make it with 'qkviz related --run {data.run.path}'."
    assert data.related() is None and data.related_stamp() == -1
    assert texts(related_panel.render_related(data, 1, 2)) == [line]
    figure, message, options = heads_view.render_heads(data, ViewState(view="heads", method="pca"), "layer")
    assert message == line and len(figure.data) == 0
    assert [option["disabled"] for option in options] == [False, True]       # no atlas: no colour by label
    _, message = matrix_view.render_matrix(data, ViewState(method="pca", sort="related"), None, None)
    assert line in message
    assert main(["-q", "related", "--run", str(data.run.path), "--max-queries", "50"]) == 0
    made = data.related()
    assert made is not None and made.max_queries == 50 and data.related() is made   # read once, then kept
    assert len(find(related_panel.render_related(data, 1, 2), html.Button)) == 10


def test_the_panel_lists_five_heads_by_attention_and_five_by_geometry_as_buttons(related_data):
    similarity = related_data.related()
    panel = related_panel.render_related(related_data, 1, 2)
    buttons = find(panel, html.Button)
    assert len(buttons) == 10
    for by, chosen in (("attention", buttons[:5]), ("geometry", buttons[5:])):
        expected = related_heads(similarity, 1, 2, 5, by)
        assert [button.id for button in chosen] == [
            {"type": ids.RELATED_HEAD, "layer": head.layer, "head": head.head, "by": by} for head in expected]
        for button, head in zip(chosen, expected):
            words = texts(button)
            assert words[0] == f"L{head.layer} H{head.head}" and words[-1] == f"{head.value:.3f}"
            assert words[1] == related_data.atlas_row(head.layer, head.head)["label"]   # the atlas label
    assert (1, 2) not in [(button.id["layer"], button.id["head"]) for button in buttons]
    assert "By attention" in texts(panel)[0] and any("By query/key geometry" in text for text in texts(panel))


def test_a_related_head_click_opens_that_head(related_data):
    runs = [related_data]
    current = ViewState(view="single", layer=1, head=2, method="pca", point=5).as_dict()
    state, _ = next_state(ids.RELATED_CLICK, {"layer": 0, "head": 3, "timestamp": 1}, current, "", runs)
    assert (state.view, state.layer, state.head) == ("single", 0, 3)
    for bad in (None, {"layer": 2, "head": 0}, {"layer": 0, "head": 4}, {"layer": "x", "head": 1}):
        assert next_state(ids.RELATED_CLICK, bad, current, "", runs)[0] == ViewState.from_dict(current)


def test_the_heads_map_has_one_point_per_head_coloured_by_layer_or_label_and_a_click_opens_it(related_data):
    similarity = related_data.related()
    state = ViewState(view="heads", layer=1, head=1, method="pca")
    figure, message, options = heads_view.render_heads(related_data, state, "layer")
    assert message == "" and [option["disabled"] for option in options] == [False, False]
    points, ring = figure.data
    assert np.array_equal(np.asarray(points.customdata), np.arange(8))
    assert np.allclose(np.column_stack([points.x, points.y]), similarity.map_xy)
    assert list(points.marker.color) == [0] * 4 + [1] * 4
    nearest = int(np.argmin(similarity.js_distance[5] + np.diag(np.full(8, np.inf))[5]))
    label = related_data.atlas_row(1, 1)["label"]
    assert points.hovertext[5] == (f"L1 H1 · {label} · nearest L{nearest // 4} H{nearest % 4} "
                                   f"(JS {similarity.js_distance[5, nearest]:.3f})")
    assert list(ring.customdata) == [5]                                      # the open head, ringed
    by_label, _, _ = heads_view.render_heads(related_data, state, "label")
    traces = by_label.data[:-1]
    assert sorted(int(flat) for trace in traces for flat in trace.customdata) == list(range(8))
    for trace in traces:
        assert {related_data.atlas_row(int(flat) // 4, int(flat) % 4)["label"] for flat in trace.customdata} == {
            trace.name}
    runs = [related_data]
    current = state.as_dict()
    opened, _ = next_state(ids.HEADS_CLICK, {"curve": 0, "customdata": 6, "timestamp": 1}, current, "", runs)
    assert (opened.view, opened.layer, opened.head) == ("single", 1, 2)
    assert next_state(ids.HEADS_CLICK, {"curve": 0, "customdata": 8}, current, "", runs)[0].view == "heads"


def test_label_colouring_without_an_atlas_falls_back_to_layer_with_the_command(app_run, tmp_path):
    data = RunData(copy_run(app_run, tmp_path / "no-atlas", atlas=False), "no-atlas")
    assert main(["-q", "related", "--run", str(data.run.path), "--max-queries", "50"]) == 0
    figure, message, _ = heads_view.render_heads(data, ViewState(view="heads", method="pca"), "label")
    assert f"qkviz stats --run {data.run.path}" in message
    assert len(figure.data) == 2 and figure.data[0].marker.colorscale is not None
    assert figure.data[0].hovertext[0].startswith("L0 H0 · nearest ")       # no label without an atlas


def test_the_matrix_is_ordered_by_the_clustering(related_data):
    order = related_data.related().order
    figure, message = matrix_view.render_matrix(related_data, ViewState(method="pca", sort="related"), None, None)
    assert message == ""
    grid = matrix_view.matrix_parts(related_data, ViewState(method="pca", sort="related"), None).grid
    origins = grid.origins()
    first = int(order[0])
    assert origins[first].tolist() == [0, (grid.n_rows - 1) * matrix_grid.CELL]    # the first leaf at the top left
    labels = figure.data[4]
    assert labels.x[first] == pytest.approx(origins[first, 0] + 0.03 * matrix_grid.CELL)
    assert labels.text[first].startswith(f"L{first // 4} H{first % 4}")           # a list grid's cells name their heads
    state = ViewState(method="pca", sort="related")
    assert parse_url(to_url(state, [related_data.shape]), [related_data.shape]) == (state, [])
    assert "related" in [option["value"] for option in matrix_view.sort_control_options(related_data)]


def test_the_app_has_the_heads_view_and_the_related_panel(related_data):
    layout = str(build_app(open_runs([related_data.run.path])).layout())
    assert f"id='{ids.HEADS_VIEW}'" in layout and "value='heads'" in layout and f"id='{ids.SINGLE_RELATED}'" in layout
    assert parse_url("?view=heads", [related_data.shape])[0].view == "heads"
