"""The head atlas in the app (no browser): the single view's panel, the matrix ordered and coloured by an
atlas column, the Positions view; a run without an atlas names the command that makes one."""

import json
from dataclasses import replace

import numpy as np
import pytest
from support.browser import copy_run
from support.component_tree import find, texts
from dash import html
from plotly.io.json import to_json_plotly

from dash_app import ids
from dash_app.panels import atlas as atlas_panel
from dash_app.views import positions as positions_view, sentence as sentence_view
from dash_app.views.matrix import grid as matrix_grid, view as matrix_view
from dash_app.app import next_state, open_runs
from dash_app.data.atlas_columns import format_value, label_codes
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState, validate
from dash_app.url_state import parse_url, to_url
from qkviz.cli import main
from qkviz.analysis.labels import LABELS
from qkviz.report import LABEL_COLOURS


@pytest.fixture(scope="module")
def atlas_data(app_run, tmp_path_factory):
    """The tiny Llama run (2 layers x 4 heads, a decoder) copied, with its head atlas."""
    return RunData(copy_run(app_run, tmp_path_factory.mktemp("atlas") / "tiny-atlas"), "tiny-atlas")


def test_without_an_atlas_every_place_names_qkviz_stats_and_the_atlas_appears_once_made(app_run, tmp_path):
    data = RunData(copy_run(app_run, tmp_path / "later", atlas=False), "later")
    line = f"No head atlas for this run yet: make it with 'qkviz stats --run {data.run.path}'."
    assert data.atlas() is None and data.atlas_sorts() == () and data.shape.atlas_sorts == ()
    assert texts(atlas_panel.head_panel(data, 1, 2)) == [line]
    figure, message = positions_view.render_positions(data)
    assert message == line and len(figure.data) == 0
    assert matrix_view.sort_control_options(data) == matrix_view.SORT_OPTIONS
    state, notices = parse_url("?sort=mean_distance", [data.shape])
    assert state.sort == "order" and "sort='mean_distance'" in notices[0]
    # made while the app runs: read at the next call; made again with other thresholds: read again
    assert main(["-q", "stats", "--run", str(data.run.path)]) == 0
    first = data.atlas()
    assert first is not None and {"label", "mean_distance", "share_content"} <= set(data.atlas_sorts())
    assert data.atlas() is first                                              # cached while unchanged
    assert main(["-q", "stats", "--run", str(data.run.path), *LOW_THRESHOLDS]) == 0
    again = data.atlas()
    assert again is not first and again.thresholds.position_mass == 0.01
    assert not again.table.label.isin(["broad", "content"]).any()            # every head got a pattern label
    (data.run.path / "stats" / "atlas.json").write_text("{}")                  # a broken marker: no atlas, no crash
    assert data.atlas() is None


def test_the_panel_shows_label_statistics_and_exemplars_as_text(atlas_data):
    exemplars = atlas_data.atlas().exemplars
    top = exemplars[exemplars["rank"] < 3]
    apart = top[top["query"] != top["key"]].iloc[0]                          # a head whose pairs are not all "self"
    layer, head = int(apart.layer), int(apart["head"])
    row = atlas_data.atlas_row(layer, head)
    panel = atlas_panel.head_panel(atlas_data, layer, head)
    words = texts(panel)
    assert words[:4] == ["strongest label: ", row.label, " ", row.label_detail]
    table = find(panel, html.Table)[0]
    cells = {texts(line.children[0])[0]: texts(line.children[1])[0] for line in table.children.children}
    assert cells["mean distance"] == format_value("mean_distance", row.mean_distance) == f"{row.mean_distance:.3g}"
    assert cells["normalised entropy"] == f"{row.entropy_normalised:.3g}"
    assert cells["strongest key: first token"] == f"{100 * row.argmax_first:.1f}%"
    assert cells["logit share: content"] == f"{100 * row.share_content:.1f}%" and "logit share: positional" in cells
    assert "strongest key: next token" not in cells                         # a decoder never attends ahead
    assert not any(name.startswith("head update") for name in cells)        # extracted without --head-update
    buttons = find(panel, html.Button)
    expected = exemplars[(exemplars.layer == layer) & (exemplars["head"] == head)].sort_values("rank").head(3)
    assert len(buttons) == 3
    for button, exemplar in zip(buttons, expected.itertuples()):
        first = int(atlas_data.sentences.first_token.iat[exemplar.sentence])
        assert button.id == {"type": ids.EXEMPLAR, "layer": layer, "head": head, "sentence": int(exemplar.sentence),
                             "point": first + int(exemplar.query)}
        heading, sentence = button.children
        assert "".join(texts(heading)) == f"{exemplar.query_token} → {exemplar.key_token}  ({exemplar.weight:.2f})"
        assert "".join(texts(sentence)) == exemplar.text                     # the whole sentence, as text
        for mark in find(sentence, html.Mark):                               # the pair's characters marked
            token = first + int(exemplar.query if mark.className == "q" else exemplar.key)
            assert mark.children == atlas_data.tokens.token.iat[token].strip()


def test_a_sentence_is_plain_text_pieces_with_the_pair_marked(atlas_data):
    first = int(atlas_data.sentences.first_token.iat[0])
    pieces = atlas_panel.marked_sentence(atlas_data, 0, first + 3, first + 1)
    assert "".join(texts(pieces)) == atlas_data.sentences.text.iat[0]
    assert all(isinstance(piece, str) or (isinstance(piece, html.Mark) and isinstance(piece.children, str))
               for piece in pieces)
    assert [mark.className for mark in find(pieces, html.Mark)] == ["k", "q"]  # in reading order
    special = atlas_panel.marked_sentence(atlas_data, 0, first, first)       # BOS has no characters
    assert special[-1] == atlas_data.sentences.text.iat[0] and not find(special, html.Mark)


def test_an_exemplar_click_opens_its_sentence_in_that_head(atlas_data):
    runs = [atlas_data]
    exemplar = atlas_data.atlas().exemplars.query("layer == 0 and head == 3 and rank == 0").iloc[0]
    point = int(atlas_data.sentences.first_token.iat[exemplar.sentence]) + int(exemplar["query"])
    current = ViewState(view="single", layer=1, head=2, method="pca").as_dict()
    event = {"layer": 0, "head": 3, "sentence": int(exemplar.sentence), "point": point, "timestamp": 1}
    state, _ = next_state(ids.EXEMPLAR_CLICK, event, current, "", runs)
    assert (state.view, state.layer, state.head, state.sentence, state.point) == (
        "sentence", 0, 3, int(exemplar.sentence), point)
    figure, _ = sentence_view.render_sentence(atlas_data, state, [])
    assert figure.data[0].textfont.weight[int(exemplar["query"])] == "bold"     # the exemplar's query token
    other = (int(exemplar.sentence) + 1) % atlas_data.run.n_sentences
    elsewhere = dict(event, point=int(atlas_data.sentences.first_token.iat[other]))
    assert next_state(ids.EXEMPLAR_CLICK, elsewhere, current, "", runs)[0] == ViewState.from_dict(current)
    assert next_state(ids.EXEMPLAR_CLICK, None, current, "", runs)[0] == ViewState.from_dict(current)


def test_the_matrix_is_ordered_coloured_and_badged_by_a_statistic(atlas_data):
    values = atlas_data.atlas_grid("mean_distance")
    table = atlas_data.atlas().table
    assert values[1 * 4 + 2] == table.query("layer == 1 and head == 2").mean_distance.iat[0]
    figure, message = matrix_view.render_matrix(atlas_data, ViewState(method="pca", sort="mean_distance"), None, None)
    assert message == ""
    payload = json.loads(to_json_plotly(figure))
    labels, cells = payload["data"][4], payload["data"][5]
    assert cells["type"] == "heatmap" and cells["hovertemplate"] == "%{text}<extra></extra>" and 0 < cells["opacity"] < 1
    z = np.asarray(figure.data[5].z)
    highest = int(np.argmax(values))
    assert z[-1, 0] == values[highest] and z[0, -1] == values.min()          # highest at the top left
    assert np.array_equal(np.sort(z.ravel())[::-1], np.sort(values)[::-1])
    assert (cells["zmin"], cells["zmax"]) == (values.min(), values.max())
    grid = matrix_view.matrix_parts(atlas_data, ViewState(method="pca", sort="mean_distance"), None).grid
    assert not grid.model and grid.origins()[highest].tolist() == [0, (grid.n_rows - 1) * matrix_grid.CELL]
    row = table.query(f"layer == {highest // 4} and head == {highest % 4}").iloc[0]
    assert labels["text"][highest] == (f"L{highest // 4} H{highest % 4}<br>{atlas_panel_tag(row)} · "
                                       f"{format_value('mean_distance', row.mean_distance)}")
    plain, _ = matrix_view.render_matrix(atlas_data, ViewState(method="pca"), None, None)
    assert len(plain.data) == 6 and plain.data[4].text[0] == ""              # model order: no colour, no badge
    assert plain.data[5].opacity == 0 and list(plain.layout.yaxis.ticktext) == ["L0", "L1"]


#: thresholds every head of a random model passes: each earns a label other than broad or content
LOW_THRESHOLDS = ["--argmax-share", "0.01", "--position-mass", "0.01", "--over-chance", "0", "--broad-entropy", "1"]


def atlas_panel_tag(row) -> str:
    from dash_app.data.atlas_columns import label_tag

    return label_tag(row.label, row.offset)


def test_the_matrix_is_grouped_and_coloured_by_label(atlas_data, tmp_path):
    data = RunData(copy_run(atlas_data.run, tmp_path / "labels", atlas=False), "labels")
    assert main(["-q", "stats", "--no-probes", "--run", str(data.run.path), *LOW_THRESHOLDS]) == 0
    earned = data.atlas().labels
    middle = float(np.median(earned[earned.label == "self"].score))      # half the heads earn self, half nothing
    assert main(["-q", "stats", "--no-probes", "--run", str(data.run.path), "--over-chance", "0",
                 "--position-mass", f"{middle:.6f}"]) == 0
    labels = data.atlas().table.label.to_numpy()
    assert len(set(labels)) > 1
    figure, _ = matrix_view.render_matrix(data, ViewState(method="pca", sort="label"), None, None)
    order = matrix_view.head_order(label_codes(labels))
    codes_in_grid_order = np.asarray(figure.data[5].z)[::-1].ravel()
    assert np.all(np.diff(codes_in_grid_order) >= 0)                         # grouped in the rules' order
    assert [LABELS[int(code)] for code in codes_in_grid_order] == list(labels[order])
    cells = figure.data[5]
    assert cells.showscale is False and (cells.zmin, cells.zmax) == (-0.5, len(LABELS) - 0.5)
    legend = {trace.name: trace.marker.color for trace in figure.data[6:]}     # labels are named in a legend, no bar
    assert legend == {label: LABEL_COLOURS[label] for label in LABELS if label in set(labels)}
    assert all(text.split("<br>")[1] in {atlas_panel_tag(row) for row in data.atlas().table.itertuples()}
               for text in figure.data[4].text)


def test_atlas_sorts_survive_the_url_and_the_sort_control_offers_them(atlas_data):
    shape = atlas_data.shape
    assert {"label", "entropy_normalised", "share_positional"} <= set(shape.atlas_sorts)
    assert "layer" not in shape.atlas_sorts and "label_detail" not in shape.atlas_sorts
    state = ViewState(method="pca", sort="entropy_normalised")
    assert parse_url(to_url(state, [shape]), [shape]) == (state, [])
    values = [option["value"] for option in matrix_view.sort_control_options(atlas_data)]
    assert values[:4] == ["order", "correlation", "clusters", "related"] and values[4:] == list(shape.atlas_sorts)


def test_positions_heatmap_is_the_corpus_mean_by_offset_and_a_row_opens_its_head(atlas_data):
    figure, message = positions_view.render_positions(atlas_data)
    assert message == ""
    heatmap = figure.data[0]
    assert list(heatmap.y) == [f"L{layer} H{head}" for layer in range(2) for head in range(4)]
    offsets = np.asarray(heatmap.x)
    assert offsets.max() == 0 and offsets.min() < -10                        # a decoder: keys at or before the query
    # the mean weight at offset -1 of layer 1 head 2, from the run's attention sentence by sentence
    run, column = atlas_data.run, int(np.flatnonzero(offsets == -1)[0])
    diagonals = np.concatenate([np.diagonal(run.attention(1, 2, sentence), offset=-1)
                                for sentence in range(run.n_sentences)])
    assert 10 ** np.asarray(heatmap.z)[6, column] == pytest.approx(diagonals.mean(), rel=1e-4)
    assert len(figure.layout.shapes) == 1                                    # one line between the two layers
    runs = [atlas_data]
    current = ViewState(view="positions", method="pca").as_dict()
    opened, _ = next_state(ids.POSITIONS_CLICK, {"curve": 0, "customdata": 6, "timestamp": 1}, current, "", runs)
    assert (opened.view, opened.layer, opened.head) == ("single", 1, 2)
    assert next_state(ids.POSITIONS_CLICK, {"curve": 0, "customdata": 8}, current, "", runs)[0].view == "positions"
    assert parse_url("?view=positions", [atlas_data.shape])[0].view == "positions"


def test_the_app_has_the_positions_view(atlas_data):
    from dash_app.app import build_app

    layout = str(build_app(open_runs([atlas_data.run.path])).layout())
    assert f"id='{ids.POSITIONS_VIEW}'" in layout and "value='positions'" in layout


def test_the_label_share_is_rounded_as_the_statistics_are():
    import pandas as pd

    from qkviz.analysis.labels.head_labels import head_label

    shares = {"argmax_previous": 0.0, "argmax_next": 0.0, "argmax_self": 0.0, "argmax_offset": 0.0,
              "argmax_first": 0.9994, "argmax_delimiter": 0.0, "entropy_normalised": 0.3, "offset": 0.0}
    label, detail = head_label(shares)
    assert (label, detail) == ("first-token", "99.9% of queries")
    assert format_value("argmax_first", 0.9994) == "99.9%"
    # an atlas made before the rule kept whole percents: the panel writes the share as the table does
    row = pd.Series({**shares, "label": label, "label_detail": "100% of queries"})
    assert atlas_panel.label_detail(row) == "99.9% of queries"
    row = pd.Series({**shares, "argmax_offset": 0.9996, "argmax_first": 0.1, "offset": -4.0, "label": "fixed-offset",
                     "label_detail": "offset -4: 100% of queries"})
    assert atlas_panel.label_detail(row) == "offset -4: 100.0% of queries"


def test_the_matrix_is_filtered_by_a_statistic_or_labels_fading_or_hiding_the_others(atlas_data):
    values = atlas_data.atlas_grid("entropy_normalised")
    middle = float(np.median(values))
    state = ViewState(method="pca", filter_by="entropy_normalised", filter_min=middle)
    kept = matrix_view.filter_mask(atlas_data, state)
    assert kept.tolist() == (values >= middle).tolist() and 0 < kept.sum() < 8
    figure, message = matrix_view.render_matrix(atlas_data, state, None, None)
    assert f"{int(kept.sum())} of 8 heads kept by normalised entropy; the others faded" in message
    opacity, heads = np.asarray(figure.data[0].marker.opacity), np.asarray(figure.data[0].customdata)
    assert np.all(opacity[kept[heads]] == 0.6) and np.all(opacity[~kept[heads]] < 0.1)     # faded, still drawn
    hidden, message = matrix_view.render_matrix(atlas_data, replace(state, filter_mode="hide"), None, None)
    cells = np.asarray(hidden.data[5].customdata, dtype=object)
    assert sorted(flat for flat in cells.ravel() if flat is not None) == np.flatnonzero(kept).tolist()
    assert set(np.asarray(hidden.data[0].customdata).tolist()) == set(np.flatnonzero(kept).tolist())
    assert "the others left out" in message

    label = atlas_data.atlas().table.label.iat[0]
    by_label = ViewState(method="pca", filter_by="label", filter_labels=(label,), filter_mode="hide")
    kept = matrix_view.filter_mask(atlas_data, by_label)
    assert kept.tolist() == (atlas_data.atlas().table.sort_values(["layer", "head"]).label == label).tolist()
    assert matrix_view.filter_mask(atlas_data, replace(by_label, filter_labels=())) is None    # no label chosen: all
    shape = atlas_data.shape
    assert parse_url(to_url(by_label, [shape]), [shape]) == (by_label, [])
    forged = validate(replace(by_label, filter_labels=["<script>", 3], filter_min=float("inf"), filter_by="../x"),
                      shape, ViewState(method="pca"))
    assert (forged.filter_labels, forged.filter_min, forged.filter_by) == ((), None, "")
