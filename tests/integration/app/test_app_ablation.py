"""The single view's "ablate" action on the tiny Llama run (no browser): the button asks for the head's ablation, the
panel is pending while the app's model worker runs it off the request thread, then shows the mean change over the
run (this run's model was saved without its language-model head: the hidden-state change, said so) and the tokens it
changes most; another head clears it; forged subjects and hostile values are refused."""

from __future__ import annotations

import json
import time

import pytest
from support.browser import served_in_thread
from support.component_tree import texts
from test_hostile_requests import answered, callback_request, hostile_failures, request_for

from dash_app import ids
from dash_app.app import build_app
from dash_app.explain_worker import ExplainWorker, new_session
from dash_app.panels import ablation
from dash_app.data.run_data import RunData

LAYER, HEAD = 1, 2
PAGE = new_session()


@pytest.fixture(scope="module")
def data(app_run):
    return RunData(app_run, "tiny-ablate")


def panel_request(app, values: list):
    return callback_request(app, f"{ids.ABLATE_PANEL}.children", values)


def test_the_panel_shows_the_mean_change_and_the_tokens_changed_most(data):
    subject = ablation.Subject(0, LAYER, HEAD, "mean")
    answer = ExplainWorker().wait(("ablate", subject), lambda: ablation.compute(data, subject))
    assert answer.error is None, answer.error
    frame = data.run.ablate(LAYER, HEAD, "mean")
    words = " ".join(texts(ablation.render(data, subject, answer)))
    assert f"{frame.attrs['mean_change']:+.4f}" in words and "hidden-state change" in words
    top = frame.sort_values("change", ascending=False).head(ablation.TOP_TOKENS)
    assert f"{top.change.iloc[0]:+.3f}" in words and str(top.token.iloc[0]) in words
    pending = ablation.render(data, subject, ablation.Answer())
    assert "Ablating layer 1 head 2" in " ".join(texts(pending))


def test_the_button_is_pending_then_the_result_through_the_server(data):
    app = build_app([data])
    state = {"view": "single", "method": "pca", "layer": LAYER, "head": HEAD}
    with served_in_thread(app) as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        output, spec, body = panel_request(app, [1, 0, state, "zero", None, PAGE])
        response = answered(port, body, f"{ids.ABLATE_BUTTON}.n_clicks")
        shown = response[ids.ABLATE_SHOWN]["data"]
        assert shown == {"run": 0, "layer": LAYER, "head": HEAD, "mode": "zero"}
        deadline = time.monotonic() + 120
        while response[ids.ABLATE_POLL]["disabled"] is False and time.monotonic() < deadline:
            time.sleep(0.2)
            response = answered(port, request_for(output, spec, [1, 1, state, "zero", shown, PAGE]),
                                f"{ids.ABLATE_POLL}.n_intervals")
        assert response[ids.ABLATE_POLL]["disabled"] is True
        assert "ablation-mean" in json.dumps(response[ids.ABLATE_PANEL]["children"])
        # another head clears the panel
        other = {**state, "head": HEAD + 1}
        response = answered(port, request_for(output, spec, [1, 1, other, "zero", shown, PAGE]),
                            f"{ids.view_state('single')}.data")
        assert response[ids.ABLATE_PANEL]["children"] == [] and response[ids.ABLATE_SHOWN]["data"] is None
        # a forged mode is the default one
        response = answered(port, request_for(output, spec, [2, 1, state, "<b>", None, PAGE]), f"{ids.ABLATE_BUTTON}.n_clicks")
        assert response[ids.ABLATE_SHOWN]["data"]["mode"] == "zero"


def test_forged_subjects_and_hostile_values_are_refused(data):
    runs = [data]
    good = ablation.Subject(0, LAYER, HEAD, "zero").as_dict()
    assert ablation.checked_subject(good, runs) == ablation.Subject(0, LAYER, HEAD, "zero")
    forged = [None, [], "x", {**good, "mode": "half"}, {**good, "run": 1}, {**good, "layer": True},
              {**good, "head": 99}, {**good, "layer": -1}, {**good, "head": "1"}, {**good, "run": 0.0}]
    assert all(ablation.checked_subject(value, runs) is None for value in forged)
    app = build_app([data])
    output, spec, _ = panel_request(app, [0, 0, {}, "zero", None, PAGE])
    with served_in_thread(app) as url:
        failures = hostile_failures(int(url.rstrip("/").rsplit(":", 1)[1]), output, spec)
    assert not failures, failures[:5]
