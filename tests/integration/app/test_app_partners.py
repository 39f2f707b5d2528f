"""Corpus partners in the app (no browser): the panel's list, the stars in the layout, a partner click,
and the messages for no point, a bad count, more partners than the corpus, and a missing index."""

import numpy as np
import pytest
from support.component_tree import texts
from dash import html

from dash_app import ids
from dash_app.panels import partners as partners_panel
from dash_app.views import single as single_view
from dash_app.views.single_figure import to_steps
from dash_app.app import next_state
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState
from qkviz.search.partner_index import PartnerIndexes


@pytest.fixture(scope="module")
def data(app_run):
    return RunData(app_run, "tiny")


def buttons(children) -> list:
    return [child for child in children if isinstance(child, html.Button)]


def test_the_panel_lists_the_brute_force_top_keys_of_a_clicked_query(data):
    run = data.run
    point = 10                                                              # query 10
    state = ViewState(view="single", layer=1, head=2, method="pca", point=point)
    children = partners_panel.render_partners(data, state, 5, [])
    listed = buttons(children)
    assert len(listed) == 5
    scores = run.keys(1, 2).astype(np.float64) @ run.queries(1, 2)[point].astype(np.float64)
    best = np.argsort(-scores, kind="stable")[:5]
    assert [button.id["point"] for button in listed] == (best + run.n_tokens).tolist()
    text = " ".join(texts(children))
    assert f"Top 5 keys of all {run.n_tokens:,} tokens for query" in text and "exact search" in text
    assert "PCA 2D layout puts" in text and "sampled points of this head" in text     # the layout's overlap
    assert str(run.tokens.token.iat[int(best[0])]) in texts(listed[0])


def test_a_clicked_key_lists_queries_and_special_tokens_can_be_skipped(data):
    run = data.run
    state = ViewState(view="single", layer=0, head=1, method="pca", point=run.n_tokens + 7)    # key 7
    listed = buttons(partners_panel.render_partners(data, state, 8, [partners_panel.SKIP_SPECIAL]))
    points = np.array([button.id["point"] for button in listed])
    assert len(points) == 8 and (points < run.n_tokens).all()               # queries
    assert not run.tokens.is_special.to_numpy()[points].any()
    both = [partners_panel.SKIP_SPECIAL, partners_panel.SKIP_FIRST]
    listed = buttons(partners_panel.render_partners(data, ViewState(view="single", layer=0, head=1, method="pca",
                                                                     point=12), 8, both))
    points = np.array([button.id["point"] for button in listed]) - run.n_tokens
    assert len(points) == 8 and not run.tokens.is_special.to_numpy()[points].any()
    assert (run.tokens.position.to_numpy()[points] > 0).all()


def test_the_layout_draws_the_partners_as_stars(data):
    state = ViewState(view="single", layer=1, head=2, method="pca", point=10)
    partners = partners_panel.partner_points(data, state, 6, [])
    figure = single_view.render_single(data, state, [], np.zeros(0, dtype=np.int64), 5, 0.02, partners)
    stars = figure.data[single_view.OVERLAY_SLOTS.stop - 1]
    assert stars.name == "corpus partners" and np.array_equal(stars.customdata, partners)
    coordinates = to_steps(data.layout(1, 2, "pca", 2))                     # as the figure draws them
    assert np.array_equal(stars.x, coordinates[partners, 0]) and len(figure.data) == single_view.OVERLAY_SLOTS.stop
    nothing = ViewState(view="single", layer=1, head=2, method="pca")
    assert len(partners_panel.partner_points(data, nothing, 6, [])) == 0


def test_messages_for_no_point_a_bad_count_and_a_small_corpus(data, tiny_run):
    state = ViewState(view="single", layer=0, head=0, method="pca")
    assert partners_panel.render_partners(data, state, 10, []) == [partners_panel.NO_POINT]
    clicked = ViewState(view="single", layer=0, head=0, method="pca", point=3)
    for bad in (None, 0, -1, 2.5, 101, "x"):
        assert "whole number of partners from 1 to 100" in partners_panel.render_partners(data, clicked, bad, [])[0]
    small = RunData(tiny_run("llama", max_sentences=1), "small")
    assert small.run.n_tokens < 100
    children = partners_panel.render_partners(small, clicked, 100, [])
    assert f"Asked for 100, but the corpus has only {small.run.n_tokens} keys" in " ".join(texts(children))
    assert len(buttons(children)) == small.run.n_tokens


def test_a_missing_approximate_index_names_the_command(tiny_run):
    small = RunData(tiny_run("llama", max_sentences=1), "small")
    small.run.partner_indexes = PartnerIndexes(small.run, exact_limit=10)      # too many tokens for exact search
    clicked = ViewState(view="single", layer=1, head=0, method="pca", point=3)
    text = " ".join(texts(partners_panel.render_partners(small, clicked, 10, [])))
    assert f"qkviz index --run {small.run.path} --layers 1" in text


def test_a_partner_click_selects_that_point_and_its_sentence(data):
    run = data.run
    current = ViewState(view="single", layer=1, head=2, method="pca", point=10).as_dict()
    target = run.n_tokens + 40
    state, _ = next_state(ids.PARTNER_CLICK, {"point": target, "timestamp": 1}, current, "", [data])
    assert state.point == target and state.sentence == int(run.tokens.sentence.iat[40])
    assert (state.view, state.layer, state.head) == ("single", 1, 2)
    for bad in (None, {"point": 2 * run.n_tokens}, {"point": "x"}):
        assert next_state(ids.PARTNER_CLICK, bad, current, "", [data])[0] == ViewState.from_dict(current)
