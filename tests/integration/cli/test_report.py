"""``qkviz report``: files, spaces, the table kept for the app, and one-line errors."""

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

import qkviz
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from qkviz.analysis.statistics import correlation
from qkviz.cli import main
from qkviz.report.html_page import PLOTLY_ASSET, cartesian_bundle
from qkviz.report.report_directory import report_problems
from qkviz.store.files import file_sha256


@pytest.fixture(scope="module")
def causal_run(tiny_model, tiny_corpus, tmp_path_factory):
    return qkviz.extract(str(tiny_model("gpt2")), tiny_corpus, tmp_path_factory.mktemp("r") / "run",
                         max_sentences=24)


def test_report_without_projections_covers_the_head_spaces_and_names_the_command(causal_run, tmp_path, caplog):
    out = tmp_path / "report"
    assert main(["report", "--run", str(causal_run.path), "--out", str(out)]) == 0
    assert f"qkviz project --run {causal_run.path}" in caplog.text
    table = pd.read_csv(out / "correlation.csv")
    assert set(table.space) == set(correlation.HEAD_SPACES)
    assert len(table) == causal_run.n_layers * causal_run.n_heads * 3
    # Causal: each query attends to itself and the keys before it, within its sentence.
    lengths = causal_run.sentences.n_tokens.to_numpy()
    assert (table.n_pairs == (lengths * (lengths + 1) // 2).sum()).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["missing_projections"] == f"qkviz project --run {causal_run.path}"
    assert summary["missing_atlas"] == f"qkviz stats --run {causal_run.path}"
    assert not (out / "atlas.html").exists()
    assert summary["pairs"]["exact"] and summary["projections"] == []
    page = (out / "index.html").read_text()
    assert "No projections are cached yet" in page
    # nothing fetched from the network: the one script the page loads is plotly.js, stored once beside it
    assert re.findall(r"<(?:script|link|img)[^>]+(?:src|href)=\"([^\"]*)\"", page) == [PLOTLY_ASSET]
    # scripts/setup.sh installed plotly's cartesian bundle of the plotly package's plotly.js version: it is the one
    assert PLOTLY_ASSET == f"assets/plotly-cartesian-{get_plotlyjs_version()}.min.js"
    assert (out / PLOTLY_ASSET).read_bytes() == cartesian_bundle().read_bytes()
    assert "Plotly.newPlot" in page and "qkvizPlot(" in page
    # ... so the page holds its own data only (plotly.js inlined again would be 4.8 MB of it)
    assert (out / "index.html").stat().st_size < min(250_000, len(get_plotlyjs()) // 10)
    assert '"dtype":"f8"' not in page and '"template":' not in page.split("QKVIZ_TEMPLATE", 2)[2]
    assert summary["files"] == {name: file_sha256(out / name) for name in
                                ("correlation.csv", "index.html", PLOTLY_ASSET)}
    assert report_problems(out) == []


def test_report_covers_every_cached_projection_and_keeps_the_table_for_the_app(causal_run, tmp_path):
    assert main(["-q", "project", "--run", str(causal_run.path), "--method", "pca", "--dim", "2,3"]) == 0
    assert main(["-q", "stats", "--run", str(causal_run.path)]) == 0
    out = tmp_path / "report"
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out)]) == 0
    table = pd.read_csv(out / "correlation.csv")
    assert set(table.space) == {*correlation.HEAD_SPACES, "pca-2d", "pca-3d"}
    summary = json.loads((out / "summary.json").read_text())
    assert [row["space"] for row in summary["projections"]] == sorted(
        ["pca-2d", "pca-3d"], key=lambda s: summary["model_means"][s]["pearson"])
    assert "missing_projections" not in summary and "missing_atlas" not in summary
    labels = summary["head_atlas"]["labels"]
    assert sum(labels.values()) == causal_run.n_layers * causal_run.n_heads
    atlas_page = (out / "atlas.html").read_text()
    assert "Strongest label of each head" in atlas_page and all(label in atlas_page for label in labels)
    assert all(label in atlas_page for label in summary["head_atlas"]["heads_earning"])
    assert f'<script src="{PLOTLY_ASSET}">' in atlas_page and (out / "atlas.html").stat().st_size < 1_000_000
    assert set(summary["files"]) == {"correlation.csv", "index.html", "atlas.html", PLOTLY_ASSET}
    extremes = summary["extreme_pairs"]
    page = (out / "index.html").read_text()
    for counts in extremes.values():   # the scatters say how many pairs they show, of how many
        assert counts["shown"] == min(counts["attending"], 3000) and counts["attending"] > 3000
        assert (f"L{counts['layer']} H{counts['head']}: 3,000 of the {counts['attending']:,} attending pairs of "
                f"layer {counts['layer']}, drawn uniformly at random") in page
    means = table.groupby("space").pearson.mean()
    assert summary["model_means"]["pca-3d"]["pearson"] == pytest.approx(means["pca-3d"], abs=1e-6)
    stored = correlation.stored_correlations(causal_run)
    assert stored is not None and len(stored) == len(table)
    np.testing.assert_allclose(stored.pearson, table.pearson, atol=1e-6)
    direct = qkviz.correlation_table(causal_run)
    np.testing.assert_allclose(direct.spearman, table.spearman, atol=1e-6)
    # A 3D PCA keeps more than a 2D one of the structure it projects.
    assert means["pca-3d"] <= means["pca-2d"] + 0.05


def test_projection_rows_have_trustworthiness_and_the_report_counts_the_heads_reaching_both_goals(causal_run, tmp_path):
    from sklearn.manifold import trustworthiness as sklearn_trustworthiness

    from qkviz.analysis.statistics.correlation import head_space_clouds
    from qkviz.neighbours import RECALL_GOAL, TRUST_GOAL, TRUST_SAMPLE, trustworthiness
    from qkviz.report.correlation_summary import summarise
    from qkviz.store.projections import ProjectionCache

    assert main(["-q", "project", "--run", str(causal_run.path), "--method", "pca", "--dim", "2"]) == 0
    out = tmp_path / "report"
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out)]) == 0
    table = pd.read_csv(out / "correlation.csv")
    projected = table[~table.space.isin(correlation.HEAD_SPACES)]
    assert set(projected.space) >= {"pca-2d"} and projected.trust.between(0, 1).all()
    assert table[table.space.isin(correlation.HEAD_SPACES)].trust.isna().all()
    # the figure is sklearn's on the same seeded sample of the head's translated+scaled points and its layout
    row = projected[projected.space == "pca-2d"].iloc[-1]
    layer, head = int(row["layer"]), int(row["head"])
    points = head_space_clouds(causal_run.queries(layer, head), causal_run.keys(layer, head))["translated+scaled"]
    spec = correlation.cached_projections(causal_run)[(layer, head)]["pca-2d"]
    layout = ProjectionCache(causal_run.path, causal_run.manifest["fingerprint"]).load(spec)
    n = len(points)
    chosen = np.sort(np.random.default_rng(0).choice(n, size=TRUST_SAMPLE, replace=False)) if n > TRUST_SAMPLE else np.arange(n)
    assert row["trust"] == pytest.approx(trustworthiness(points[chosen], layout[chosen]), abs=1e-6)
    # sklearn's within the sampled points' ties (a repeated token's vectors are equal: which of them ranks first
    # is arbitrary), and exactly sklearn's on the points without repeats
    assert row["trust"] == pytest.approx(sklearn_trustworthiness(points[chosen], layout[chosen], n_neighbors=10), abs=1e-3)
    unique = np.sort(np.unique(points[chosen], axis=0, return_index=True)[1])
    assert len(unique) < len(chosen)
    assert trustworthiness(points[chosen][unique], layout[chosen][unique]) == pytest.approx(
        sklearn_trustworthiness(points[chosen][unique], layout[chosen][unique], n_neighbors=10), abs=1e-9)
    # the summary counts the heads whose layout reaches both goals; the page says so beside the column
    summary = json.loads((out / "summary.json").read_text())
    both = [(r.recall_query + r.recall_key) / 2 >= RECALL_GOAL and r.trust >= TRUST_GOAL
            for r in projected[projected.space == "pca-2d"].itertuples()]
    counts = summary["goals"]["spaces"]["pca-2d"]
    assert counts == {"both": sum(both), "heads": causal_run.n_layers * causal_run.n_heads}
    page = (out / "index.html").read_text()
    assert "<th>trust</th>" in page and "<th>recall q&rarr;k</th><th>recall k&rarr;q</th><th>trust</th>" in page
    assert f"{sum(both)} of {counts['heads']} heads reach both goals in pca-2d" in page
    assert summary["model_means"]["pca-2d"]["trust"] == pytest.approx(projected[projected.space == "pca-2d"].trust.mean(),
                                                                      abs=1e-6)
    # a table stored before the column existed still summarises: trust unknown, no head reaching both goals
    old = table.drop(columns="trust")
    old_summary = summarise(causal_run, old, 10_000, 0)
    assert old_summary["model_means"]["pca-2d"]["trust"] is None
    assert old_summary["goals"]["spaces"]["pca-2d"] == {"both": 0, "heads": counts["heads"]}


def test_sampled_pairs_are_flagged_with_their_interval(causal_run, tmp_path):
    out = tmp_path / "sampled"
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out), "--max-pairs", "500"]) == 0
    table = pd.read_csv(out / "correlation.csv")
    assert (table.n_pairs == 500).all() and not table.exact.any() and (table.ci95 > 0).all()
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["pairs"]["exact"] and "ci95" in summary["pairs"]["sampling"]


def test_bad_report_requests_are_one_line_errors(causal_run, tmp_path, capsys):
    out = tmp_path / "exists"
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "already exists; pass --overwrite" in error
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]   # no staging directory left behind

    # the shared plotly.js is checked like every file, and the report's folder of it holds nothing else
    asset = out / PLOTLY_ASSET
    asset.write_text(asset.read_text(encoding="utf-8").replace("plotly", "PLOTLY", 1), encoding="utf-8")
    assert report_problems(out) == [f"{PLOTLY_ASSET} does not match its sha256"]
    asset.unlink()
    assert report_problems(out) == [f"{PLOTLY_ASSET} is missing"]
    (out / "assets" / "mine.js").write_text("keep me")
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out), "--overwrite"]) == 2
    assert "holds more than a qkviz report (assets/mine.js)" in capsys.readouterr().err
    (out / "assets" / "mine.js").unlink()
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(out), "--overwrite"]) == 0
    assert report_problems(out) == []

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    assert main(["-q", "report", "--run", str(causal_run.path), "--out", str(foreign), "--overwrite"]) == 2
    assert "not a qkviz report directory" in capsys.readouterr().err
    assert (foreign / "thesis.tex").read_text() == "keep me"

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "progress.json").write_text("{}")
    assert main(["-q", "report", "--run", str(broken), "--out", str(tmp_path / "r2")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "interrupted extraction" in error


@pytest.mark.slow
def test_minilm_mean_correlation_after_translation_is_negative_and_reported(minilm_run, tmp_path):
    # the shared MiniLM run (CORPUS, max_tokens=1500), copied: the report stores its table in the run
    run = qkviz.open_run(shutil.copytree(minilm_run.path, tmp_path / "minilm"))
    out = tmp_path / "report"
    assert main(["-q", "report", "--run", str(run.path), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] and summary["n_layers"] * summary["n_heads"] == 72
    for space in ("translated", "translated+scaled"):
        assert summary["model_means"][space]["pearson"] < 0
        assert summary["model_means"][space]["query_spearman"] < 0
    page = (out / "index.html").read_text()
    assert "-0.938" in page and "translated+scaled" in page
    assert len(page.encode()) < 1_500_000     # issue 17's bound on a page; plotly.js is shared, in assets/


def test_the_table_carries_each_spaces_partner_recall(causal_run):
    """recall_query / recall_key of a row are partner recall@10 of that space, as qkviz.core measures it on the
    points themselves."""
    from qkviz.core import Alignment, align_head
    from qkviz.neighbours import partner_recall

    layer, head = 1, 2
    table = qkviz.correlation_table(causal_run, layers=[layer], heads=[head])
    queries, keys = causal_run.queries(layer, head), causal_run.keys(layer, head)
    rule = causal_run.logit_rule(layer, head)
    aligned = align_head(queries, keys, Alignment()).points
    row = table[table.space == "translated+scaled"].iloc[0]
    direct = partner_recall(queries, keys, rule, aligned, k=10, sample=200)
    assert (row.recall_query, row.recall_key) == pytest.approx((direct["query"], direct["key"]))
    assert table[["recall_query", "recall_key"]].apply(lambda column: column.between(0, 1)).all().all()
