"""The composition view's layer matrix: its sums per cell, when it shows, and what a click on it may open."""

import numpy as np
import pandas as pd

from dash_app.views.composition_layers import (chosen_level, clicked_layer, layer_figure, layer_sums, shows_layers,
                                               side_codes, side_sums)
from dash_app.views.composition import passing_mask

EDGES = pd.DataFrame({"source_layer": [0, 0, 1, 0], "target_layer": [2, 2, 2, 1],
                      "side": ["query", "query", "query", "value"], "weight": [0.5, -0.25, 1.0, 2.0]})


def test_a_cell_sums_the_edges_from_its_source_layer_into_its_target_layer():
    magnitude, signed, count = layer_sums(EDGES, 3, "query")
    assert magnitude[2, 0] == 0.75 and signed[2, 0] == 0.25 and count[2, 0] == 2
    assert magnitude[2, 1] == 1.0 and count.sum() == 3            # the value edge is another side's
    magnitude, _signed, count = layer_sums(EDGES, 3, "value")
    assert magnitude[1, 0] == 2.0 and count.sum() == 1


def test_the_figure_has_a_heatmap_per_side_blank_where_no_edge_runs():
    figure = layer_figure(EDGES, 3, ("query", "value"), "contribution")
    assert [trace.type for trace in figure.data] == ["heatmap", "heatmap"]
    z = np.asarray(figure.data[0].z, dtype=float)
    assert z[2, 0] == 0.75 and np.isnan(z[0, 0])


def test_the_layers_show_above_256_heads_unless_a_layer_or_head_is_open():
    assert shows_layers("auto", 32, 32, -1, -1, -1) and not shows_layers("auto", 6, 12, -1, -1, -1)
    assert shows_layers("layers", 6, 12, -1, -1, -1) and not shows_layers("heads", 32, 32, -1, -1, -1)
    assert not shows_layers("auto", 32, 32, 4, -1, -1) and not shows_layers("layers", 32, 32, -1, 3, -1)
    assert chosen_level("layers") == "layers" and chosen_level(["heads"]) == "auto" and chosen_level(None) == "auto"


def test_only_a_click_on_a_layer_in_range_opens_it():
    assert clicked_layer({"points": [{"x": 0, "y": 2}]}, 3) == 2
    assert clicked_layer({"points": [{"x": 0, "y": 2.0}]}, 3) == 2
    for hostile in (None, "x", {"points": []}, {"points": [{"y": 3}]}, {"points": [{"y": -1}]},
                    {"points": [{"y": True}]}, {"points": [{"y": "1"}]}, {"points": [{"y": 1.5}]}, {"points": ["y"]}):
        assert clicked_layer(hostile, 3) is None


def test_every_side_is_summed_in_one_pass_of_the_edges_kept_as_of_the_edges_copied():
    keep = np.array([True, False, True, True])
    for edges in (EDGES, EDGES.astype({"side": "category"})):
        sums = side_sums(edges, 3, ("query", "key", "value"), keep)
        for side in ("query", "key", "value"):
            for kept, copied in zip(sums[side], layer_sums(EDGES[keep], 3, side)):
                np.testing.assert_array_equal(kept, copied)
    assert sums["query"][0][2, 0] == 0.5 and sums["key"][2].sum() == 0   # the kept query edge alone; no key edge


def test_a_side_is_coded_by_its_place_among_the_sides_asked_for():
    sides = pd.Series(["value", "query", "key", None])
    for column in (sides, sides.astype("category")):
        assert side_codes(column, ("query", "value")).tolist() == [1, 0, -1, -1]


def test_an_edge_passes_its_units_minimum_on_the_sides_ticked():
    edges = pd.DataFrame({"side": ["query", "key", "value", "value", "key"], "weight": [0.5, -0.1, 0.3, -0.05, np.inf]})
    for column in (edges, edges.astype({"side": "category"})):
        assert passing_mask(column, ["query", "value"], 0.2, 0.1).tolist() == [True, False, True, False, False]
        assert passing_mask(column, ["key"], 0.05).tolist() == [False, True, False, False, True]
        assert passing_mask(column, [], 0.0).tolist() == [False] * 5
