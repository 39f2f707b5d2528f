"""Image runs through every later command: head statistics on the patch grid, syntax left out, and project, index,
related, report, status and compare on an image run."""

import shutil

import numpy as np
import pandas as pd
import pytest
from support.cli import run_main

import qkviz
from qkviz.analysis import IMAGE_STATISTICS, STATISTICS
from qkviz.analysis.labels.head_labels import head_label
from qkviz.analysis.statistics.head_stats import TIE_MARGIN, head_statistics


def grid_reference(run, layer: int, head: int) -> dict[str, float]:
    """The grid statistics of one head computed directly from the run's attention matrices (see head_stats)."""
    tokens = run.tokens
    distance_sum, renormalised, queries = 0.0, [], 0
    counts = dict.fromkeys(("left", "right", "neighbour", "same_row", "same_col"), 0)
    for image in range(run.n_sentences):
        rows = run.sentence_tokens(image)
        place = np.stack([tokens.patch_row.to_numpy()[rows], tokens.patch_col.to_numpy()[rows]], axis=1)
        patch = place[:, 0] >= 0
        attention = run.attention(layer, head, image)
        for query in np.flatnonzero(patch):
            weights = attention[query]
            gaps = np.linalg.norm(place[patch] - place[query], axis=1)
            distance_sum += float((weights[patch] * gaps).sum())
            renormalised.append(float((weights[patch] * gaps).sum() / weights[patch].sum()))
            queries += 1
            top_two = np.sort(weights)[-2:]
            strongest = int(weights.argmax())
            if top_two[1] - top_two[0] <= TIE_MARGIN or not patch[strongest]:
                continue
            d_row, d_col = place[strongest] - place[query]
            counts["left"] += (d_row, d_col) == (0, -1)
            counts["right"] += (d_row, d_col) == (0, 1)
            counts["neighbour"] += abs(d_row) + abs(d_col) == 1
            counts["same_row"] += d_row == 0 and abs(d_col) >= 2
            counts["same_col"] += d_col == 0 and abs(d_row) >= 2
    return {"mean_distance": distance_sum / queries, "mean_distance_no_first": float(np.mean(renormalised)),
            "argmax_previous": counts["left"] / queries, "argmax_next": counts["right"] / queries,
            "argmax_neighbour": counts["neighbour"] / queries, "argmax_same_row": counts["same_row"] / queries,
            "argmax_same_col": counts["same_col"] / queries}


@pytest.mark.parametrize("layer, head", [(0, 1), (1, 3)])
def test_grid_statistics_equal_a_direct_count(image_run, layer, head):
    found = head_statistics(image_run, layer, head).values
    expected = grid_reference(image_run, layer, head)
    assert expected["argmax_neighbour"] > 0 and expected["mean_distance"] > 0.5   # the counts are not empty
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_image_labels_name_places_on_the_grid():
    base = {name: 0.0 for name in (*STATISTICS, *IMAGE_STATISTICS)} | {"entropy_normalised": 0.3}
    assert head_label(base | {"argmax_previous": 0.7, "argmax_neighbour": 0.7})[0] == "left-patch"
    assert head_label(base | {"argmax_previous": 0.3, "argmax_next": 0.3, "argmax_neighbour": 0.6})[0] == "neighbour-patch"
    assert head_label(base | {"argmax_same_col": 0.55})[0] == "same-column"
    assert head_label(base | {"argmax_first": 0.8})[0] == "first-token"
    text = {name: 0.0 for name in STATISTICS} | {"entropy_normalised": 0.3, "argmax_previous": 0.7}
    assert head_label(text)[0] == "previous-token"


def test_stats_on_an_image_run_leave_syntax_out_with_a_note(image_run, tmp_path, caplog):
    run = qkviz.open_run(shutil.copytree(image_run.path, tmp_path / "run"))
    result = run_main("stats", "--run", str(run.path), "--syntax")
    assert result.returncode == 0, result.stderr
    assert "image run" in result.stderr and "--syntax is left out" in result.stderr
    table = run.atlas.table
    assert set(IMAGE_STATISTICS) <= set(table.columns)
    assert not any(column.startswith(("pos_", "dep_")) for column in table.columns)
    row = table[(table.layer == 1) & (table["head"] == 3)].iloc[0]
    assert row.mean_distance == pytest.approx(grid_reference(run, 1, 3)["mean_distance"])


def test_every_command_runs_on_an_image_run(image_run, tiny_vision, tmp_path):
    run = qkviz.open_run(shutil.copytree(image_run.path, tmp_path / "run"))
    for command in (["project", "--run", str(run.path), "--method", "attn-tsne", "--dim", "2"],
                    ["index", "--run", str(run.path)],
                    ["related", "--run", str(run.path)],
                    ["report", "--run", str(run.path), "--out", str(tmp_path / "report")],
                    ["status", "--run", str(run.path)]):
        result = run_main("-q", *command)
        assert result.returncode == 0, (command, result.stderr)
    assert run.projection(1, 2, method="attn-tsne").shape == (2 * run.n_tokens, 2)
    assert (tmp_path / "report" / "index.html").exists()
    partners = run.partners(1, 2, point=5, k=3)
    assert len(partners.tokens) == 3
    other = qkviz.extract(str(tiny_vision("vit")), qkviz.sample_images(crops=2), tmp_path / "same", progress=False)
    result = run_main("-q", "compare", "--run", str(run.path), "--run", str(other.path), "--out",
                      str(tmp_path / "change.csv"))
    assert result.returncode == 0, result.stderr
    change = pd.read_csv(tmp_path / "change.csv")
    assert len(change) == run.n_layers * run.n_heads
    assert (change.n_queries == run.n_tokens).all() and change.mean_js.abs().max() < 1e-6   # the same model and images
