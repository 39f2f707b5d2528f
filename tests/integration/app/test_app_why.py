"""The why panel and the composition view on the tiny Llama run (no browser).

* A query, then one of its keys (single and sentence views), or a cell of the document view's map, is the state's
  pair, which the URL keeps; the panel explains it off the request thread (pending, then the split), and each of
  its sets of bars adds up to the logit it shows, the logit of the run's stored query and key.
* A lasso's explanation is the attention-weighted mean split: each side's bars add up to its mean logit.
* A run whose model cannot be found shows the one-line reason; forged subjects and hostile values are refused.
* The composition view draws the stored circuits' edges (side, weight, minimum, top N and focus filters), its
  V-edges beside the Q- and K-edges with their own side, minimum and top N (hostile values taken as the defaults on
  the server), a click on a head opens it, and without circuits it says how to make them.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from support.browser import copy_run, served_in_thread
from support.component_tree import texts
from test_hostile_requests import answered, callback_request, hostile_failures, request_for

from dash_app import ids
from dash_app.app import build_app, next_state, open_runs
from dash_app.explain_worker import ExplainWorker, new_session
from dash_app.panels import why
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState, checked_state, select_point
from dash_app.url_state import parse_url, to_url
from dash_app.views import composition, document

LAYER, HEAD = 1, 2
#: the page's session id, as its load gives it
PAGE = new_session()


@pytest.fixture(scope="module")
def circuits_run(app_run, tmp_path_factory):
    """The tiny run copied, with every head's circuit stored (over 200 tokens)."""
    import qkviz
    from qkviz.explain import compute_circuits

    run = copy_run(app_run, tmp_path_factory.mktemp("why") / "tiny-why", atlas=False)
    compute_circuits(run, budget=200)
    return qkviz.open_run(run.path)


@pytest.fixture(scope="module")
def data(circuits_run):
    return RunData(circuits_run, "tiny-why")


def a_pair(data: RunData) -> tuple[int, int]:
    """A query late in sentence 1 and a key before it (token rows)."""
    rows = data.run.sentence_tokens(1)
    return rows.stop - 2, rows.start + 1


def test_a_query_then_its_key_is_the_pair_and_the_url_keeps_it(data):
    shape, n = data.shape, data.run.n_tokens
    query, key = a_pair(data)
    state = ViewState(view="single", method="pca")
    state = select_point(state, query, 1, shape)
    assert state.pair_point is None and why.pair_subject(data, state) is None
    state = select_point(state, n + key, 1, shape)                # one of its keys: the pair
    assert (state.point, state.pair_point) == (n + key, query)
    subject = why.pair_subject(data, replace_head(state))
    assert (subject.queries, subject.keys, subject.kind) == ((query,), (key,), "pair")
    other = select_point(state, n + key - 1, 1, shape)            # another key pairs with the same query
    assert other.pair_point == query
    assert select_point(other, key + 1, 1, shape).pair_point == n + key - 1   # a query pairs with the last key
    # the URL keeps the pair; one that does not pair with the point is dropped with a notice
    restored, notices = parse_url(to_url(state, [shape]), [shape])
    assert (restored.point, restored.pair_point) == (state.point, state.pair_point) and notices == []
    forged, notices = parse_url(f"?view=single&point={query}&pair={query + 1}", [shape])
    assert forged.pair_point is None and any("pair=" in notice for notice in notices)
    # the server's check drops a pair of the same kind, out of range, or of another type
    for pair_point in (n + key + 1, 2 * n, -1, True, "3", 2.0):
        assert checked_state({**state.as_dict(), "pair_point": pair_point}, [data]).pair_point is None


def replace_head(state: ViewState) -> ViewState:
    from dataclasses import replace

    return replace(state, layer=LAYER, head=HEAD)


def bar_sums(children: list, class_name: str = "why-bars") -> list[float]:
    """Each bar trace's sum, from the panel's graph (its figure as plotly JSON)."""
    from dash import dcc

    from support.component_tree import find

    graphs = [graph for graph in find(children, dcc.Graph) if graph.className == class_name]
    assert len(graphs) == 1
    figure = graphs[0].figure
    return [float(np.sum(trace.x)) for trace in figure.data]


def shown_logit(children: list) -> float:
    from dash import html

    from support.component_tree import find

    bold = [b for b in find(children, html.B) if getattr(b, "className", "") == "why-logit"]
    assert len(bold) == 1
    return float(bold[0].children)


def test_a_pairs_bars_add_up_to_its_logit_the_stored_one(data):
    query, key = a_pair(data)
    subject = why.Subject("pair", 0, LAYER, HEAD, (query,), (key,))
    answer = ExplainWorker().wait(subject, lambda: why.explain(data, subject))
    assert not answer.pending and answer.error is None, answer.error
    frames = answer.result["splits"]
    run = data.run
    stored = run.scale(LAYER) * float(run.queries(LAYER, HEAD)[query] @ run.keys(LAYER, HEAD)[key])
    for by, frame in frames.items():
        assert frame.attrs["logit"] == pytest.approx(stored, abs=1e-4)
        assert frame.contribution.sum() == pytest.approx(stored, abs=1e-4), by
        assert frame.equals(run.explain(LAYER, HEAD, query, key, by=by))       # one pass gives explain's tables
    children = why.render(data, subject, answer)
    logit = shown_logit(children)
    assert logit == pytest.approx(stored, abs=1e-4)
    sums = bar_sums(children)
    assert len(sums) == 3 and all(total == pytest.approx(logit, abs=1e-3) for total in sums)
    words = " ".join(texts(children))
    assert str(data.tokens.token.iat[query]) in words and str(data.tokens.token.iat[key]) in words
    assert "query part" in words                                                # the pair table
    # what the head writes: the tiny run's model was saved without its language-model head, so the section says so
    assert "What it writes at the query" in words and "no language-model head" in answer.result["writes"]
    assert answer.result["writes"] in words and "\n" not in answer.result["writes"]


def test_a_lassos_bars_add_up_to_its_mean_logit(data):
    n = data.run.n_tokens
    rows = data.run.sentence_tokens(2)
    points = np.array([*range(rows.start + 2, rows.stop), *(n + t for t in range(rows.start, rows.start + 4))])
    state = ViewState(view="single", method="pca", layer=LAYER, head=HEAD)
    subject = why.selection_subject(data, state, points)
    assert subject.kind == "selection" and len(subject.keys) == 4
    assert why.selection_subject(data, state, points[points < n]) is None     # queries only: nothing to explain
    answer = ExplainWorker().wait(subject, lambda: why.explain(data, subject))
    assert answer.error is None, answer.error
    children = why.render(data, subject, answer)
    logit = shown_logit(children)
    assert logit == pytest.approx(answer.result.mean_logit, abs=1e-4)
    assert all(total == pytest.approx(logit, abs=1e-3) for total in bar_sums(children))


def test_forged_subjects_are_refused(data):
    runs = [data]
    good = why.Subject("pair", 0, LAYER, HEAD, (5,), (3,)).as_dict()
    assert why.checked_subject(good, runs) == why.Subject("pair", 0, LAYER, HEAD, (5,), (3,))
    forged = [None, [], "x", {**good, "kind": "other"}, {**good, "run": 1}, {**good, "layer": True},
              {**good, "head": 99}, {**good, "queries": [5, 6]}, {**good, "keys": []},
              {**good, "keys": [data.run.n_tokens]}, {**good, "queries": ["5"]}, {**good, "queries": [5.0]},
              {**good, "kind": "selection", "keys": list(range(data.run.n_tokens + 1))}]
    assert all(why.checked_subject(value, runs) is None for value in forged)


def panel_request(app, view: str, values: list):
    return callback_request(app, ids.why_ids(view).panel + ".children", values)


def test_the_panel_is_pending_then_explains_the_pair_through_the_server(data):
    app = build_app([data])
    query, key = a_pair(data)
    n = data.run.n_tokens
    state = {"view": "sentence", "method": "pca", "layer": LAYER, "head": HEAD, "sentence": 1, "point": n + key,
             "pair_point": query}
    names = ids.why_ids("sentence")
    with served_in_thread(app) as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        output, spec, body = panel_request(app, "sentence", [state, 0, None, PAGE])
        response = answered(port, body, f"{ids.view_state('sentence')}.data")
        shown = response[names.shown]["data"]
        assert shown == why.Subject("pair", 0, LAYER, HEAD, (query,), (key,)).as_dict()
        assert response[names.panel]["style"] == {"display": "block"}
        deadline = time.monotonic() + 120
        while response[names.poll]["disabled"] is False and time.monotonic() < deadline:   # polled until it is in
            time.sleep(0.2)
            response = answered(port, request_for(output, spec, [state, 1, shown, PAGE]), f"{names.poll}.n_intervals")
        assert response[names.poll]["disabled"] is True
        assert "why-logit" in json.dumps(response[names.panel]["children"])
        # the state without a pair hides the panel
        response = answered(port, request_for(output, spec, [{**state, "pair_point": None}, 1, shown, PAGE]),
                            f"{ids.view_state('sentence')}.data")
        assert response[names.panel]["style"] == {"display": "none"} and response[names.shown]["data"] is None


def test_a_run_whose_model_cannot_be_found_says_why_in_one_line(circuits_run, tmp_path):
    run = copy_run(circuits_run, tmp_path / "lost-model", atlas=False)
    manifest_path = run.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["model"]["id"] = str(tmp_path / "no-such-model")
    manifest_path.write_text(json.dumps(manifest))
    lost = open_runs([run.path])[0]
    query, key = a_pair(lost)
    subject = why.Subject("pair", 0, LAYER, HEAD, (query,), (key,))
    answer = ExplainWorker().wait(subject, lambda: why.explain(lost, subject))
    assert answer.error is not None and "\n" not in answer.error and "no-such-model" in answer.error
    children = why.render(lost, subject, answer)
    assert texts(children) == [answer.error] and "Traceback" not in answer.error


def test_a_masked_pair_is_refused_in_the_panel_in_one_line(data):
    """A key after the query in this causal run: the panel says in one line that the pair is masked (no bars)."""
    run = data.run
    rows = run.sentence_tokens(0)
    query, key = rows.start, rows.start + 2
    subject = why.Subject("pair", 0, LAYER, HEAD, (query,), (key,))
    answer = ExplainWorker().wait(subject, lambda: why.explain(data, subject))
    assert answer.error is not None and "\n" not in answer.error, answer.error
    assert f"key {key} comes after query {query}" in answer.error and "masked" in answer.error
    assert texts(why.render(data, subject, answer)) == [answer.error]


def test_the_new_callbacks_take_hostile_values(data):
    app = build_app([data])
    ours = [(output, spec) for output, spec in app.callback_map.items() if "callback" in spec
            and any(name in output for name in ("-why.children", f"{ids.COMPOSITION_GRAPH}.figure"))]
    assert len(ours) == 4                      # the why panel of three views, the composition graph
    failures = []
    with served_in_thread(app) as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        for output, spec in ours:
            failures += hostile_failures(port, output, spec)
    assert not failures, failures[:5]


def test_a_cell_of_the_document_map_is_the_pair(data):
    state = ViewState(view="document", method="pca", sentence=1, layer=LAYER, head=HEAD)
    rows = data.run.sentence_tokens(1)
    chosen = document.select_clicked_cell(state, {"row": 5, "column": 2, "timestamp": 1}, data, data.shape)
    assert (chosen.point, chosen.pair_point) == (rows.start + 5, data.run.n_tokens + rows.start + 2)
    assert why.pair_subject(data, chosen).queries == (rows.start + 5,)
    n = rows.stop - rows.start
    for event in (None, {}, {"row": n, "column": 0}, {"row": 0, "column": -1}, {"row": "x", "column": 1},
                  {"row": [1], "column": 1}):
        assert document.select_clicked_cell(state, event, data, data.shape) == state


def test_the_composition_view_draws_the_stored_edges_and_a_click_opens_a_head(data, app_run):
    circuits = data.run.circuits
    assert circuits is not None
    figure, message = composition.render_composition(data, circuits, (0, 0), list(composition.SIDES), "contribution",
                                                     0, 10, -1, -1)
    names = [trace.name for trace in figure.data]
    heads = figure.data[names.index("heads")]
    assert list(heads.customdata) == list(range(data.run.n_layers * data.run.n_heads))
    assert "20 edges drawn" in message and "strongest 10 Q/K edges" in message and "10 V-edges" in message
    keys_only = composition.chosen_edges(circuits, "key", "lift", 0.0, 1000, -1, -1)
    assert set(keys_only.side) == {"key"} and (keys_only.source_layer < keys_only.target_layer).all()
    focused = composition.chosen_edges(circuits, "both", "contribution", 0.0, 1000, 1, 0)
    assert len(focused) and (((focused.target_layer == 1) & (focused.target_head == 0))
                             | ((focused.source_layer == 1) & (focused.source_head == 0))).all()
    strongest = composition.chosen_edges(circuits, "both", "contribution", 0.0, 1000, -1, -1).weight.abs()
    high = float(strongest.median())
    assert (composition.chosen_edges(circuits, "both", "contribution", high, 1000, -1, -1).weight.abs() >= high).all()
    # hostile controls become the defaults
    figure, message = composition.render_composition(data, circuits, (0, 0), [], {}, "x", True, "1", None)
    assert f"{composition.DEFAULT_TOP}" in message or "edges drawn" in message
    for hostile in ({"value": 1}, 7, None, ["value", 3, None, "nope"]):
        assert set(composition.chosen_sides(hostile)) <= {"query", "key", "value"}
    assert composition.chosen_sides(["value", 3, "nope"]) == ("value",)
    assert composition.chosen_sides("both") == ("query", "key") and composition.chosen_sides([]) == ()
    # a click on head node 6 (layer 1, head 2) opens it in the single view
    state = ViewState(view="composition", method="pca").as_dict()
    opened, _ = next_state(ids.COMPOSITION_CLICK, {"curve": names.index("heads"), "customdata": 6, "timestamp": 1},
                           state, None, [data])
    assert (opened.view, opened.layer, opened.head) == ("single", 1, 2)
    # a run without circuits says how to make them
    plain = RunData(app_run, "tiny")
    figure, message = composition.render_composition(plain, plain.run.circuits, (0, 0), "both", "contribution", 0,
                                                     10, -1, -1)
    assert f"qkviz stats --run {app_run.path} --circuits" in message


def test_the_composition_view_draws_v_edges_with_their_own_filter(data):
    circuits = data.run.circuits
    assert "value" in set(circuits.side)
    values = composition.chosen_edges(circuits, ["value"], "contribution", 0.0, 1000, -1, -1)
    assert len(values) and set(values.side) == {"value"} and (values.source_layer < values.target_layer).all()
    # the V minimum filters V-edges only; the Q/K minimum Q- and K-edges only
    high = float(values.weight.abs().median())
    every = composition.chosen_edges(circuits, list(composition.SIDES), "contribution", 0.0, 1000, -1, -1)
    filtered = composition.chosen_edges(circuits, list(composition.SIDES), "contribution", 0.0, 1000, -1, -1, high)
    assert (filtered[filtered.side == "value"].weight.abs() >= high).all()
    assert 0 < (filtered.side == "value").sum() < (every.side == "value").sum()
    assert (filtered.side != "value").sum() == (every.side != "value").sum()
    # drawn in their own colour, into the top of each node; with lift there are none, and the page says why
    figure, message = composition.render_composition(data, circuits, (0, 0), ["value"], "contribution", 0, 5, -1, -1,
                                                     "bad")
    lines = [trace for trace in figure.data if trace.name == "value edges"]
    assert lines and all(trace.line.color == composition.VALUE_COLOUR for trace in lines)
    assert "5 edges drawn" in message and "0 Q/K edges" in message
    ends = next(trace for trace in figure.data if trace.name == "edge ends")
    assert all(text.split(" → ")[1].split(" ")[1] == "values" for text in ends.hovertext)
    _figure, message = composition.render_composition(data, circuits, (0, 0), ["value"], "lift", 0, 5, -1, -1)
    assert "0 edges drawn" in message and "V-edges have no lift" in message


@pytest.fixture(scope="module")
def language_model_data(tmp_path_factory, corpus_sentences):
    """A tiny Llama saved with its language-model head, and its run over 6 sentences (for "what it writes")."""
    import torch
    import transformers
    from support.family_configs import tiny_family_config
    from support.tiny_models import decoder_tokenizer

    import qkviz

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_family_config("llama"), dtype=torch.float32)
    directory = tmp_path_factory.mktemp("llama-lm")
    model.save_pretrained(directory)
    decoder_tokenizer(corpus_sentences).save_pretrained(directory)
    return RunData(qkviz.extract(str(directory), corpus_sentences[:6], directory / "run", progress=False), "lm")


def test_what_the_head_writes_adds_up_to_its_direct_effect(language_model_data):
    data = language_model_data
    query, key = a_pair(data)
    subject = why.Subject("pair", 0, LAYER, HEAD, (query,), (key,))
    answer = ExplainWorker().wait(subject, lambda: why.explain(data, subject))
    assert not answer.pending and answer.error is None, answer.error
    writes = answer.result["writes"]
    row = data.run.direct_effects(query).set_index("part").contribution[f"L{LAYER}H{HEAD}"]
    assert writes["source"].attrs["row"] == pytest.approx(row, abs=1e-6)
    children = why.render(data, subject, answer)
    sums = bar_sums(children, "why-writes-bars")
    assert len(sums) == 2 and all(total == pytest.approx(row, abs=1e-3) for total in sums)
    words = " ".join(texts(children))
    promoted = writes["tokens"][writes["tokens"].direction == "promotes"]
    assert "promotes" in words and f"“{promoted.token.iat[0]}”" in words


def test_a_querys_writes_are_made_once_for_its_keys_and_a_refusal_is_not_kept(data, monkeypatch):
    """What the head writes at a query does not depend on the key: a further key of the same query is answered from
    the writes kept (no pass), another query or head makes its own, and a refusal is asked again on the next click."""
    made = []

    def writes(run, layer, head, query, top):
        made.append((layer, head, query))
        if query == refused:
            raise why.QkvizError("no model here")
        return {"tokens": f"writes of {layer} {head} {query}"}

    rows = data.run.sentence_tokens(1)
    query, refused = rows.start + 3, rows.start + 2
    monkeypatch.setattr(why, "head_write_splits", writes)
    monkeypatch.setattr(why, "_WRITES", why.OrderedDict())
    pair = [why.Subject("pair", 0, LAYER, HEAD, (query,), (key,)) for key in (rows.start, rows.start + 1)]
    expected = {"tokens": f"writes of {LAYER} {HEAD} {query}"}
    assert why.writes_at_query(data, pair[0]) == why.writes_at_query(data, pair[1]) == expected
    assert made == [(LAYER, HEAD, query)]
    other = why.Subject("pair", 0, LAYER, HEAD + 1, (query,), (rows.start,))
    assert why.writes_at_query(data, other)["tokens"] == f"writes of {LAYER} {HEAD + 1} {query}"
    no = why.Subject("pair", 0, LAYER, HEAD, (refused,), (rows.start,))
    assert why.writes_at_query(data, no) == why.writes_at_query(data, no) == "no model here"
    assert made == [(LAYER, HEAD, query), (LAYER, HEAD + 1, query), (LAYER, HEAD, refused), (LAYER, HEAD, refused)]
    monkeypatch.setattr(why, "WRITES_KEPT", 1)                     # the bound: the least recently asked goes first
    later = why.Subject("pair", 0, LAYER, HEAD, (query + 1,), (rows.start,))
    why.writes_at_query(data, later)
    assert len(why._WRITES) == 1
    why.writes_at_query(data, pair[0])                             # dropped, so made again
    assert made[-2:] == [(LAYER, HEAD, query + 1), (LAYER, HEAD, query)]
