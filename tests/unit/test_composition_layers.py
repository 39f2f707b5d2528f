"""The composition view's layer matrix: its sums per cell, when it shows, and what a click on it may open."""

import numpy as np
import pandas as pd

from dash_app.views.composition_layers import chosen_level, clicked_layer, layer_figure, layer_sums, shows_layers

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
