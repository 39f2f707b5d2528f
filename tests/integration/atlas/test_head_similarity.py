"""Related heads: JS distance and CKA against direct computations, identical heads found, storage, the CLI."""

import json
import logging
import shutil

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon, pdist, squareform
from support.cli import run_main

from qkviz.analysis.atlas import head_similarity
from qkviz.core.alignment import align_head
from qkviz.analysis.atlas import related_sample
from qkviz.analysis.atlas.head_similarity import (classical_mds, cluster_order, compute_head_similarity, geometry_sample,
                                   load_head_similarity, related_heads, store_head_similarity)
from qkviz.analysis.atlas.related_sample import pair_budget, query_supports, sample_queries, sample_sentences
from qkviz.store.run import open_stored_run
from support.runs import reseal


def direct_js(run, sentences, first, second) -> float:
    """Mean over the sentences' queries of scipy's JS distance between two heads' attention rows."""
    distances = []
    for sentence in sentences:
        p, q = run.attention(*first, sentence), run.attention(*second, sentence)
        distances += [jensenshannon(p_row, q_row, base=2) for p_row, q_row in zip(p, q)]
    return float(np.mean(distances))


def direct_query_js(run, tokens, first, second) -> float:
    """Mean over the query ``tokens`` of scipy's JS distance between two heads' attention rows, each row
    taken from ``run.attention`` (``attention_probs``) of the query's whole sentence."""
    firsts = run.sentences.first_token.to_numpy()
    distances = []
    for token in tokens:
        sentence = int(np.searchsorted(firsts, token, side="right") - 1)
        position = int(token - firsts[sentence])
        p, q = (run.attention(*head, sentence)[position] for head in (first, second))
        distances.append(jensenshannon(p, q, base=2))
    return float(np.mean(distances))


def sentence_rows(run, sentences):
    return np.concatenate([np.arange(run.sentence_tokens(s).start, run.sentence_tokens(s).stop) for s in sentences])


def direct_cka(run, sentences, first, second, rows=None) -> float:
    """Linear CKA from the Gram matrices of the two heads' aligned clouds over the sentences' tokens (or ``rows``)."""
    rows = sentence_rows(run, sentences) if rows is None else rows
    grams = []
    for layer, head in (first, second):
        aligned = align_head(run.queries(layer, head), run.keys(layer, head))
        cloud = np.concatenate([aligned.queries[rows], aligned.keys[rows]]).astype(np.float64)
        centring = np.eye(len(cloud)) - 1.0 / len(cloud)
        grams.append(centring @ cloud @ cloud.T @ centring)
    return float(np.sum(grams[0] * grams[1]) / (np.linalg.norm(grams[0]) * np.linalg.norm(grams[1])))


@pytest.mark.parametrize("family", ["bert", "llama", "gemma3"])   # encoder; grouped keys; sliding windows
def test_matrices_equal_a_direct_computation(tiny_run, family):
    run = tiny_run(family)
    similarity = compute_head_similarity(run, max_queries=80, seed=3)
    js, cka = similarity.js_distance, similarity.geometry_similarity
    total = run.n_layers * run.n_heads
    assert js.shape == cka.shape == (total, total) and js.dtype == cka.dtype == np.float64
    assert np.array_equal(js, js.T) and np.all(np.diag(js) == 0) and np.all((js >= 0) & (js <= 1))
    assert np.allclose(cka, cka.T) and np.all(np.diag(cka) == 1) and np.all((cka >= 0) & (cka <= 1))
    assert js[~np.eye(total, dtype=bool)].min() > 0.01                      # random heads differ
    sentences = similarity.sentences
    assert similarity.n_queries == run.sentences.n_tokens.to_numpy()[sentences].sum() >= 80
    assert not similarity.subsampled and similarity.n_geometry_tokens == similarity.n_queries   # short sentences
    _, _, lo, hi = query_supports(run, sentence_rows(run, sentences))
    assert similarity.n_pairs == (hi - lo).sum() <= similarity.max_pairs == pair_budget(total)
    for first, second in ((0, 1), (0, total - 1), (2, 5), (3, 6)):
        heads = divmod(first, run.n_heads), divmod(second, run.n_heads)
        assert js[first, second] == pytest.approx(direct_js(run, sentences, *heads), abs=1e-9)
        assert cka[first, second] == pytest.approx(direct_cka(run, sentences, *heads), abs=2e-5)
    assert sorted(similarity.order.tolist()) == list(range(total))
    assert similarity.map_xy.shape == (total, 2) and np.isfinite(similarity.map_xy).all()


def test_the_sample_is_whole_sentences_seeded_and_as_small_as_it_can_be(tiny_run):
    run = tiny_run("bert")
    lengths = run.sentences.n_tokens.to_numpy()
    chosen = sample_sentences(run, 50, seed=1)
    assert np.array_equal(chosen, sample_sentences(run, 50, seed=1)) and np.all(np.diff(chosen) > 0)
    assert not np.array_equal(chosen, sample_sentences(run, 50, seed=2))
    order = np.random.default_rng(1).permutation(run.n_sentences)
    taken = order[:len(chosen)]
    assert lengths[taken].sum() >= 50 > lengths[taken[:-1]].sum()          # the last sentence made it reach 50
    assert np.array_equal(sample_sentences(run, 10 ** 9), np.arange(run.n_sentences))


def test_the_pair_budget_bounds_the_attention_array_and_the_js_step():
    assert pair_budget(1024) * 8 * 1024 <= related_sample.ATTENTION_BYTES                # memory
    assert pair_budget(1024) * 1024 * 1023 // 2 <= related_sample.JS_CELLS               # time
    assert pair_budget(72) * 8 * 72 <= related_sample.ATTENTION_BYTES < (pair_budget(72) + 1) * 8 * 72
    assert pair_budget(8, max_attention_bytes=640, max_js_cells=10 ** 9) == 10
    assert pair_budget(8, max_attention_bytes=10 ** 9, max_js_cells=280) == 10 and pair_budget(10 ** 6) == 1


@pytest.mark.parametrize("family", ["bert", "llama", "gemma3"])   # encoder; causal; sliding windows
def test_long_sentences_are_sampled_by_queries_under_the_budget_with_whole_supports(tiny_run, family, monkeypatch):
    run = tiny_run(family)
    total = run.n_layers * run.n_heads
    budget = 2 * int(run.sentences.n_tokens.max())     # two queries fit, 80 queries of whole sentences do not
    shapes = []
    measured = head_similarity.mean_js_distance
    monkeypatch.setattr(head_similarity, "mean_js_distance",
                        lambda attention, *args: shapes.append(attention.shape) or measured(attention, *args))
    similarity = compute_head_similarity(run, max_queries=80, seed=3, max_pairs=budget)
    sample = sample_queries(run, 80, seed=3, max_pairs=budget)
    assert similarity.subsampled and sample.subsampled and shapes == [(total, similarity.n_pairs)]
    assert similarity.n_queries == len(sample.tokens) > 1 and similarity.max_pairs == budget
    # the first queries of a seeded order of all the run's tokens, while their whole supports fit the budget
    order = np.random.default_rng(3).choice(run.n_tokens, size=80, replace=False)
    sentence, position, lo, hi = query_supports(run, order[:len(sample.tokens) + 1])
    sizes = hi - lo
    assert np.array_equal(sample.tokens, np.sort(order[:len(sample.tokens)]))
    assert similarity.n_pairs == sizes[:-1].sum() <= budget < sizes.sum()
    lengths = run.sentences.n_tokens.to_numpy()[sentence]
    assert np.array_equal(hi, position + 1 if run.is_causal else lengths)
    assert np.array_equal(similarity.sentences, np.unique(sentence[:-1]))
    js, cka = similarity.js_distance, similarity.geometry_similarity
    for first, second in ((0, 1), (0, total - 1), (2, 5)):
        heads = divmod(first, run.n_heads), divmod(second, run.n_heads)
        assert js[first, second] == pytest.approx(direct_query_js(run, sample.tokens, *heads), abs=1e-9)
        assert cka[first, second] == pytest.approx(direct_cka(run, None, *heads, rows=sample.tokens), abs=2e-5)
    assert np.array_equal(sample.tokens, sample_queries(run, 80, seed=3, max_pairs=budget).tokens)
    assert not np.array_equal(sample.tokens, sample_queries(run, 80, seed=4, max_pairs=budget).tokens)
    few = sample_queries(run, 3, seed=3, max_pairs=budget)                          # max_queries still holds
    assert few.subsampled and np.array_equal(few.tokens, np.sort(np.random.default_rng(3).choice(
        run.n_tokens, size=3, replace=False)))
    assert len(sample_queries(run, 80, seed=3, max_pairs=1).tokens) == 1            # one query at least


def test_a_sample_within_the_budget_is_whole_sentences_as_before(tiny_run):
    run = tiny_run("llama")
    sentences = sample_sentences(run, 60, seed=2)
    rows = sentence_rows(run, sentences)
    _, _, lo, hi = query_supports(run, rows)
    within = sample_queries(run, 60, seed=2, max_pairs=int((hi - lo).sum()))
    assert not within.subsampled and np.array_equal(within.tokens, rows)
    assert np.array_equal(within.sentences, sentences) and within.n_pairs == (hi - lo).sum()
    assert sample_queries(run, 60, seed=2, max_pairs=int((hi - lo).sum()) - 1).subsampled
    whole = compute_head_similarity(run, max_queries=60, seed=2)
    assert not whole.subsampled and np.array_equal(whole.sentences, sentences) and whole.n_queries == len(rows)
    assert whole.js_distance[0, 3] == pytest.approx(direct_js(run, sentences, (0, 0), (0, 3)), abs=1e-9)


def test_the_clouds_are_bounded_and_the_chunked_cka_equals_one_product(tiny_run, monkeypatch):
    run = tiny_run("llama")
    whole = compute_head_similarity(run, max_queries=60)
    columns = run.n_layers * run.n_heads * run.head_dim
    monkeypatch.setattr(head_similarity, "PRODUCT_CELLS", 1)
    assert np.allclose(compute_head_similarity(run, max_queries=60).geometry_similarity, whole.geometry_similarity,
                       rtol=0, atol=1e-6)
    monkeypatch.setattr(head_similarity, "CLOUD_BYTES", 8 * columns * 25)           # 25 tokens' clouds
    bounded = compute_head_similarity(run, max_queries=60)
    tokens = geometry_sample(sentence_rows(run, bounded.sentences), columns, 0)
    assert bounded.n_geometry_tokens == len(tokens) == 25 < bounded.n_queries
    assert np.array_equal(bounded.js_distance, whole.js_distance)                 # the JS sample is untouched
    assert bounded.geometry_similarity[1, 6] == pytest.approx(direct_cka(run, None, (0, 1), (1, 2), rows=tokens),
                                                              abs=2e-5)


def with_copies(run, directory):
    """A copy of ``run`` (4 query heads on 4 key-value heads) where L0 H1 is L0 H0 rotated by an orthogonal
    matrix (queries and keys alike: the same attention, the same geometry up to rotation) and L1 H2 is L0 H0."""
    copy = directory / "copies"
    shutil.copytree(run.path, copy)
    queries = np.load(copy / "queries.npy", mmap_mode="r+")
    keys = np.load(copy / "keys.npy", mmap_mode="r+")
    rotation = np.linalg.qr(np.random.default_rng(0).normal(size=(run.head_dim, run.head_dim)))[0]
    queries[0, 1], keys[0, 1] = queries[0, 0] @ rotation, keys[0, 0] @ rotation
    queries[1, 2], keys[1, 2] = queries[0, 0], keys[0, 0]
    queries.flush()
    keys.flush()
    reseal(copy)
    return open_stored_run(copy)


def test_identical_heads_are_each_others_closest_and_related_heads_excludes_the_head(tiny_run, tmp_path):
    run = with_copies(tiny_run("bert"), tmp_path)
    similarity = compute_head_similarity(run, max_queries=100)
    js, cka = similarity.js_distance, similarity.geometry_similarity
    assert js[0, 6] == 0 and js[0, 1] == pytest.approx(0, abs=1e-6)        # L1 H2 is flat head 6
    assert cka[0, 6] == pytest.approx(1, abs=1e-6) and cka[0, 1] == pytest.approx(1, abs=1e-6)
    by_attention = related_heads(similarity, 0, 0, k=3)
    assert {(h.layer, h.head) for h in by_attention[:2]} == {(0, 1), (1, 2)} and (0, 0) not in [
        (h.layer, h.head) for h in by_attention]
    assert [h.value for h in by_attention] == sorted(h.value for h in by_attention)
    assert by_attention[2].value == pytest.approx(np.sort(js[0])[3])
    by_geometry = related_heads(similarity, 1, 2, k=10, by="geometry")
    assert len(by_geometry) == 7 and {(h.layer, h.head) for h in by_geometry[:2]} == {(0, 0), (0, 1)}
    assert [h.value for h in by_geometry] == sorted((h.value for h in by_geometry), reverse=True)
    assert (1, 2) not in [(h.layer, h.head) for h in by_geometry]
    assert abs(int(np.flatnonzero(similarity.order == 0)[0]) - int(np.flatnonzero(similarity.order == 6)[0])) <= 2
    with pytest.raises(ValueError):
        related_heads(similarity, 0, 0, by="values")


def test_the_chunked_js_distance_equals_one_chunk(tiny_run, monkeypatch):
    run = tiny_run("llama")
    whole = compute_head_similarity(run, max_queries=60).js_distance
    monkeypatch.setattr(head_similarity, "CHUNK_CELLS", 1)
    assert np.allclose(compute_head_similarity(run, max_queries=60).js_distance, whole, rtol=0, atol=1e-12)


def test_classical_mds_recovers_a_planar_configuration_and_clustering_keeps_groups_together():
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(0, 0.1, (5, 2)), rng.normal(3, 0.1, (5, 2))])[rng.permutation(10)]
    distance = squareform(pdist(points))
    mapped = classical_mds(distance)
    assert np.allclose(squareform(pdist(mapped)), distance, atol=1e-9)
    assert np.array_equal(mapped, classical_mds(distance))                 # no random start
    order = cluster_order(distance)
    group = (points[order, 0] > 1.5).astype(int)
    assert np.count_nonzero(np.diff(group)) == 1                           # the two groups are contiguous


def test_store_and_load_round_trip_and_a_half_written_directory_is_none(tiny_run, tmp_path, caplog):
    run = open_stored_run(shutil.copytree(tiny_run("llama").path, tmp_path / "run"))
    assert load_head_similarity(run) is None
    similarity = compute_head_similarity(run, max_queries=40, seed=5)
    directory = store_head_similarity(run, similarity)
    loaded = load_head_similarity(run)
    for name in ("js_distance", "geometry_similarity", "order", "map_xy", "sentences"):
        assert np.array_equal(getattr(loaded, name), getattr(similarity, name)), name
    assert (loaded.n_queries, loaded.max_queries, loaded.seed) == (similarity.n_queries, 40, 5)
    assert (loaded.n_pairs, loaded.max_pairs, loaded.subsampled, loaded.n_geometry_tokens) == (
        similarity.n_pairs, similarity.max_pairs, False, similarity.n_queries)
    assert sorted(path.name for path in directory.iterdir()) == sorted(
        ["js_distance.npy", "geometry_similarity.npy", "order.npy", "map_xy.npy", "sentences.npy", "related.json"])
    marker = directory / "related.json"
    saved = marker.read_text()
    marker.unlink()                                                        # arrays written, marker not yet
    assert load_head_similarity(run) is None
    marker.write_text(json.dumps(dict(json.loads(saved), schema_version=0)))
    with caplog.at_level(logging.WARNING):
        assert load_head_similarity(run) is None
    assert "qkviz related --run" in caplog.text
    marker.write_text(json.dumps(dict(json.loads(saved), run_fingerprint="another extraction")))
    assert load_head_similarity(run) is None
    older = {key: value for key, value in json.loads(saved).items()                # an older qkviz's marker
             if key not in ("n_pairs", "max_pairs", "queries_subsampled", "n_geometry_tokens")}
    marker.write_text(json.dumps(older))
    old = load_head_similarity(run)
    assert np.array_equal(old.js_distance, similarity.js_distance) and old.n_pairs == similarity.n_pairs
    assert (old.max_pairs, old.subsampled, old.n_geometry_tokens) == (None, False, similarity.n_queries)
    store_head_similarity(run, compute_head_similarity(run, max_queries=40, seed=5, max_pairs=100))
    sampled = load_head_similarity(run)
    assert sampled.subsampled and sampled.max_pairs == 100 and 0 < sampled.n_pairs <= 100
    np.save(directory / "order.npy", np.arange(3))                          # damaged: warned, not read
    assert load_head_similarity(run) is None


def qkviz(*args):
    return run_main(*args)  # qkviz.cli.main in this process: exit status, stdout, stderr


def test_cli_related_stores_and_bad_input_is_one_line(tiny_run, tmp_path):
    copy = shutil.copytree(tiny_run("bert").path, tmp_path / "run")
    result = qkviz("related", "--run", str(copy), "--max-queries", "50")
    assert result.returncode == 0, result.stderr
    assert "closest heads in different layers" in result.stderr and "8 heads over" in result.stderr
    assert "whole sentences" in result.stderr and "query-key pairs" in result.stderr
    assert load_head_similarity(open_stored_run(copy)).max_queries == 50
    for args, fragment in ((["--run", str(copy), "--max-queries", "0"], "argument --max-queries: 0 is out of range"),
                           (["--run", str(tmp_path / "nothing")], "no run at")):
        bad = qkviz("-q", "related", *args)
        lines = [line for line in bad.stderr.splitlines() if line.strip()]
        assert bad.returncode == 2 and len(lines) == 1 and fragment in lines[0], bad.stderr


def test_a_sinks_share_is_one_more_outcome_of_the_js_distance():
    """Heads with sink logits (gpt-oss): each query's keys sum to less than 1, and the mean JS distance counts the
    rest, the sink's share, as one more outcome (scipy's distance on the completed rows as the reference)."""
    rng = np.random.default_rng(0)
    sizes = np.array([1, 3, 5, 2])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows = [[rng.dirichlet(np.ones(size + 1)) for size in sizes] for _ in range(3)]     # keys, then the sink
    attention = np.array([np.concatenate([row[:-1] for row in head]) for head in rows])
    shares = np.array([[row[-1] for row in head] for head in rows])
    found = head_similarity.mean_js_distance(attention, starts, None, shares)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        expected = np.mean([jensenshannon(p, q, base=2) for p, q in zip(rows[a], rows[b])])
        assert found[a, b] == pytest.approx(expected, abs=1e-12)
    assert not np.allclose(head_similarity.mean_js_distance(attention, starts), found)      # the shares count
