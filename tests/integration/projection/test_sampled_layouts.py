"""Layouts of large heads fitted on a stratified sample of tokens, the other points placed on the picture."""

import json

import numpy as np
import pandas as pd
import pytest

import qkviz
from qkviz.projection.sampling import KINDS, MIN_PER_STRATUM, POSITION_BOUNDS, stratified_sample, token_kinds
from qkviz.store.files import CACHE_DIRECTORY
from support.cli import one_line_error, run_main

#: a quick schedule: what is tested is where points go, not how polished the picture is
QUICK = {"early_exaggeration_iter": 50, "n_iter": 50}


@pytest.fixture(scope="module")
def sampled_run(tiny_model, tiny_corpus, tmp_path_factory):
    return qkviz.extract(str(tiny_model("llama")), tiny_corpus, tmp_path_factory.mktemp("sampled") / "run",
                         max_sentences=40)


def table(sentences: list[list[tuple[str, int, int]]], special_ends: bool = True) -> pd.DataFrame:
    """A token table of ``(text, char_start, char_end)`` tokens per sentence, with [CLS] / [SEP] around each."""
    rows = []
    for number, tokens in enumerate(sentences):
        tokens = ([("[CLS]", -1, -1)] + tokens + [("[SEP]", -1, -1)]) if special_ends else tokens
        for position, (text, start, end) in enumerate(tokens):
            rows.append({"sentence": number, "position": position, "token": text, "char_start": start,
                         "char_end": end, "is_special": start < 0})
    return pd.DataFrame(rows)


def test_token_kinds_tell_specials_punctuation_words_and_pieces():
    tokens = table([[("Play", 0, 4), ("ing", 4, 7), ("now", 8, 11), (",", 11, 12), ("—", 13, 14), ("ok", 15, 17)]])
    kinds = [KINDS[kind] for kind in token_kinds(tokens)]
    assert kinds == ["special", "word", "word piece", "word", "punctuation", "punctuation", "word", "special"]


def test_a_stratified_sample_has_its_size_and_every_stratum():
    rng = np.random.default_rng(1)
    sentences = []
    for _ in range(300):
        length = int(rng.integers(3, 140))
        sentences.append([("w", 2 * i, 2 * i + 1) if i % 9 else (".", 2 * i, 2 * i + 1) for i in range(length)])
    tokens = table(sentences)
    chosen = stratified_sample(tokens, 2000, seed=3)
    assert len(chosen) == 2000 and np.all(np.diff(chosen) > 0)
    buckets = np.searchsorted(POSITION_BOUNDS, tokens.position.to_numpy(), side="right") - 1
    strata = buckets * len(KINDS) + token_kinds(tokens)
    counts = pd.Series(strata).value_counts()
    taken = pd.Series(strata[chosen]).value_counts()
    for stratum, count in counts.items():   # every stratum, rare ones (first tokens, position 128+) included
        assert taken.get(stratum, 0) >= min(count, MIN_PER_STRATUM), stratum
    big = counts.idxmax()                   # and the common ones in proportion
    assert abs(taken[big] / 2000 - counts[big] / len(tokens)) < 0.02
    assert np.array_equal(chosen, stratified_sample(tokens, 2000, seed=3))
    assert not np.array_equal(chosen, stratified_sample(tokens, 2000, seed=4))
    assert np.array_equal(stratified_sample(tokens, 0), np.arange(len(tokens)))
    assert np.array_equal(stratified_sample(tokens, 10 ** 6), np.arange(len(tokens)))


@pytest.mark.parametrize("method", ["attn-tsne", "tsne", "attn-umap"])
def test_sampled_layouts_fit_the_sample_and_place_the_rest_near_their_partners(sampled_run, method):
    run, layer, head = sampled_run, 1, 2
    n, sample = run.n_tokens, run.n_tokens // 3
    params = {"sample": sample, **(QUICK if "tsne" in method else {"n_epochs": 100})}
    summary = qkviz.project(run, [method], [2], layers=[layer], heads=[head], params={method: params},
                            progress=False)
    assert summary.computed == 1 and not summary.failed
    layout = run.projection(layer, head, method, 2, **params)
    assert layout.shape == (2 * n, 2) and np.isfinite(layout).all()
    entry = next(path for path in (run.path / CACHE_DIRECTORY).glob("*.json")
                 if json.loads(path.read_text())["spec"]["method"] == method)
    assert json.loads(entry.read_text())["details"]["fitted_tokens"] == sample
    # the placed points are spread over the picture, not piled on one spot
    chosen = stratified_sample(run.tokens, sample, seed=0)
    placed = np.setdiff1d(np.arange(n), chosen)
    assert len(np.unique(layout[placed].round(3), axis=0)) > 0.9 * len(placed)
    if method.startswith("attn"):
        # near still means attention: the placed queries' nearest keys are their strongest partners far more
        # often than by chance
        queries, keys = run.queries(layer, head)[placed], run.keys(layer, head)
        strongest = np.argsort(-(queries @ keys.T), axis=1)[:, :5]
        distances = ((layout[placed][:, None, :] - layout[n:][None, :, :]) ** 2).sum(axis=2)
        nearest = np.argsort(distances, axis=1)[:, :5]
        kept = np.mean([len(np.intersect1d(a, b)) / 5 for a, b in zip(strongest, nearest)])
        assert kept > 5 * (5 / n), kept

def test_a_sample_larger_than_the_run_is_a_one_line_error(sampled_run):
    result = run_main("project", "--run", str(sampled_run.path), "--method", "attn-tsne", "--layers", "0",
                      "--heads", "0", "--sample", str(sampled_run.n_tokens + 1))
    assert result.returncode == 2
    one_line_error(result, f"a sample of {sampled_run.n_tokens + 1} tokens", "ask for at most")
    assert run_main("project", "--run", str(sampled_run.path), "--sample", "-1").returncode == 2


def test_polishing_a_sampled_attention_layout_brings_tokens_to_their_partners(sampled_run):
    """The fitted sample spread over the whole head's attention graph, before and after the polish on it."""
    from qkviz.core.alignment import Alignment, align_head
    from qkviz.neighbours import partner_recall
    from qkviz.projection.attention_graph import attention_graph
    from qkviz.projection import project_points
    from qkviz.projection.sampling import polish_tsne, sample_points, spread_over_graph

    run, layer, head = sampled_run, 1, 2
    queries, keys, n = run.queries(layer, head), run.keys(layer, head), sampled_run.n_tokens
    aligned = align_head(queries, keys, Alignment()).points
    chosen = stratified_sample(run.tokens, n // 3, seed=0)
    fitted_points = sample_points(chosen, n)
    sample_graph = attention_graph(queries[chosen], keys[chosen], aligned[fitted_points], run.logit_rule(layer, head))
    fitted = project_points(aligned[fitted_points], "attn-tsne", 2, seed=0, attention=sample_graph,
                            **QUICK).coordinates
    graph = attention_graph(queries, keys, aligned, run.logit_rule(layer, head), approximate=True)
    start = spread_over_graph(graph.matrix, fitted, fitted_points)
    assert np.array_equal(start[fitted_points], fitted)                 # the fitted points stay where they are
    assert len(np.unique(start.round(4), axis=0)) > 0.9 * 2 * n          # and the others do not pile up
    polished = polish_tsne(start, graph, seed=0)
    assert polished.shape == start.shape and np.isfinite(polished).all()
    before, after = (partner_recall(queries, keys, run.logit_rule(layer, head), layout, k=5, sample=None)
                     for layout in (start, polished))
    assert after["query"] + after["key"] > 1.2 * (before["query"] + before["key"]), (before, after)


def test_spreading_over_the_graph_puts_a_point_at_its_neighbours_weighted_mean():
    """A chain 0 - 1 - 2 - 3 with 0 and 3 fitted: 1 and 2 settle at a third and two thirds of the way."""
    import scipy.sparse as sp

    from qkviz.projection.sampling import spread_over_graph

    chain = sp.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]], dtype=float))
    spread = spread_over_graph(chain, np.array([[0.0, 0.0], [3.0, 6.0]]), np.array([0, 3]), rounds=200)
    np.testing.assert_allclose(spread, [[0, 0], [1, 2], [2, 4], [3, 6]], atol=1e-6)
    lonely = sp.csr_matrix((3, 3))                                        # no neighbours: the fitted points' centre
    np.testing.assert_allclose(spread_over_graph(lonely, np.array([[0.0, 0.0], [2.0, 4.0]]), np.array([0, 1]))[2],
                               [1, 2])
