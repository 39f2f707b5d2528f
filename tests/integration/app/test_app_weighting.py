"""The app's attention / value-weighted switch (issue 38, part 3) on a real tiny run, without a browser: the state
and the URL carry it, the server validates it, and the sentence, single-head and document views draw
``a_ij |W_O^h v_j|`` as each query's share (``|v_j|``, labelled so, in a run without output norms)."""

import json
import shutil

import numpy as np
import pytest

from dash_app import ids
from dash_app.app import next_state
from dash_app.state.control_options import weighting_labels, weighting_options
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState, checked_state
from dash_app.url_state import parse_url, to_url
from dash_app.views import document as document_view, sentence as sentence_view, single as single_view
from qkviz.analysis import adjusted_attention, document_head, pooled_attention
from qkviz.store import files as run_files
from qkviz.store.run import open_stored_run


@pytest.fixture(scope="module")
def data(app_run):
    return RunData(app_run, "tiny")


@pytest.fixture(scope="module")
def old_data(app_run, tmp_path_factory):
    """The tiny run as a qkviz before output norms wrote it."""
    copy = tmp_path_factory.mktemp("old") / "tiny-old"
    shutil.copytree(app_run.path, copy)
    (copy / run_files.OUTPUT_NORMS).unlink()
    manifest = json.loads((copy / run_files.MANIFEST).read_text())
    for key in ("files", "sha256"):
        manifest[key].pop(run_files.OUTPUT_NORMS)
    manifest.pop("output_norms")
    (copy / run_files.MANIFEST).write_text(json.dumps(manifest))
    return RunData(open_stored_run(copy), "tiny-old")


def test_the_url_carries_the_weighting_and_refuses_others(data):
    state = ViewState(view="sentence", layer=1, head=2, sentence=3, weighting="value", method=data.shape.default_method)
    url = to_url(state, [data.shape])
    assert "weighting=value" in url and parse_url(url, [data.shape]) == (state, [])
    assert "weighting" not in to_url(ViewState(method=data.shape.default_method), [data.shape])
    parsed, notices = parse_url("?view=sentence&weighting=values", [data.shape])
    assert parsed.weighting == "attention" and len(notices) == 1 and "weighting" in notices[0]


def test_the_server_takes_only_a_known_weighting(data):
    assert checked_state({"weighting": "value"}, [data]).weighting == "value"
    for forged in ("values", 1, None, ["value"], "x" * 10_000):
        assert checked_state({"weighting": forged}, [data]).weighting == "attention"


@pytest.mark.parametrize("view, control", [("sentence", ids.SENTENCE_WEIGHTING), ("single", ids.SINGLE_WEIGHTING),
                                           ("document", ids.DOCUMENT_WEIGHTING)])
def test_each_views_switch_sets_the_weighting(data, view, control):
    current = ViewState(view=view, method=data.shape.default_method).as_dict()
    state, _ = next_state(control, "value", current, "", [data], {control: "value"})
    assert state.weighting == "value"
    state, _ = next_state(control, "evil", current, "", [data], {control: "evil"})
    assert state.weighting == "attention"


def test_the_switch_names_what_value_weighting_is_for_the_run(data, old_data):
    assert weighting_labels(data)["value"] == "value-weighted: α·‖W_O v‖"
    assert "‖v‖" in weighting_labels(old_data)["value"] and "no ‖W_O v‖" in weighting_labels(old_data)["value"]
    options = weighting_options(data, ViewState(), None)
    assert [option["value"] for option in options] == ["attention", "value"]


def test_the_sentence_view_draws_each_querys_share_of_what_it_moves(data, old_data):
    rows = data.sentence_rows(4)
    weights, hidden = sentence_view.sentence_weights(data, 0, 1, 4, [], "value")
    attention = data.run.attention(0, 1, 4)
    expected = adjusted_attention(attention, hidden, data.run.output_norms(0, 1)[rows])
    assert np.allclose(weights, expected) and np.allclose(weights.sum(axis=1), 1)
    moved = data.run.attention(0, 1, 4, weighting="value")                # a_ij |W_O v_j|, rows not rescaled
    assert np.allclose(weights, moved / moved.sum(axis=1, keepdims=True))
    assert np.abs(weights - attention).max() > 1e-3                      # it changes what is drawn
    old, _ = sentence_view.sentence_weights(old_data, 0, 1, 4, [], "value")
    assert np.allclose(old, adjusted_attention(attention, hidden, old_data.run.value_norms(0, 1)[rows]))
    state = ViewState(view="sentence", layer=0, head=1, sentence=4, weighting="value")
    _, message = sentence_view.render_sentence(data, state, [])
    assert "α·‖W_O v‖" in message


def test_the_single_view_draws_lines_to_the_keys_a_query_moves_most_from(data):
    coordinates = data.layout(1, 2, "pca", 2)
    rows = data.sentence_rows(3)
    token = int(rows[5])
    shares = adjusted_attention(data.run.attention(1, 2, 3), np.zeros(len(rows), bool),
                                data.run.output_norms(1, 2)[rows])[5]
    traces = single_view.overlay_traces(data, coordinates, 1, 2, token, 3, 0.0, weighting="value")
    ends = np.sort(np.concatenate([np.asarray(t["x"])[1::3] for t in traces[2:2 + single_view.OPACITY_STEPS]]))
    expected = np.sort(coordinates[rows[np.argsort(-shares)[:3]] + data.run.n_tokens, 0])
    assert np.allclose(ends, expected)


def test_the_document_map_is_value_weighted_row_by_row(data):
    run, sentence = data.run, 2
    rows = run.sentence_tokens(sentence)
    n = rows.stop - rows.start
    norms = run.output_norms(0, 3)[rows]
    weighted = pooled_attention(document_head(run, 0, 3, sentence, run.output_norms(0, 3)), shape=(n, n))
    expected = adjusted_attention(run.attention(0, 3, sentence), np.zeros(n, bool), norms)
    assert np.allclose(weighted.values, expected)
    cache = document_view.DocumentCache(data)
    whole, profile = cache.whole(0, 3, sentence, "max", "value")
    plain, _ = cache.whole(0, 3, sentence, "max")
    assert not np.allclose(whole.values, plain.values) and profile.first_token == pytest.approx(expected[:, 0].mean())
