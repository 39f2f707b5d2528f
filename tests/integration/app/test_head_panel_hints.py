"""What the head panel and the matrix's message line say about their numbers (issue 40, stumbles 9): the strongest
pairs say what they leave out (and how much of a first-token head's attention that is), no number is written as a
negative zero, and the search's cluster badges are explained, also when only the search changed (the draw callback
patches the figure then). On the tiny Llama run (2 layers x 4 heads) with its head atlas, no browser."""

import json
from dataclasses import asdict

import pytest
from support.browser import copy_run
from support.component_tree import texts

from dash_app import ids
from dash_app.app import build_app
from dash_app.data.atlas_columns import PANEL, format_value, is_share, signed_format
from dash_app.panels import atlas as atlas_panel
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState
from dash_app.data.token_search import TokenSearch
from dash_app.views.matrix import message as matrix_message, view as matrix_view

LEFT_OUT = "leaving out the first token and special tokens"


@pytest.fixture(scope="module")
def atlas_data(app_run, tmp_path_factory):
    return RunData(copy_run(app_run, tmp_path_factory.mktemp("hints") / "tiny-hints"), "tiny-hints")


def head_with_exemplars(data: RunData) -> tuple[int, int]:
    exemplars = data.atlas().exemplars
    return int(exemplars.layer.iat[0]), int(exemplars["head"].iat[0])


def panel_text(data: RunData, layer: int, head: int) -> str:
    return " ".join(texts(atlas_panel.head_panel(data, layer, head)))


def test_the_strongest_pairs_say_what_they_leave_out(atlas_data, monkeypatch):
    layer, head = head_with_exemplars(atlas_data)
    row = atlas_data.atlas_row(layer, head).copy()
    # any head: the pairs' line says what the atlas's exemplars never pair (the first token, special tokens)
    row["first_token_attention"] = 0.2
    monkeypatch.setattr(atlas_data, "atlas_row", lambda _layer, _head: row)
    text = panel_text(atlas_data, layer, head)
    assert LEFT_OUT in text and "takes" not in text
    # a first-token head (the first token takes >= 50% of its attention): that share is given beside the pairs
    for share, written in ((0.5, "50.0%"), (0.873, "87.3%")):
        row["first_token_attention"] = share
        text = panel_text(atlas_data, layer, head)
        assert LEFT_OUT in text and f"the first token takes {written} of this head's attention" in text, text
    # the line stands where the pairs are: just above the first exemplar button
    children = atlas_panel.head_panel(atlas_data, layer, head)
    hint = next(index for index, child in enumerate(children) if LEFT_OUT in " ".join(texts(child)))
    assert children[hint + 1].className == "exemplar"
    # and the share is the row's own
    row["first_token_attention"] = 0.49
    assert "takes" not in panel_text(atlas_data, layer, head)


def test_the_head_panel_prints_no_negative_zero(atlas_data, monkeypatch):
    for value, spec, written in ((-0.0001, ".1f", "0.0"), (-0.0, ".3g", "0"), (-0.0002, "+.3f", "+0.000"),
                                 (-0.04, ".1f", "-0.0"), (-0.06, ".1f", "-0.1"), (-1e-9, ".3g", "-1e-09")):
        expected = written if written != "-0.0" else "0.0"
        assert signed_format(value, spec) == expected, (value, spec)
    assert format_value("share_query_constant", -0.00001) == "0.0%"
    assert format_value("share_query_constant", -0.0006) == "-0.1%"
    assert format_value("update_cosine_mean", -0.0001) == "+0.000"
    assert format_value("mean_distance", -0.0) == "0"
    layer, head = head_with_exemplars(atlas_data)
    row = atlas_data.atlas_row(layer, head).copy()
    numeric = [column for column in row.index if column in PANEL or column.startswith("share_")]
    assert any(column.startswith("share_") for column in numeric) and any(not is_share(c) for c in numeric)
    for column in numeric:                                    # every statistic the panel lists, a tiny negative value
        if column != "offset":
            row[column] = -0.00001
    labels = atlas_data.atlas().labels_of(layer, head).copy()
    labels[["score", "chance", "threshold"]] = -0.0
    monkeypatch.setattr(atlas_data, "atlas_row", lambda _layer, _head: row)
    monkeypatch.setattr(type(atlas_data.atlas()), "labels_of", lambda _self, _layer, _head: labels)
    pieces = texts(atlas_panel.head_panel(atlas_data, layer, head))
    assert "0.0%" in pieces
    assert not [piece for piece in pieces if "-0.0" in piece or "-0%" in piece or piece == "-0" or "-0 " in piece
                or "-0)" in piece or "-0," in piece or "-0;" in piece], pieces


def callback_answer(client, app, output_part: str, values: list) -> dict:
    """The server callback whose output names ``output_part``, answered for ``values`` (its inputs, then its states)
    as the Dash renderer would ask, its first input changed."""
    output, spec = next((output, spec) for output, spec in app.callback_map.items() if output_part in output)
    inputs = [{"id": item["id"], "property": item["property"], "value": value} for item, value in zip(spec["inputs"], values)]
    states = [{"id": item["id"], "property": item["property"], "value": value}
              for item, value in zip(spec["state"], values[len(spec["inputs"]):])]
    outputs = [{"id": part.split(".")[0], "property": part.split(".")[1]} for part in output.strip(".").split("...") if "." in part]
    body = {"output": output, "outputs": outputs, "inputs": inputs, "state": states,
            "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"]}
    answer = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 200, answer.data[:300]
    return answer.get_json()["response"]


def test_the_search_s_cluster_badges_are_explained(atlas_data):
    search = TokenSearch(atlas_data.token_index, lambda method: atlas_data.all_layouts(method).points)
    matches = search.matches("the", False)
    clusters = search.clusters("the", False, "pca")
    count = len(matches)
    assert count >= 2 and (clusters >= 0).all()
    explained = (f"queries and keys both count, so {count} matches can make up to {2 * count} clusters")
    state = ViewState(method="pca", search="the")
    _, message = matrix_view.render_matrix(atlas_data, state, clusters, matches)
    assert "Cluster badges" in message and explained in message
    _, message = matrix_view.render_matrix(atlas_data, ViewState(method="pca"), None, None)
    assert "Cluster badges" not in message                                   # no search, no badges to explain
    _, message = matrix_view.search_patch(atlas_data, state, clusters, matches)
    assert explained in message
    one = search.matches(str(atlas_data.tokens.token.iat[int(matches[0])]), False)
    assert matrix_message.cluster_message(clusters, one[:1]).count("1 match can make up to 2 clusters") == 1
    # through the draw callback: the whole drawing, then only the search changed (a patch): both explain the badges
    app = build_app([atlas_data])
    client = app.server.test_client()
    viewport = {"width": 1400, "height": 900}
    first = callback_answer(client, app, ids.MATRIX_MESSAGE, [asdict(ViewState(method="pca", search="cat")), None, viewport,
                                                              None])
    rendered = first[ids.MATRIX_RENDERED]["data"]
    assert "figure" in first[ids.MATRIX_GRAPH]
    patched = callback_answer(client, app, ids.MATRIX_MESSAGE, [asdict(state), None, viewport, rendered])
    assert "operations" in patched[ids.MATRIX_GRAPH]["figure"]             # only the search changed: a patch
    assert explained in patched[ids.MATRIX_MESSAGE]["children"]
    cleared = callback_answer(client, app, ids.MATRIX_MESSAGE, [asdict(ViewState(method="pca")), None, viewport,
                                                                patched[ids.MATRIX_RENDERED]["data"]])
    assert "Cluster badges" not in cleared[ids.MATRIX_MESSAGE]["children"]
