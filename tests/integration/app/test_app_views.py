"""The app's figure and callback functions on a real tiny run (no browser)."""

import json

import numpy as np
import pytest
from plotly.io.json import to_json_plotly

from dash_app import ids
from dash_app.views import sentence as sentence_view, single as single_view
from dash_app.views.matrix import grid as matrix_grid, view as matrix_view
from dash_app.app import VIEWS, build_app, next_state, open_runs
from dash_app.progress import method_options
from qkviz.analysis import aggregate_attention
from qkviz.report import token_features
from dash_app.data.run_data import RunData, normalise_layout
from dash_app.data.token_search import TokenSearch
from qkviz.search.token_index import normalise
from dash_app.state.view_state import ViewState, validate
from qkviz.cli import main
from qkviz.core.errors import QkvizError
from qkviz.store.files import CACHE_DIRECTORY


@pytest.fixture(scope="module")
def data(app_run):
    return RunData(app_run, "tiny")


def decoded(trace_array: dict) -> np.ndarray:
    """A typed array as Plotly JSON carries it (``{"dtype", "bdata"}``), back to numpy."""
    import base64

    if isinstance(trace_array, list):
        return np.asarray(trace_array)
    return np.frombuffer(base64.b64decode(trace_array["bdata"]), dtype=np.dtype(trace_array["dtype"]))


def test_token_features_are_per_token_and_in_range(data):
    features = data.features
    assert len(features) == data.run.n_tokens
    assert features.position.between(0, 1).all() and features.position_mod5.isin(range(5)).all()
    assert (features.punctuation[data.tokens.is_special.to_numpy()] == 2).all()
    assert (features.punctuation[data.tokens.token.str.strip().isin([",", "."]).to_numpy()] == 1).all()
    the = normalise(data.tokens.token) == "the"
    assert (features.frequency[the] == the.sum()).all()
    assert (features.sentence_length.to_numpy() == data.tokens.groupby("sentence").position.transform("size")).all()
    assert token_features(data.tokens).equals(features)


def test_layouts_are_normalised_into_the_unit_square(data):
    layouts = data.all_layouts("pca")
    assert layouts.points.shape == (8, 2 * data.run.n_tokens, 2) and layouts.missing == ()
    assert np.nanmin(layouts.points) >= 0 and np.nanmax(layouts.points) <= 1
    line = np.stack([np.linspace(0, 10, 100), np.zeros(100)], axis=1)
    normalised = normalise_layout(line)
    assert normalised[:, 0].min() == 0 and normalised[:, 0].max() == 1
    assert np.allclose(normalised[:, 1], 0.5)                              # aspect kept, centred


def test_matrix_places_every_head_in_its_cell_and_a_click_finds_it(data):
    state = ViewState(method="pca")
    figure, message = matrix_view.render_matrix(data, state, None, None)
    assert message == ""
    payload = json.loads(to_json_plotly(figure))
    queries, keys, query_matches, key_matches, labels, cells = payload["data"]
    assert queries["type"] == "scattergl" and queries["x"]["dtype"] == "u2" and queries["customdata"]["dtype"] == "u2"
    sample = len(data.matrix_sample())
    heads = decoded(queries["customdata"])
    assert np.array_equal(heads, np.repeat(np.arange(8), sample))
    x, y = decoded(queries["x"]).astype(int), decoded(queries["y"]).astype(int)
    # head 6 = layer 1, head 2: column 2, second row from the top (of two rows)
    assert (x[heads == 6] // matrix_grid.CELL == 2).all() and (y[heads == 6] // matrix_grid.CELL == 0).all()
    assert len(decoded(query_matches["x"])) == 0 and labels["hovertext"][6] == "L1 H2"
    assert labels["text"][6] == "" and cells["type"] == "heatmap"          # the axes name layers and heads


def test_sorting_moves_heads_and_their_labels_together(data):
    clusters = np.array([5, 1, 3, 2, 9, 0, 4, 7])
    order = matrix_view.head_order(clusters)
    assert order.tolist() == [5, 1, 3, 2, 6, 0, 7, 4]
    grid = matrix_grid.list_grid(order, 8, matrix_grid.Box(400, 200))       # two rows of four cells 100 px square
    origins = grid.origins()
    assert (grid.n_rows, grid.n_cols) == (2, 4)
    assert origins[5].tolist() == [0, matrix_grid.CELL]                    # fewest clusters: top left
    assert origins[4].tolist() == [3 * matrix_grid.CELL, 0]                # most: bottom right
    labels = matrix_view.head_labels(2, 4, clusters, np.full(8, -0.5))
    assert labels[5] == "L1 H1 · 0 clusters · r -0.50" and labels[1].startswith("L0 H1 · 1 cluster ·")
    assert matrix_view.head_order(np.array([np.nan, 2.0, 1.0])).tolist() == [2, 1, 0]   # NaN last


def test_search_matches_are_drawn_in_every_head(data):
    search = TokenSearch(data.token_index, lambda method: data.all_layouts(method).points)
    result = search.find("the", False)
    clusters = search.clusters("the", False, "pca")
    state = ViewState(method="pca", search="the", sort="clusters")
    figure, _ = matrix_view.render_matrix(data, state, clusters, result.tokens)
    payload = json.loads(to_json_plotly(figure))
    matched_heads = decoded(payload["data"][2]["customdata"])
    assert np.bincount(matched_heads).tolist() == [min(result.count, len(data.matrix_sample()))] * 8
    assert payload["data"][4]["text"][int(np.argmin(clusters))].endswith(f"{clusters.min()} cluster{'' if clusters.min() == 1 else 's'}")


def test_a_new_search_patches_only_matches_badges_and_opacity(data):
    search = TokenSearch(data.token_index, lambda method: data.all_layouts(method).points)
    matches = search.find("the", False).tokens
    clusters = search.clusters("the", False, "pca")
    state = ViewState(method="pca", search="the")
    operations = matrix_view.search_patch(data, state, clusters, matches)[0].to_plotly_json()["operations"]
    changed = {tuple(operation["location"]): operation["params"]["value"] for operation in operations}
    assert set(changed) == {("data", 2), ("data", 3), ("data", 0, "marker", "opacity"),
                            ("data", 1, "marker", "opacity"), ("data", 4, "text"), ("data", 4, "hovertext"),
                            ("data", 5, "text")}
    figure, _ = matrix_view.render_matrix(data, state, clusters, matches)
    assert changed[("data", 4, "text")] == list(figure.data[4].text)
    assert np.array_equal(decoded(changed[("data", 2)]["customdata"]), figure.data[2].customdata)   # typed arrays


def test_a_missing_projection_is_a_message_naming_the_command_never_computed(data):
    before = sorted(p.name for p in (data.run.path / CACHE_DIRECTORY).iterdir())
    with pytest.raises(QkvizError, match=r"qkviz project --run .* --method umap --dim 2 --layers 0 --heads 1"):
        single_view.render_single(data, ViewState(view="single", head=1, method="umap"), [], np.zeros(0, int), 5, 0.0)
    figure, message = matrix_view.render_matrix(data, ViewState(method="tsne", dim=3), None, None)
    assert "8 of 8 heads have no t-SNE 2D layout" in message and "--method tsne --dim 2" in message
    assert "3D is in the single-head view" in message
    assert sorted(p.name for p in (data.run.path / CACHE_DIRECTORY).iterdir()) == before


def test_single_head_figure_sends_typed_arrays_within_budget(data):
    state = ViewState(view="single", layer=1, head=3, method="pca", colour="frequency")
    figure = single_view.render_single(data, state, ["size"], np.array([0, 4]), 5, 0.02)
    text = to_json_plotly(figure)
    payload = json.loads(text)
    queries, keys = payload["data"][:2]
    for array in (queries["marker"]["color"], queries["marker"]["size"]):
        assert array["dtype"] == "f4"
    assert queries["x"]["dtype"] == queries["y"]["dtype"] == "u2"                  # 2D coordinates: steps
    assert decoded(keys["customdata"]).tolist() == list(range(data.run.n_tokens, 2 * data.run.n_tokens))
    assert len(payload["data"]) == single_view.OVERLAY_SLOTS.stop
    # bytes per point: ~45 here; 10,000 points stay under the 0.6 MB goal
    assert len(text) / (2 * data.run.n_tokens) < 60
    three_d = single_view.render_single(data, ViewState(method="pca", dim=3), [], np.zeros(0, int), 5, 0.02)
    assert three_d.data[0].type == "scatter3d" and three_d.data[0].z is not None


def test_a_head_switch_patches_all_but_the_tokens_texts_and_ids(data):
    from dash_app.views.single_figure import head_patch, to_steps

    base = [0, 1, 3, "pca", 2, "norm", "the", False, [], False, True]
    assert single_view.same_but_head(base, [0, 0, 2, *base[3:9], True, False])           # another head only
    assert not single_view.same_but_head(base, [*base[:5], "position", *base[6:]])      # another colouring
    state = ViewState(view="single", layer=0, head=2, method="pca", colour="norm")
    full = single_view.render_single(data, state, [], np.array([0, 4]), 5, 0.02)
    lean = single_view.render_single(data, state, [], np.array([0, 4]), 5, 0.02, token_fields=False)
    assert lean.data[0].text is None and lean.data[0].customdata is None and full.data[0].text is not None
    changed = {tuple(operation["location"]): operation["params"]["value"]
               for operation in head_patch(lean).to_plotly_json()["operations"]}
    assert not [location for location in changed if location[:2] in ((("data", 0), ("data", 1)))
                and location[2:] in (("text",), ("customdata",))]
    assert np.array_equal(decoded(changed[("data", 0, "x")]), to_steps(data.layout(0, 2, "pca", 2))[:data.run.n_tokens, 0])
    assert np.array_equal(decoded(changed[("data", 1, "marker")]["color"]), data.norms(0, 2)[data.run.n_tokens:])
    assert changed[("layout",)]["title"]["text"] == full.layout.title.text and ("data", 4) in changed
    lean_bytes, full_bytes = len(to_json_plotly(head_patch(lean))), len(to_json_plotly(full))
    assert lean_bytes < 0.8 * full_bytes


def test_coordinates_sent_as_steps_land_within_half_a_step_and_keep_the_shape(data):
    from dash_app.views.single_figure import STEPS, to_steps

    layout = data.layout(0, 2, "pca", 2)
    steps = to_steps(layout)
    assert steps.dtype == np.uint16 and steps.min(axis=0).tolist() == [0, 0] and steps.max() == STEPS
    exact = layout.astype(np.float64)
    low, extent = exact.min(axis=0), float(np.max(exact.max(axis=0) - exact.min(axis=0)))
    back = steps / STEPS * extent + low                          # one scale for both axes: the shape is kept
    # half a step at most: less than a pixel while the layout spans fewer than 65,535 pixels on screen
    assert np.abs(back - exact).max() <= extent / STEPS / 2 * 1.01
    missing = layout.copy()
    missing[3] = np.nan
    three_d = data.layout(0, 2, "pca", 3)
    assert to_steps(missing) is missing and to_steps(three_d) is three_d


def test_clicking_a_query_draws_lines_to_its_strongest_keys(data):
    coordinates = data.layout(1, 2, "pca", 2)
    sentence = 3
    rows = data.sentence_rows(sentence)
    token = int(rows[5])
    traces = single_view.overlay_traces(data, coordinates, 1, 2, token, top_k=3, threshold=0.0)
    sentence_queries, sentence_keys = traces[0], traces[1]
    assert list(sentence_queries["customdata"]) == rows.tolist()
    assert list(sentence_keys["customdata"]) == (rows + data.run.n_tokens).tolist()
    attention = data.run.attention(1, 2, sentence)[5]
    strongest = np.argsort(-attention)[:3]
    lines = traces[2:2 + single_view.OPACITY_STEPS]
    ends = [np.asarray(trace["x"])[1::3] for trace in lines]
    drawn = np.sort(np.concatenate(ends))
    expected = np.sort(coordinates[rows[strongest] + data.run.n_tokens, 0])
    assert np.allclose(drawn, expected)
    for step, trace in enumerate(lines):                                   # opacity follows the weight
        assert trace["opacity"] == pytest.approx((step + 1) / single_view.OPACITY_STEPS)
    high = single_view.overlay_traces(data, coordinates, 1, 2, token, top_k=3, threshold=1.01)
    assert sum(len(trace["x"]) for trace in high[2:2 + single_view.OPACITY_STEPS]) == 0
    nothing = single_view.overlay_traces(data, coordinates, 1, 2, None, top_k=3, threshold=0.0)
    assert all(len(trace["x"]) == 0 for trace in nothing)


def test_point_details_and_correlations(data, tmp_path):
    point = int(data.sentence_rows(2)[3]) + data.run.n_tokens
    details = single_view.point_details(data, ViewState(colour="punctuation"), point)
    text = str(details)
    assert "(key)" in text and "sentence 2, position 3" in text and "punctuation / special token: " in text
    assert "qkviz report --run" in str(single_view.correlation_panel(data, 0, 0))
    assert single_view.fidelity_gauge(data, 0, 0, "pca", 2) == (
        "this layout (pca-2d): partner recall@10 and trustworthiness not measured yet: "
        f"'qkviz report --run {data.run.path} --out reports/tiny'")
    assert main(["-q", "report", "--run", str(data.run.path), "--out", str(tmp_path / "report")]) == 0
    panel = str(single_view.correlation_panel(data, 1, 2))
    assert "pca-2d" in panel and "translated+scaled" in panel
    assert data.correlation_space("pca") == "pca-2d"
    assert not np.isnan(data.correlation_grid("pca-2d")).any()
    figure, message = matrix_view.render_matrix(data, ViewState(method="pca", sort="correlation"), None, None)
    assert message == "" and " · r " in figure.data[4].text[0]
    recall = data.mean_recall("pca-2d")
    table = data.correlations()
    expected = (table[table.space == "pca-2d"].recall_query + table[table.space == "pca-2d"].recall_key).mean() / 2
    assert recall == pytest.approx(expected) and "recall q→k" in panel
    labels = {option["value"]: option["label"] for option in method_options(data)}
    assert labels["pca"].endswith(f"heads, recall {recall:.0%})")
    assert set(labels) == {"pca"}                     # only the layouts the run has are offered
    assert data.offered_layouts() == (("pca", 2), ("pca", 3))
    assert validate(ViewState(method="tsne", dim=3), data.shape, ViewState(method="pca")).method == "pca"


def test_the_fidelity_gauge_gives_the_shown_layouts_recall_and_trust_with_the_goals_verdicts(data, tmp_path):
    from qkviz.analysis.statistics.correlation import store_correlations

    def gauge(layer=1, head=2, method="pca", dim=2):
        return single_view.fidelity_gauge(data, layer, head, method, dim)

    assert main(["-q", "report", "--run", str(data.run.path), "--out", str(tmp_path / "report")]) == 0
    table = data.correlations()
    row = table[(table.layer == 1) & (table["head"] == 2) & (table.space == "pca-2d")].iloc[0]
    recall, trust = (row.recall_query + row.recall_key) / 2, row.trust
    assert 0 <= trust <= 1
    assert gauge() == (f"this layout (pca-2d): partner recall@10 {recall:.0%} "
                       f"(goal 30%: {'met' if recall >= 0.3 else 'not met'}), trustworthiness {trust:.2f} "
                       f"(goal 0.90: {'met' if trust >= 0.9 else 'not met'})")
    panel = str(single_view.correlation_panel(data, 1, 2, "pca", 2))
    assert gauge() in panel and "trust" in panel and f"{trust:.2f}" in panel
    assert "not in the report" in gauge(method="umap") and "qkviz report --run" in gauge(method="umap")
    try:
        # a head whose layout reaches both goals, and one that reaches one
        known = table.copy()
        chosen = (known.layer == 1) & (known["head"] == 2) & (known.space == "pca-2d")
        known.loc[chosen, ["recall_query", "recall_key", "trust"]] = [0.5, 0.3, 0.93]
        other = (known.layer == 0) & (known["head"] == 1) & (known.space == "pca-3d")
        known.loc[other, ["recall_query", "recall_key", "trust"]] = [0.1, 0.2, 0.95]
        store_correlations(data.run, known)
        assert gauge() == ("this layout (pca-2d): partner recall@10 40% (goal 30%: met), "
                           "trustworthiness 0.93 (goal 0.90: met)")
        assert gauge(0, 1, "pca", 3) == ("this layout (pca-3d): partner recall@10 15% (goal 30%: not met), "
                                         "trustworthiness 0.95 (goal 0.90: met)")
        # a report stored before the trust column: the table still reads, the gauge says how to measure it
        store_correlations(data.run, table.drop(columns="trust"))
        line = gauge()
        assert "trustworthiness unknown (goal 0.90)" in line and "make the report again" in line
        assert "–" in str(single_view.correlation_panel(data, 1, 2, "pca", 2))
    finally:
        store_correlations(data.run, table)
    assert gauge().startswith(f"this layout (pca-2d): partner recall@10 {recall:.0%}")


def test_aggregate_attention_is_the_corpus_mean_by_position(app_run):
    average = aggregate_attention(app_run, 1, 2, positions=8)
    sums, counts = np.zeros((8, 8)), np.zeros((8, 8))
    for sentence in range(app_run.n_sentences):
        attention = app_run.attention(1, 2, sentence)[:8, :8]
        n = len(attention)
        sums[:n, :n] += attention
        counts[:n, :n] += 1
    assert np.allclose(average, sums / counts)
    no_first = aggregate_attention(app_run, 1, 2, hide_first=True, positions=8)
    assert np.isnan(no_first[0]).all() and np.allclose(np.nansum(no_first[1:, 1:], axis=1)[:1], 1)


def test_sentence_view_lines_carry_their_tokens_and_the_click_is_bold(data):
    rows = data.sentence_rows(4)
    state = ViewState(view="sentence", layer=0, head=1, sentence=4, point=int(rows[2]) + data.run.n_tokens)
    figure, message = sentence_view.render_sentence(data, state, ["first"])
    queries, keys, *lines = figure.data
    assert queries.customdata.tolist() == list(range(1, len(rows)))       # first token hidden
    assert queries.textfont.weight[1] == "bold" and keys.textfont.weight[0] == "normal"
    weights, hidden = sentence_view.sentence_weights(data, 0, 1, 4, ["first"])
    for line in lines:
        query, key = line.meta
        assert line.opacity == pytest.approx(min(1.0, weights[query, key])) and key != 0
    assert f"{len(lines)} lines" in message
    assert sentence_view.sentence_options(data)[4]["value"] == 4


def test_the_sentence_selector_offers_the_first_sentences_the_chosen_one_and_what_is_typed(data):
    n = data.run.n_sentences
    assert [option["value"] for option in sentence_view.sentence_options(data, limit=3)] == [0, 1, 2]
    assert [option["value"] for option in sentence_view.sentence_options(data, "", n - 1, limit=3)] == [0, 1, 2, n - 1]
    text = str(data.sentences.text.iat[n - 1])
    word = max(text.split(), key=len).lower()
    found = sentence_view.sentence_options(data, word.upper(), None, limit=n)
    assert n - 1 in [option["value"] for option in found]
    texts = data.sentences.text.str.lower()
    assert all(word in texts.iat[option["value"]] or str(option["value"]).startswith(word) for option in found)
    assert sentence_view.sentence_options(data, "no sentence holds this", 2) == [sentence_view.sentence_options(data)[2]]


def test_each_action_makes_the_next_state(app_run):
    runs = open_runs([app_run.path])
    state, notices = next_state(None, None, None, "?view=single&layer=1&head=9&x=1", runs)
    assert (state.view, state.layer, state.head) == ("single", 1, 0) and len(notices) == 2
    current = state.as_dict()
    opened, _ = next_state(ids.MATRIX_CLICK, {"curve": 0, "customdata": 6, "timestamp": 1}, current, "", runs)
    assert (opened.view, opened.layer, opened.head) == ("single", 1, 2)
    point = int(runs[0].sentence_rows(3)[2])
    chosen, _ = next_state(ids.SINGLE_CLICK, {"curve": 0, "customdata": point}, current, "", runs)
    assert (chosen.point, chosen.sentence) == (point, 3)
    key, _ = next_state(ids.SENTENCE_CLICK, {"curve": 1, "customdata": 2}, chosen.as_dict(), "", runs)
    assert key.point == int(runs[0].sentence_rows(3)[2]) + app_run.n_tokens
    assert next_state(ids.NEXT_HEAD, 1, current, "", runs)[0].head == 1
    assert next_state(ids.LAYER_UP, 1, current, "", runs)[0].layer == 0
    assert next_state(ids.SEARCH_SUBSTRING, ["substring"], current, "", runs)[0].substring is True
    assert next_state(ids.HEAD_SELECT, 99, current, "", runs)[0].head == 0          # validated
    assert next_state(ids.OPEN_SENTENCE, 1, chosen.as_dict(), "", runs)[0].view == "sentence"
    assert next_state(ids.SINGLE_CLICK, None, current, "", runs)[0] == state
    # a control's change that another action's answer overtook is read back from the control
    controls = {ids.VIEW_TABS: "matrix", ids.SEARCH_INPUT: "the", ids.LAYER_SELECT: 7, ids.SENTENCE_SELECT: 3}
    merged, _ = next_state(ids.VIEW_TABS, "matrix", chosen.as_dict(), "", runs, controls)
    assert (merged.view, merged.search, merged.layer, merged.sentence, merged.point) == ("matrix", "the", 1, 3, point)
    moved, _ = next_state(ids.SENTENCE_SELECT, 5, chosen.as_dict(), "", runs, {ids.SENTENCE_SELECT: 5})
    assert (moved.sentence, moved.point) == (5, None)


def test_the_app_builds_with_its_stable_ids(app_run):
    app = build_app(open_runs([app_run.path, app_run.path]))
    layout = str(app.layout())                                             # each page load has its own session
    for stable in (ids.MATRIX_VIEW, ids.SINGLE_VIEW, ids.SENTENCE_VIEW, ids.SEARCH_INPUT, ids.SEARCH_COUNT):
        assert f"id='{stable}'" in layout
    assert "'label': 'tiny-llama-2'" in layout                             # duplicate names made unique
    with pytest.raises(QkvizError, match="no run at"):
        open_runs([app_run.path / "missing"])


def test_no_callback_that_takes_a_views_state_runs_at_page_load(app_run):
    """A view's drawing callbacks wait for the state callback to send that view its state, so a hidden view costs
    the page load no request: every server callback taking a view's state store as an input has
    ``prevent_initial_call`` (a browser-side one, as the matrix's measure of the window, asks the server nothing)."""
    app = build_app(open_runs([app_run.path]))
    state_stores = {view.state_store for view in VIEWS}
    taking_state = [callback for callback in app._callback_list if callback["clientside_function"] is None
                    and state_stores & {given["id"] for given in callback["inputs"]}]
    assert len(taking_state) >= len(VIEWS)                                 # every view draws from its state
    assert [callback["output"] for callback in taking_state if not callback["prevent_initial_call"]] == []


@pytest.mark.parametrize("layers, heads, layers_as_rows", [(6, 12, True), (12, 12, True), (30, 9, False), (32, 32, True)])
def test_the_model_grid_fills_the_window_in_the_orientation_that_gives_larger_cells(layers, heads, layers_as_rows):
    window = matrix_grid.window_size({"width": 1400, "height": 900})
    margin = matrix_view.grid_margin(True, False, False, False)
    box = matrix_grid.plot_box(window, margin)
    grid = matrix_grid.model_grid(layers, heads, box)
    assert grid.layers_as_rows == layers_as_rows and grid.n_rows * grid.n_cols == layers * heads
    assert grid.cell_px[0] * grid.n_cols == pytest.approx(box.width) and box.width >= 0.6 * 1400
    assert grid.cell_px[1] * grid.n_rows == pytest.approx(box.height) and box.height >= 0.55 * 900
    x0, y0, width, height = grid.inner                       # the layout's square is square on screen
    assert width / matrix_grid.CELL * grid.cell_px[0] == pytest.approx(height / matrix_grid.CELL * grid.cell_px[1])
    assert 0 <= x0 and x0 + width <= matrix_grid.CELL and 0 <= y0 and y0 + height <= matrix_grid.CELL
    assert sorted(grid.positions.tolist()) == list(range(layers * heads))
    flat = 1 * heads + 2                                     # layer 1, head 2: row 1 (layers as rows) or column 1
    assert divmod(int(grid.positions[flat]), grid.n_cols) == ((1, 2) if layers_as_rows else (2, 1))


def test_window_sizes_from_the_browser_are_checked():
    assert matrix_grid.window_size(None) == matrix_grid.DEFAULT_WINDOW
    assert matrix_grid.window_size({"width": "1e9", "height": float("nan")}) == matrix_grid.DEFAULT_WINDOW
    assert matrix_grid.window_size({"width": 10 ** 12, "height": -5}) == (8192, 240)
    assert matrix_grid.list_columns(10, matrix_grid.Box(1000, 100)) == 10
    assert matrix_grid.list_columns(1024, matrix_grid.Box(1300, 650)) in range(42, 48)
