"""The URL <-> view state: a round trip restores the view; bad parameters fall back with a notice."""

from dataclasses import replace

from dash_app.data.run_data import RunShape
from dash_app.state.view_state import ViewState, open_head, select_run, step_head, step_layer
from dash_app.url_state import parse_url, to_url

SHAPES = [RunShape("minilm", 6, 12, 5000, 228, "tsne"), RunShape("smollm2", 30, 9, 5000, 250, "pca")]


def test_a_url_restores_the_state_it_was_made_from():
    state = ViewState(run=1, view="single", layer=29, head=8, method="umap", dim=3, colour="frequency",
                      search="the cat & <b>", substring=True, sort="clusters", sentence=7, point=9999)
    url = to_url(state, SHAPES)
    assert url.startswith("?run=smollm2&view=single&layer=29&head=8&method=umap&dim=3&colour=frequency")
    assert parse_url(url, SHAPES) == (state, [])


def test_defaults_come_from_the_run():
    assert parse_url("", SHAPES) == (ViewState(run=0, method="tsne"), [])
    assert parse_url("?run=1", SHAPES) == (ViewState(run=1, method="pca"), [])


def test_bad_parameters_fall_back_with_a_notice_each():
    state, notices = parse_url("?run=../../etc&layer=6&head=-1&method=mds&dim=4&colour=red&view=x&zoom=2"
                               "&sentence=1e3&point=²", SHAPES)
    assert state == ViewState(run=0, method="tsne")
    assert len(notices) == 10
    assert "There is no run '../../etc' here (runs: minilm, smollm2)" in notices[1]
    assert any("layer='6'" in notice for notice in notices)
    assert any("unknown URL parameter 'zoom'" in notice for notice in notices)


def test_a_run_is_chosen_by_name_or_index_never_by_path():
    assert parse_url("?run=1", SHAPES)[0].run == 1
    assert parse_url("?run=smollm2", SHAPES)[0].run == 1
    assert parse_url("?run=/work/main/runs/smollm2", SHAPES)[0].run == 0


def test_long_searches_are_cut():
    state, notices = parse_url("?search=" + "a" * 500, SHAPES)
    assert state.search == "a" * 100 and notices == ["The search was cut to 100 characters."]


def test_head_navigation_wraps_across_layers_and_stops_at_the_ends():
    shape = SHAPES[0]
    state = ViewState(layer=0, head=11)
    assert (step_head(state, 1, shape).layer, step_head(state, 1, shape).head) == (1, 0)
    assert (step_head(ViewState(), -1, shape).layer, step_head(ViewState(), -1, shape).head) == (5, 11)
    assert step_layer(ViewState(layer=0), -1, shape).layer == 0
    assert step_layer(ViewState(layer=5, head=3), 1, shape) == ViewState(layer=5, head=3)
    assert open_head(ViewState(), 27, shape) == ViewState(view="single", layer=2, head=3)
    assert open_head(ViewState(), 72, shape) == ViewState()
    moved = select_run(replace(ViewState(), layer=3, point=5, search="the"), 1, SHAPES[1])
    assert (moved.run, moved.layer, moved.point, moved.search, moved.method) == (1, 0, None, "the", "pca")
