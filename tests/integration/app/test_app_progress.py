"""The top bar's counts of a run whose layouts are being made in the background: the progress line and the
projection menu say the same number of heads, and the answer to every poll brings the menu's options with the line,
so that the menu follows the layouts as they land (no browser: the functions, and the callback through Flask)."""

import json
import re

import pytest
from support.browser import copy_run

import qkviz
from dash_app import ids
from dash_app.app import build_app
from dash_app.progress import method_options, progress_text
from dash_app.data.run_data import RunData
from dash_app.server import attach_workers

HOST = {"Host": "127.0.0.1:8050"}


def text_of(component) -> str:
    """The text a Dash component (or a list of them, or a string) shows."""
    if isinstance(component, (list, tuple)):
        return "".join(text_of(child) for child in component)
    if isinstance(component, dict):                      # as it comes back in a callback's JSON answer
        return text_of(component.get("props", {}).get("children"))
    if hasattr(component, "children"):
        return text_of(component.children)
    return "" if component is None else str(component)


def line_count(line) -> str:
    return re.search(r"layouts: (\d+/\d+) heads", text_of(line))[1]


def menu_count(options: list[dict], method: str) -> str:
    return re.search(r"\((\d+/\d+) heads", next(o["label"] for o in options if o["value"] == method))[1]


@pytest.fixture
def making(tiny_run, tmp_path):
    """A run without layouts whose PCA ones a background worker is to make (attached, waiting for its turn), of which
    a ``qkviz project`` beside the server has made three heads' meanwhile."""
    run = copy_run(tiny_run("llama", max_sentences=5), tmp_path / "bare", atlas=False)
    data = RunData(run, "bare")
    [worker] = attach_workers([data], "pca")
    assert worker.progress().running and worker.progress().total == 8
    assert qkviz.project(run, methods=["pca"], dims=[2], layers=[0], heads=[0, 1, 2], progress=False).computed == 3
    return data, worker


def test_the_progress_line_and_the_method_menu_count_the_same_heads(making):
    data, worker = making
    assert line_count(progress_text(data)) == menu_count(method_options(data), "pca") == "3/8"
    assert "being made" in text_of(progress_text(data))

    worker.run_all()                       # the rest land (the three made beside it are found in the cache)
    assert line_count(progress_text(data)) == menu_count(method_options(data), "pca") == "8/8"
    assert "being made" not in next(o["label"] for o in method_options(data) if o["value"] == "pca")


def poll_answer(app, n_intervals: int, state: dict | None, shown_options) -> dict:
    """The server's answer to the page's poll of the progress line (``{component id: {property: value}}``), as the
    Dash renderer asks for it."""
    output, spec = next((output, spec) for output, spec in app.callback_map.items()
                        if ids.LAYOUT_PROGRESS in output and "callback" in spec)
    values = {(ids.LAYOUT_POLL, "n_intervals"): n_intervals, (ids.STATE, "data"): state,
              (ids.METHOD_SELECT, "options"): shown_options}
    described = lambda items: [{**item, "value": values[(item["id"], item["property"])]} for item in items]  # noqa: E731
    outputs = [{"id": part.split(".")[0], "property": part.split(".")[1]} for part in output.strip(".").split("...")]
    body = {"output": output, "outputs": outputs, "inputs": described(spec["inputs"]),
            "state": described(spec["state"]), "changedPropIds": [f"{ids.LAYOUT_POLL}.n_intervals"]}
    response = app.server.test_client().post("/_dash-update-component", json=body, headers=HOST)
    assert response.status_code == 200, response.data[:300]
    return json.loads(response.data)["response"]


def test_each_poll_brings_the_menus_options_with_the_line_as_the_layouts_land(making):
    data, worker = making
    app = build_app([data])
    state = {"run": 0, "view": "matrix", "method": "pca"}
    first = poll_answer(app, 1, state, None)
    options = first[ids.METHOD_SELECT]["options"]
    assert line_count(first[ids.LAYOUT_PROGRESS]["children"]) == menu_count(options, "pca") == "3/8"
    # no layout landed since: the page keeps the options it has
    assert ids.METHOD_SELECT not in poll_answer(app, 2, state, options)

    worker.run_all()
    landed = poll_answer(app, 3, state, options)
    assert line_count(landed[ids.LAYOUT_PROGRESS]["children"]) == "8/8"
    assert menu_count(landed[ids.METHOD_SELECT]["options"], "pca") == "8/8"
