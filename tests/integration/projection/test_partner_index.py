"""Corpus-wide attention partners: exact search on the run's arrays and inverted files against brute force,
approximate recall, what is (not) stored, old index files, bad input."""

import json
import shutil

import numpy as np
import pytest

from qkviz.cli import main
from qkviz.core.errors import QkvizError
from qkviz.neighbours import top_k as top_k_module
from qkviz.neighbours.top_k import MappedVectors, tie_aware_recall, top_products
from qkviz.search.mips_index import build_inverted_lists
from qkviz.search.partner_index import (IndexTarget, PartnerIndexes, layout_neighbours, layout_overlap, head_layout_overlap,
                                        index_targets)
from qkviz.store.run import open_stored_run


def brute_force(run, layer, head, point):
    """``(tokens, logits)`` of every token, best first, by numpy: ``scale * q . k`` over the whole corpus."""
    n = run.n_tokens
    if point < n:
        scores = run.keys(layer, head).astype(np.float64) @ run.queries(layer, head)[point].astype(np.float64)
    else:
        scores = run.queries(layer, head).astype(np.float64) @ run.keys(layer, head)[point - n].astype(np.float64)
    logits = scores * run.scale(layer)
    softcap = run.softcap(layer)
    if softcap is not None:
        logits = np.tanh(logits / softcap) * softcap
    order = np.argsort(-logits, kind="stable")
    return order, logits[order]


def assert_same_top_k(found_tokens, found_logits, expected_tokens, expected_logits):
    """Equal scores, and equal tokens except where scores tie (within float32 rounding)."""
    k = len(found_tokens)
    np.testing.assert_allclose(found_logits, expected_logits[:k], rtol=1e-5, atol=1e-5)
    tied = np.abs(expected_logits - expected_logits[k - 1]) <= 1e-5 * max(1.0, abs(expected_logits[k - 1]))
    clear = ~np.isin(found_tokens, expected_tokens[:k])
    assert not clear.any() or np.isin(found_tokens[clear], expected_tokens[tied]).all()


@pytest.mark.parametrize("family", ["bert", "llama", "gemma3"])
def test_partners_equal_a_brute_force_top_k_of_the_models_logits(tiny_run, family):
    run = tiny_run(family)
    indexes = PartnerIndexes(run)
    rng = np.random.default_rng(0)
    for layer in range(run.n_layers):
        for head in (0, run.n_heads - 1):               # grouped query heads use their key-value head's keys
            for point in rng.choice(2 * run.n_tokens, size=6, replace=False):
                partners = indexes.partners(layer, head, int(point), k=7)
                expected_tokens, expected_logits = brute_force(run, layer, head, int(point))
                assert partners.k == 7 and partners.info.exact
                assert_same_top_k(partners.tokens, partners.logits, expected_tokens, expected_logits)
                offset = run.n_tokens if point < run.n_tokens else 0
                assert np.array_equal(partners.points, partners.tokens + offset)
                assert partners.partner_side == ("key" if point < run.n_tokens else "query")


def test_in_sentence_partner_logits_are_the_attention_the_model_computes(tiny_run):
    """A partner inside the query's own sentence has the logit whose softmax is the head's attention."""
    run = tiny_run("llama")
    indexes = PartnerIndexes(run)
    sentence = 3
    rows = run.sentence_tokens(sentence)
    query = rows.stop - 1                               # the last token may attend to the whole sentence
    partners = indexes.partners(1, 2, query, k=run.n_tokens)
    own = (partners.tokens >= rows.start) & (partners.tokens < rows.stop)
    logits = np.full(rows.stop - rows.start, -np.inf)
    logits[partners.tokens[own] - rows.start] = partners.logits[own]
    weights = np.exp(logits - logits.max())
    np.testing.assert_allclose(weights / weights.sum(), run.attention(1, 2, sentence)[-1], atol=1e-6)


def test_excluded_tokens_are_never_partners(tiny_run):
    run = tiny_run("bert")
    special = run.tokens.is_special.to_numpy()
    partners = PartnerIndexes(run).partners(1, 0, 5, k=10, exclude=special)
    assert partners.k == 10 and not special[partners.tokens].any()
    tokens, logits = brute_force(run, 1, 0, 5)
    keep = ~special[tokens]
    assert_same_top_k(partners.tokens, partners.logits, tokens[keep], logits[keep])


def clustered(n, dim, seed):
    """float32 ``[n, dim]`` points around 40 centres with varied norms (like a head's keys)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, size=(40, dim))
    points = centres[rng.integers(0, 40, n)] + rng.normal(0, 1, size=(n, dim))
    return (points * rng.uniform(0.5, 1.5, size=(n, 1))).astype(np.float32)


def test_approximate_index_reaches_its_recall_target_and_measures_it_truthfully():
    vectors, queries = clustered(20_000, 32, 0), clustered(300, 32, 1)
    index = build_inverted_lists(vectors, queries, target_recall=0.9)
    assert index.info.kind == "ivf" and not index.info.exact
    assert 0.9 <= index.info.recall_at_10 <= 1.0 and 1 <= index.info.nprobe <= index.info.nlist
    # the lists hold every row once, each in the list of its best-scoring centroid, and no vector
    assert np.array_equal(np.sort(index.rows), np.arange(len(vectors))) and index.rows.dtype == np.int32
    first_list = index.rows[index.starts[0]:index.starts[1]]
    assert (np.argmax(vectors[first_list] @ index.centroids.T, axis=1) == 0).all()
    # recall re-measured on other queries of the same distribution agrees with the recorded one
    exact_scores, exact_ids = top_products(queries, vectors, 10)
    recall = tie_aware_recall(index.search(queries, 10)[1], vectors, queries, exact_scores)
    assert abs(recall - index.info.recall_at_10) < 0.08
    assert tie_aware_recall(exact_ids, vectors, queries, exact_scores) == 1.0
    # one probe visits a single list: it must miss partners, which the measure has to show
    assert tie_aware_recall(index.with_nprobe(1).search(queries, 10)[1], vectors, queries, exact_scores) < recall
    # every list probed is exact
    everything = index.with_nprobe(index.info.nlist).search(queries, 10)
    np.testing.assert_allclose(everything[0], exact_scores, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("block_rows", [64, 1000, 5000])
def test_blocked_exact_search_equals_numpy_on_random_data(block_rows):
    vectors, queries = clustered(3_000, 16, 2), clustered(20, 16, 3)
    exclude = np.zeros(len(vectors), dtype=bool)
    exclude[np.random.default_rng(4).choice(len(vectors), 700, replace=False)] = True
    expected = queries.astype(np.float64) @ vectors.astype(np.float64).T
    for excluded in (None, exclude):
        scores, ids = top_products(queries, MappedVectors.of_array(vectors), 5, exclude=excluded, block_rows=block_rows)
        allowed = expected if excluded is None else np.where(excluded, -np.inf, expected)
        np.testing.assert_allclose(scores, np.sort(allowed, axis=1)[:, ::-1][:, :5], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(np.take_along_axis(expected, ids, axis=1), scores, rtol=1e-5, atol=1e-4)
        assert excluded is None or not excluded[ids].any()
    # more than there are: every vector not excluded, best first
    scores, ids = top_products(queries[:2], vectors, 10_000, exclude=exclude, block_rows=block_rows)
    assert ids.shape == (2, 2_300) and sorted(ids[0].tolist()) == np.flatnonzero(~exclude).tolist()
    assert (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_exact_partners_read_the_runs_arrays_in_blocks_and_equal_brute_force(tiny_run, monkeypatch, dtype):
    """A float16 llama run decodes per-position offsets block by block; blocks of 64 rows split the corpus."""
    run = tiny_run("llama", dtype=dtype)
    assert run.n_tokens > 2 * 64
    monkeypatch.setattr(top_k_module, "BLOCK_BYTES", 4 * run.head_dim)      # the smallest block: 64 rows
    reads = []
    original = run.vector_rows
    monkeypatch.setattr(run, "vector_rows", lambda *args: reads.append(args[-1]) or original(*args))
    indexes = PartnerIndexes(run)
    for point in (0, 70, run.n_tokens - 1, run.n_tokens + 3, 2 * run.n_tokens - 1):
        reads.clear()
        partners = indexes.partners(1, 1, point, k=9)
        expected_tokens, expected_logits = brute_force(run, 1, 1, point)
        assert_same_top_k(partners.tokens, partners.logits, expected_tokens, expected_logits)
        blocks = [rows for rows in reads if isinstance(rows, slice) and rows.stop - rows.start > 1]
        assert len(blocks) == -(-run.n_tokens // 64) and max(b.stop - b.start for b in blocks) == 64


def test_index_command_stores_nothing_for_exact_heads_and_deletes_old_index_files(tiny_run, tmp_path, capsys):
    run = open_stored_run(shutil.copytree(tiny_run("llama").path, tmp_path / "run"))
    directory = run.path / "indexes"
    directory.mkdir()
    # an index of the previous qkviz: a faiss flat copy of *other* vectors with its schema-1 sidecar
    import faiss

    target = IndexTarget("keys", 1, run.kv_head(3))
    old = faiss.IndexFlatIP(run.head_dim)
    old.add(np.random.default_rng(0).normal(size=(run.n_tokens, run.head_dim)).astype(np.float32))
    faiss.write_index(old, str(directory / f"{target.stem}.faiss"))
    size = (directory / f"{target.stem}.faiss").stat().st_size
    (directory / f"{target.stem}.json").write_text(json.dumps({
        "schema": 1, "run": run.manifest["fingerprint"], "side": "keys", "layer": 1, "head": target.head, "bytes": size,
        "sha256": "0" * 64, "info": {"kind": "flat", "n_vectors": run.n_tokens, "dim": run.head_dim, "nlist": 0,
                                     "nprobe": 0, "recall_at_10": 1.0, "build_seconds": 0.0}}))
    assert PartnerIndexes(run).stored_info(target) is None                # never read
    for point in (0, 17):
        partners = PartnerIndexes(run).partners(1, 3, point, 5)
        assert partners.info.exact
        assert_same_top_k(partners.tokens, partners.logits, *brute_force(run, 1, 3, point))
    assert main(["index", "--run", str(run.path), "--layers", "1"]) == 0
    assert sorted(path.name for path in directory.iterdir()) == ["tokens.parquet"]      # no copy of any vector
    assert main(["status", "--run", str(run.path)]) == 0
    assert "partner search exact on the stored vectors (no index needed), token index stored" in capsys.readouterr().out


def test_index_command_stores_inverted_files_of_row_numbers_past_the_exact_limit(tiny_run, tmp_path, capsys):
    run = open_stored_run(shutil.copytree(tiny_run("llama").path, tmp_path / "run"))
    limit = run.n_tokens - 1
    assert main(["index", "--run", str(run.path), "--layers", "1", "--exact-limit", str(limit)]) == 0
    targets = index_targets(run, [1], list(range(run.n_heads)))
    assert len(targets) == run.n_kv_heads + run.n_heads
    stored = PartnerIndexes(run, exact_limit=limit)
    for target in targets:
        info = stored.stored_info(target)
        assert info is not None and info.kind == "ivf"
        assert info.recall_at_10 >= 0.95 or info.nprobe == info.nlist
        index_path, _ = stored.paths(target)
        assert index_path.name.endswith(".ivf.npz")
        assert index_path.stat().st_size < run.n_tokens * run.head_dim * 4      # smaller than the vectors
    assert stored.stored_info(IndexTarget("keys", 0, 0)) is None      # layer 0 was not asked for
    assert main(["status", "--run", str(run.path)]) == 0
    needed = run.n_layers * (run.n_heads + run.n_kv_heads)
    assert f"indexed    {len(targets)}/{needed} approximate partner indexes, token index stored" in capsys.readouterr().out
    for point in (0, 17, run.n_tokens + 4):
        partners = stored.partners(1, 3, point, 5)
        assert partners.info.kind == "ivf"
        expected_tokens, expected_logits = brute_force(run, 1, 3, point)
        found = partners.logits
        np.testing.assert_allclose(found, brute_force_logits(run, 1, 3, point, partners.tokens), rtol=1e-5, atol=1e-5)
        assert (np.diff(found) <= 1e-6).all() and found[0] <= expected_logits[0] + 1e-5
    # the default limit (more than the run) still uses the stored index, answering the same
    a, b = stored.partners(1, 3, 17, 5), PartnerIndexes(open_stored_run(run.path)).partners(1, 3, 17, 5)
    assert np.array_equal(a.tokens, b.tokens) and b.info.kind == "ivf"
    # a damaged index file is not read: its sidecar's size no longer matches
    index_path, _ = stored.paths(targets[0])
    index_path.write_bytes(index_path.read_bytes()[:-8])
    assert PartnerIndexes(run).stored_info(targets[0]) is None
    # an index of another run (another fingerprint) is not read either
    sidecar = stored.paths(targets[1])[1]
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "run": "another"}))
    assert PartnerIndexes(run).stored_info(targets[1]) is None
    # building again with the default limit leaves only the token index
    assert main(["index", "--run", str(run.path)]) == 0
    assert sorted(path.name for path in (run.path / "indexes").iterdir()) == ["tokens.parquet"]


def brute_force_logits(run, layer, head, point, tokens):
    """The logits of ``tokens`` as partners of ``point``, by numpy."""
    order, logits = brute_force(run, layer, head, point)
    by_token = np.empty_like(logits)
    by_token[order] = logits
    return by_token[tokens]


def test_bad_requests_get_clear_errors(tiny_run):
    run = tiny_run("bert")
    indexes = PartnerIndexes(run)
    for k in (0, -3, 2.5, None):
        with pytest.raises(QkvizError, match="at least 1"):
            indexes.partners(0, 0, 0, k=k)
    with pytest.raises(QkvizError, match="out of range"):
        indexes.partners(0, 0, 2 * run.n_tokens)
    with pytest.raises(QkvizError, match="out of range"):
        indexes.partners(0, run.n_heads, 0)
    everything = indexes.partners(0, 0, 3, k=run.n_tokens + 50)          # more than the corpus: all of it
    assert everything.k == run.n_tokens and everything.requested_k == run.n_tokens + 50
    assert sorted(everything.tokens.tolist()) == list(range(run.n_tokens))
    too_big = PartnerIndexes(run, exact_limit=run.n_tokens - 1)           # only an approximate index would do
    with pytest.raises(QkvizError, match=f"qkviz index --run {run.path} --layers 1"):
        too_big.partners(1, 0, 0)


def test_index_command_rejects_bad_arguments_in_one_line(tiny_run, capsys):
    run = tiny_run("bert")
    for args, fragment in ((["--exact-limit", "0"], "--exact-limit"), (["--layers", "9"], "--layers 9")):
        assert main(["index", "--run", str(run.path), *args]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and fragment in error[0]
    assert not (run.path / "indexes").exists()                              # nothing written before the check


def test_layout_overlap_counts_the_partners_the_layout_puts_nearest():
    n = 100
    layout = np.random.default_rng(0).uniform(0, 1, size=(2 * n, 2)).astype(np.float32)
    nearest = layout_neighbours(layout, 7, 5)                             # query 7's five nearest keys
    assert (nearest >= n).all() and len(set(nearest.tolist())) == 5
    distances = np.linalg.norm(layout[n:] - layout[7], axis=1)
    assert np.array_equal(nearest - n, np.argsort(distances)[:5])

    class Found:                                                           # the fields layout_overlap reads
        point, k = 7, 5
        points = nearest[:3].tolist() + [int(np.argsort(distances)[-1] + n), int(np.argsort(distances)[-2] + n)]
    overlap = layout_overlap(Found, layout)
    assert overlap.kept == 3 and overlap.share == 0.6 and overlap.chance == 5 / n


def test_head_overlap_is_the_mean_of_the_sampled_points_overlaps(tiny_run):
    run = tiny_run("bert")
    indexes = PartnerIndexes(run)
    layout = np.random.default_rng(0).uniform(size=(2 * run.n_tokens, 2)).astype(np.float32)
    # the layout puts query t exactly on the key of its best partner: that partner is always its nearest key
    best = [int(indexes.partners(1, 1, t, 1).tokens[0]) for t in range(run.n_tokens)]
    layout[:run.n_tokens] = layout[run.n_tokens + np.asarray(best)]
    overlap = head_layout_overlap(indexes, 1, 1, layout, k=1, sample=40, seed=3)
    assert overlap["query"] == 1.0 and overlap["chance"] == 1 / run.n_tokens
    chosen = np.sort(np.random.default_rng(3).choice(run.n_tokens, size=40, replace=False))
    by_hand = np.mean([layout_overlap(indexes.partners(1, 1, int(t) + run.n_tokens, 1), layout).share for t in chosen])
    assert overlap["key"] == pytest.approx(by_hand) and overlap["key"] < 1.0
