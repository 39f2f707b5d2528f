"""The server's model work as a team's server meets it (issue 52), through real HTTP requests to a served app on the
tiny Llama run (no browser):

* fairness: one page's four queued ablations do not hold another page's explanation behind them;
* ``qkviz serve --no-model``: the page says the why panel and the ablate action are off, their requests are refused
  in one line, and nothing runs; ``--max-explain-tokens``: a request over a longer sequence is refused in one line,
  and nothing runs;
* faults: a run deleted, or a model directory removed, while serving gives one line in the panel, and the server
  goes on answering for the other runs.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from support.browser import copy_run, served_in_thread
from test_hostile_requests import answered, callback_request, request_for

from dash_app import ids
from dash_app.app import build_app, open_runs
from dash_app.explain_worker import OFF, ExplainWorker, ModelLimits, checked_session, new_session
from dash_app.panels import ablation, why
from dash_app.data.run_data import RunData

LAYER, HEAD = 1, 2
#: how long each fake ablation takes (s)
ABLATION_S = 0.5


@pytest.fixture(scope="module")
def data(app_run):
    return RunData(app_run, "tiny-work")


def port_of(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


def a_pair(data: RunData) -> tuple[int, int]:
    """A query late in sentence 1 and a key before it (token rows)."""
    rows = data.run.sentence_tokens(1)
    return rows.stop - 2, rows.start + 1


class WhyPanel:
    """The sentence view's why panel of one page (its session) through the server: asks for a pair, polls it."""

    def __init__(self, app, port: int, data: RunData, run: int = 0, session: str | None = None):
        self.port, self.session, self.names = port, session or new_session(), ids.why_ids("sentence")
        query, key = a_pair(data)
        self.state = {"view": "sentence", "method": "pca", "layer": LAYER, "head": HEAD, "sentence": 1,
                      "point": data.run.n_tokens + key, "pair_point": query, "run": run}
        self.output, self.spec, _ = callback_request(app, self.names.panel + ".children", [])
        self.shown = None

    def ask(self) -> dict:
        """The panel as the state's pair first shows it."""
        body = request_for(self.output, self.spec, [self.state, 0, None, self.session])
        response = answered(self.port, body, f"{ids.view_state('sentence')}.data")
        self.shown = response[self.names.shown]["data"]
        return response

    def poll(self) -> dict:
        body = request_for(self.output, self.spec, [self.state, 1, self.shown, self.session])
        return answered(self.port, body, f"{self.names.poll}.n_intervals")

    def until_in(self, timeout_s: float = 120.0) -> dict:
        """Polled until the answer is in (the poll disabled): its response."""
        response = self.ask()
        deadline = time.monotonic() + timeout_s
        while response[self.names.poll]["disabled"] is False and time.monotonic() < deadline:
            time.sleep(0.1)
            response = self.poll()
        assert response[self.names.poll]["disabled"] is True, "the explanation never came"
        return response

    def children(self, response: dict) -> str:
        return json.dumps(response[self.names.panel]["children"])


class AblatePanel:
    """The single view's ablate action of one page (its session) through the server."""

    def __init__(self, app, port: int, run: int = 0, session: str | None = None):
        self.port, self.run, self.session = port, run, session or new_session()
        self.output, self.spec, _ = callback_request(app, f"{ids.ABLATE_PANEL}.children", [])

    def click(self, layer: int, head: int) -> dict:
        state = {"view": "single", "method": "pca", "layer": layer, "head": head, "run": self.run}
        body = request_for(self.output, self.spec, [1, 0, state, "zero", None, self.session])
        return answered(self.port, body, f"{ids.ABLATE_BUTTON}.n_clicks")

    def poll(self, shown: dict) -> dict:
        state = {"view": "single", "method": "pca", "layer": shown["layer"], "head": shown["head"], "run": self.run}
        body = request_for(self.output, self.spec, [1, 1, state, "zero", shown, self.session])
        return answered(self.port, body, f"{ids.ABLATE_POLL}.n_intervals")

    def until_in(self, layer: int, head: int, timeout_s: float = 120.0) -> dict:
        response = self.click(layer, head)
        shown = response[ids.ABLATE_SHOWN]["data"]
        deadline = time.monotonic() + timeout_s
        while response[ids.ABLATE_POLL]["disabled"] is False and time.monotonic() < deadline:
            time.sleep(0.1)
            response = self.poll(shown)
        assert response[ids.ABLATE_POLL]["disabled"] is True, "the ablation never came"
        return response


def strings(tree) -> list[str]:
    """The texts of a component tree as the server sent it (JSON)."""
    if isinstance(tree, str):
        return [tree]
    if isinstance(tree, list):
        return [text for child in tree for text in strings(child)]
    if isinstance(tree, dict):
        return strings(tree.get("props", {}).get("children"))
    return []


def one_line(response: dict, panel: str | None = None) -> str:
    """The text of the response's ``panel`` (or of the children given) below its heading, which must be one line."""
    children = response[panel]["children"] if isinstance(response, dict) else response
    words = [text for text in strings(children) if text != why.heading().children]
    assert len(words) == 1 and "\n" not in words[0] and "Traceback" not in words[0], words
    return words[0]


# -- fairness ------------------------------------------------------------------------------------------------------
def test_each_page_load_has_a_session_of_its_own(data):
    app = build_app([data])
    client = app.server.test_client()

    def session_of_a_load() -> str:
        response = client.get("/_dash-layout", headers={"Host": "127.0.0.1:8050"})
        assert response.status_code == 200
        found = [node["props"]["data"] for node in response.get_json()["props"]["children"]
                 if node.get("props", {}).get("id") == ids.PAGE_SESSION]
        assert len(found) == 1
        return found[0]

    first, second = session_of_a_load(), session_of_a_load()
    assert checked_session(first) == first and checked_session(second) == second and first != second


def test_one_pages_ablations_do_not_hold_another_pages_explanation_behind_them(data, monkeypatch):
    """Page A queues 4 ablations of different heads, then page B one explanation: B's explanation is answered before
    A's second ablation ends (a single first-in-first-out queue would run all four of A's first: it fails). A's first
    ablation lasts until B has asked, so that B asks while A's first runs however slow the machine."""
    import threading

    subject = why.Subject("pair", 0, LAYER, HEAD, *((token,) for token in a_pair(data)))
    explained = ExplainWorker().wait(subject, lambda: why.explain(data, subject)).result      # the model loaded
    ablated = ablation.compute(data, ablation.Subject(0, 0, 0, "zero"))
    ended: dict[object, float] = {}
    asked = threading.Event()

    def slow_ablation(_data, subject):
        if not ended:
            asked.wait(60)
        time.sleep(ABLATION_S)
        ended[(subject.layer, subject.head)] = time.monotonic()
        return ablated

    def quick_explanation(_data, _subject):
        ended["explanation"] = time.monotonic()
        return explained

    monkeypatch.setattr(ablation, "compute", slow_ablation)
    monkeypatch.setattr(why, "explain", quick_explanation)
    app = build_app([data])
    heads = [(0, 0), (0, 1), (1, 0), (1, 1)]
    with served_in_thread(app) as url:
        port = port_of(url)
        first = AblatePanel(app, port)
        for layer, head in heads:
            assert first.click(layer, head)[ids.ABLATE_POLL]["disabled"] is False         # queued
        second = WhyPanel(app, port, data)
        assert second.ask()[second.names.poll]["disabled"] is False                     # queued
        asked.set()
        assert "why-logit" in second.children(second.until_in())
        for layer, head in heads:                                                         # none of A's starved
            assert "ablation-mean" in json.dumps(first.until_in(layer, head)[ids.ABLATE_PANEL]["children"])
    assert ended["explanation"] < ended[heads[1]], {key: round(at - ended[heads[0]], 2) for key, at in ended.items()}
    assert ended[heads[0]] < ended[heads[1]] < ended[heads[2]] < ended[heads[3]]         # A's in the order asked


def test_a_full_page_is_told_busy_in_one_line_and_asked_again(data, monkeypatch):
    """A page's fifth job while its four are queued: "busy, N jobs ahead" in one line, the panel still polling; once
    a place is free, its poll queues it."""
    ablated = ablation.compute(data, ablation.Subject(0, 0, 0, "zero"))

    def slow_ablation(_data, _subject):
        time.sleep(0.3)
        return ablated

    monkeypatch.setattr(ablation, "compute", slow_ablation)
    app = build_app([data])
    with served_in_thread(app) as url:
        page = AblatePanel(app, port_of(url))
        for layer, head in [(0, 0), (0, 1), (0, 2), (0, 3)]:
            page.click(layer, head)
        response = page.click(1, 0)
        line = one_line(response, ids.ABLATE_PANEL)
        assert line.startswith("busy, 4 jobs ahead") and response[ids.ABLATE_POLL]["disabled"] is False
        assert "ablation-mean" in json.dumps(page.until_in(1, 0)[ids.ABLATE_PANEL]["children"])


# -- served for a team -----------------------------------------------------------------------------------------------
@pytest.fixture
def nothing_runs(monkeypatch):
    """Every explanation and ablation the app would run, recorded instead and answered with the one line "ran" (the
    list stays empty when none runs)."""
    from qkviz import QkvizError

    ran = []

    def record(_data, subject):
        ran.append(subject)
        raise QkvizError("ran")

    monkeypatch.setattr(why, "explain", record)
    monkeypatch.setattr(ablation, "compute", record)
    return ran


def test_no_model_turns_the_model_panels_off_and_refuses_their_requests(data, nothing_runs):
    app = build_app([data], limits=ModelLimits(model=False))
    page = str(app.layout())
    assert OFF in page and "disabled=True" in page                       # the page says so; the button is off
    with served_in_thread(app) as url:
        port = port_of(url)
        panel = WhyPanel(app, port, data)
        response = panel.ask()
        assert one_line(response, panel.names.panel) == OFF and response[panel.names.poll]["disabled"] is True
        response = AblatePanel(app, port).click(LAYER, HEAD)
        assert one_line(response, ids.ABLATE_PANEL) == OFF and response[ids.ABLATE_POLL]["disabled"] is True
        time.sleep(0.5)
    assert nothing_runs == []


def test_max_explain_tokens_refuses_longer_sequences_in_one_line(data, nothing_runs):
    run = data.run
    query, _key = a_pair(data)
    length = int(run.sentences.n_tokens.iat[1])
    app = build_app([data], limits=ModelLimits(max_tokens=length - 1))
    with served_in_thread(app) as url:
        port = port_of(url)
        panel = WhyPanel(app, port, data)
        response = panel.ask()
        line = one_line(response, panel.names.panel)
        assert f"a sequence of {length} tokens" in line and f"at most {length - 1}" in line
        assert "--max-explain-tokens" in line and response[panel.names.poll]["disabled"] is True
        response = AblatePanel(app, port).click(LAYER, HEAD)                  # the run's longest sequence
        longest = int(run.sentences.n_tokens.max())
        assert f"a sequence of {longest} tokens" in one_line(response, ids.ABLATE_PANEL)
        time.sleep(0.5)
    assert nothing_runs == []
    # a sequence within the cap runs
    app = build_app([data], limits=ModelLimits(max_tokens=length))
    with served_in_thread(app) as url:
        panel = WhyPanel(app, port_of(url), data)
        assert one_line(panel.until_in(), panel.names.panel) == "ran"
    assert [subject.queries for subject in nothing_runs] == [(query,)]


def test_the_command_line_passes_no_model_and_max_explain_tokens_to_the_server(app_run, monkeypatch):
    import dash_app.server
    from qkviz.cli import main

    given = {}
    monkeypatch.setattr(dash_app.server, "serve", lambda runs, **options: given.update(options))
    assert main(["serve", "--run", str(app_run.path), "--no-model", "--max-explain-tokens", "64"]) == 0
    assert given["model"] is False and given["max_explain_tokens"] == 64
    assert main(["serve", "--run", str(app_run.path)]) == 0
    assert given["model"] is True and given["max_explain_tokens"] is None


# -- faults --------------------------------------------------------------------------------------------------------
def test_a_run_deleted_while_serving_is_one_line_and_the_other_runs_are_served(app_run, tmp_path):
    doomed = copy_run(app_run, tmp_path / "doomed", atlas=False)
    runs = open_runs([doomed.path, app_run.path])
    app = build_app(runs)
    shutil.rmtree(doomed.path)
    with served_in_thread(app) as url:
        port = port_of(url)
        panel = WhyPanel(app, port, runs[0], run=0)
        line = one_line(panel.until_in(), panel.names.panel)
        assert str(doomed.path) in line, line
        # the ablation reads only what the server holds of the run (its tokens) and the model: it may still be made
        children = AblatePanel(app, port, run=0).until_in(0, 1)[ids.ABLATE_PANEL]["children"]
        assert "ablation-mean" in json.dumps(children) or str(doomed.path) in one_line(children, ids.ABLATE_PANEL)
        other = WhyPanel(app, port, runs[1], run=1)
        assert "why-logit" in other.children(other.until_in())


def test_a_model_directory_removed_while_serving_is_one_line_and_the_other_runs_are_served(app_run, tiny_model,
                                                                                          tmp_path):
    model = shutil.copytree(tiny_model("llama"), tmp_path / "model")
    moved = copy_run(app_run, tmp_path / "moved", atlas=False)
    manifest_path = moved.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["model"]["id"] = str(model)
    manifest_path.write_text(json.dumps(manifest))
    runs = open_runs([moved.path, app_run.path])
    app = build_app(runs)
    shutil.rmtree(model)
    with served_in_thread(app) as url:
        port = port_of(url)
        panel = WhyPanel(app, port, runs[0], run=0)
        assert str(model) in one_line(panel.until_in(), panel.names.panel)
        assert str(model) in one_line(AblatePanel(app, port, run=0).until_in(0, 1), ids.ABLATE_PANEL)
        other = WhyPanel(app, port, runs[1], run=1)
        assert "why-logit" in other.children(other.until_in())
