"""The selection panel and the compare view without a browser: what the server takes from a relayed selection,
the selection's table, the runs found comparable, the attention change made at start-up (not in a request),
and the compare and selection callbacks of a served two-run app fed hostile values."""

import time

import numpy as np
import pytest
from support.browser import served_in_thread
from test_hostile_requests import hostile_failures, post, request_for

from dash_app import ids
from dash_app.app import build_app, open_runs
from dash_app.data.attention_changes import AttentionChanges, comparable_pairs
from dash import html
from support.component_tree import find, texts

from dash_app.panels.selection import marked_sentence, selected_points, selection_frame, selection_table
from dash_app.views.compare import change_outputs, clicked_cell

import qkviz


def test_a_relayed_selection_keeps_only_valid_query_and_key_points():
    n = 5
    assert list(selected_points({"curves": [0, 1, 0, 1, 4, 0], "points": [3, 7, 3, 2, 9, 5]}, n)) == [3, 7]
    assert list(selected_points({"curves": [], "points": []}, n)) == []
    for forged in (None, "x", [], {"curves": [0], "points": [1, 2]}, {"curves": [0, 0], "points": [1, "2"]},
                   {"curves": [True], "points": [1]}, {"curves": [0] * 11, "points": list(range(11))},
                   {"curves": [0], "points": [10**30]}, {"curves": [0], "points": [1.0]}, {"points": [1]}):
        assert selected_points(forged, n) is None, forged
    assert list(selected_points({"curves": [0, 1, 1, 0], "points": [-1, 4, 10, 2]}, n)) == [2]


def test_the_selection_table_marks_each_token_in_its_sentence(tiny_run):
    from dash_app.data.run_data import RunData

    run = tiny_run("bert")
    data = RunData(run, "tiny-bert")
    points = np.array([0, 3, run.n_tokens + 3, 2 * run.n_tokens - 1])
    frame = selection_frame(data, 1, 2, points)
    tokens = run.tokens
    assert list(frame.point) == list(points) and list(frame.kind) == ["query", "query", "key", "key"]
    assert list(frame.token) == list(tokens.token.iloc[points % run.n_tokens])
    assert frame.in_sentence[0].startswith("«[CLS]» ") and frame.in_sentence[3].endswith(" «[SEP]»")
    row = tokens.iloc[3]
    text = run.sentences.text.iat[int(row.sentence)]
    assert frame.in_sentence[1] == text[:row.char_start] + "«" + text[row.char_start:row.char_end] + "»" + text[row.char_end:]
    norms = np.linalg.norm(run.keys(1, 2)[3])
    assert frame.norm[2] == pytest.approx(norms, rel=1e-6)
    assert marked_sentence("a b", 2, 3, 1, "b") == "a «b»"
    assert marked_sentence("« x »", 2, 3, 1, "x") == "« «x» »"
    # the page's rows: the token bold in its sentence, as the frame marks it
    table = selection_table(data, frame)
    bold = [texts(cell)[0] for cell in find(table[1], html.B)]
    assert bold == ["[CLS]", text[row.char_start:row.char_end], text[row.char_start:row.char_end], "[SEP]"]
    assert texts(table[0])[0].startswith("4 points selected (2 queries, 2 keys)")


def test_clicked_heatmap_cell_is_checked():
    assert clicked_cell({"points": [{"x": 3, "y": 1}]}, 2, 4) == (1, 3)
    for forged in (None, {}, {"points": []}, {"points": [{"x": 4, "y": 1}]}, {"points": [{"x": "1", "y": 0}]},
                   {"points": [{"x": True, "y": 0}]}, {"points": [{"x": 1.5, "y": 0}]}):
        assert clicked_cell(forged, 2, 4) is None


@pytest.fixture(scope="module")
def two_runs(tiny_run, reseeded_run):
    """Two runs of one model over the same tokens, a run over other tokens, and one with other heads."""
    return open_runs([tiny_run("llama").path, reseeded_run("llama").path, tiny_run("llama", seed=1).path,
                      tiny_run("gemma3").path])


def test_only_runs_over_the_same_tokens_and_heads_are_compared_and_off_the_request_path(two_runs):
    assert comparable_pairs(two_runs) == [(0, 1)]
    changes = AttentionChanges(two_runs)
    assert changes.table(1, 0) is None                   # nothing computed before start, nor by the view
    status, _, table, finished = change_outputs(two_runs, changes, 0, 1)
    assert "being computed" in status and table is None and not finished
    assert changes.table(1, 0) is None
    changes.start()
    deadline = time.monotonic() + 60
    while changes.table(1, 0) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    expected = qkviz.attention_change(two_runs[0].run, two_runs[1].run, progress=False)
    assert changes.table(1, 0).equals(expected) and changes.comparable(0, 1) and not changes.comparable(0, 2)
    status, heatmap, table, finished = change_outputs(two_runs, changes, 1, 0)
    assert "Click a cell" in status and table is not None and finished
    assert np.allclose(heatmap.data[0].z, expected.mean_js.to_numpy().reshape(2, 4))
    for forged in ((0, 2), (0, 0), ("0", 1), (True, 1), (None, None)):   # not a comparable pair: no table
        assert change_outputs(two_runs, changes, *forged)[2] is None


@pytest.fixture(scope="module")
def served(two_runs):
    app = build_app(two_runs)
    with served_in_thread(app) as url:
        yield app, int(url.rstrip("/").rsplit(":", 1)[1])


def test_selection_and_compare_callbacks_take_hostile_values(served, two_runs):
    app, port = served
    ours = [(output, spec) for output, spec in app.callback_map.items() if "callback" in spec
            and any(name in output for name in (ids.SELECTION_TABLE, ids.SELECTION_DOWNLOAD, "compare-"))]
    assert len(ours) >= 5
    failures = [failure for output, spec in ours for failure in hostile_failures(port, output, spec)]
    assert not failures, failures[:5]

    # a valid selection is kept on the run's data, as Run.selection reads it
    output, spec = next((output, spec) for output, spec in app.callback_map.items() if ids.SELECTION_TABLE in output)
    state = {"run": 1, "view": "single", "layer": 1, "head": 0, "method": "pca"}
    status, text = post(port, request_for(output, spec, [{"curves": [0, 1, 5], "points": [4, two_runs[1].run.n_tokens + 2, 1]},
                                                         state, None]))
    assert status == 200 and b"2 points selected" in text
    assert list(two_runs[1].selection.point) == [4, two_runs[1].run.n_tokens + 2]
    assert (two_runs[1].selection[["layer", "head"]].to_numpy() == [1, 0]).all()
