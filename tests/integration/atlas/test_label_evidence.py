"""Every label rests on evidence (issue 51, point 5): a positional label needs its offset's support and is never the
first-token sink under another name, a dependency label beats its relation's best fixed-offset baseline, and every
label row says how many queries it rests on. Each against an independent computation: brute force over the run's own
per-sentence attention (``run.attention``), or a count written here."""

from __future__ import annotations

import numpy as np
import pytest

import qkviz
from qkviz.analysis import LabelThresholds
from qkviz.analysis.labels.label_table import LABEL_COLUMNS, as_label_table, corpus_labels, probe_labels
from qkviz.analysis.statistics.head_stats import head_statistics
from qkviz.analysis.statistics.syntax import RELATIONS, BatchSyntax, SyntaxSums
from qkviz.analysis.statistics.uniform_chance import _chance, uniform_chance
from qkviz.core.attention import allowed_pairs

from test_atlas_labels import causal_support
from test_head_stats import previous_token_head, sink_head

POSITIONAL = {"previous-token", "next-token", "self", "fixed-offset", "local"}


def _row(**values):
    base = dict(layer=0, head=0, first_token_attention=0.05, argmax_delimiter=0.0, entropy_normalised=0.3)
    return {**base, **values}


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_offset_support_equals_a_brute_force_count_over_the_runs_attention(tiny_run, family):
    run = tiny_run(family, max_sentences=30)
    max_offset = 8
    for layer, head in [(0, 1), (1, 3)]:
        found = head_statistics(run, layer, head, max_offset=max_offset).offset_support
        rule = run.logit_rule(layer, head)
        queries, rest, weights = (np.zeros(2 * max_offset + 1) for _ in range(3))
        for sentence in range(run.n_sentences):
            attention = run.attention(layer, head, sentence)
            allowed = allowed_pairs(len(attention), rule)
            for number, offset in enumerate(range(-max_offset, max_offset + 1)):
                for query in range(len(attention)):
                    key = query + offset
                    if 0 <= key < len(attention) and allowed[query, key]:
                        queries[number] += 1
                        if key > 0:
                            rest[number] += 1
                            weights[number] += attention[query, key]
        np.testing.assert_array_equal(found[0], queries)
        np.testing.assert_array_equal(found[1], rest)
        np.testing.assert_allclose(found[2], np.where(rest > 0, weights / np.maximum(rest, 1), np.nan), atol=1e-12)
        assert found[0, max_offset] == run.n_tokens            # every query may attend to itself: the head's queries


def test_an_offset_few_queries_have_earns_no_label():
    """One 60-token sequence among forty of 8: offset -50 exists for 10 queries of 380, 9 of them with a key other
    than the first token (2.4%); a head paying 0.9 there (first token left out) earns nothing, however strong, until
    the support asked for is below that share."""
    lengths = {60: 1, 8: 40}
    support = causal_support(lengths, 50, {-50: 0.9})
    chance = _chance((tuple(lengths), tuple(lengths.values())), True, None, None, 50)
    assert support[0, 0] == 10 and support[1, 0] == 9 and support[0, 50] == 380
    assert corpus_labels(_row(), support, chance, LabelThresholds(), causal=True, delimiter_share=0.1) == []
    earned = corpus_labels(_row(), support, chance, LabelThresholds(offset_support=0.02), causal=True,
                           delimiter_share=0.1)
    assert [(row[2], row[8]) for row in earned] == [("fixed-offset", 9)] and earned[0][3].startswith("offset -50")


def test_the_first_token_sink_earns_no_positional_label_under_another_name(tiny_run, tmp_path):
    """A sink head (every query's attention on the first token) puts all its weight at offset -i of query i: the
    relative-position profile is 1 at the longest offsets, which the label once read as a fixed offset. With the first
    token left out it pays nothing at any offset and earns first-token alone."""
    run = tiny_run("llama", max_sentences=30)
    sink = sink_head(run, tmp_path)
    longest = int(run.sentences.n_tokens.max()) - 1          # the longest offset a sequence has
    found = head_statistics(sink, 0, 0, max_offset=longest)
    assert found.relative_position[0] == pytest.approx(1.0)      # the profile alone says "fixed offset" there
    row = _row(first_token_attention=found.values["first_token_attention"])
    chance = uniform_chance(sink, 0, longest)
    labels = corpus_labels(row, found.offset_support, chance, LabelThresholds(), causal=True, delimiter_share=0.1)
    assert {label[2] for label in labels} == {"first-token"}
    # even with no support asked for, no offset has attention once the first token is left out
    unsupported = corpus_labels(row, found.offset_support, chance, LabelThresholds(offset_support=1e-9), causal=True,
                                delimiter_share=0.1)
    assert not {label[2] for label in unsupported} & POSITIONAL


def _relation_row(score: float, baseline: float) -> dict:
    column = "relation_compound_dependent"
    return _row(**{column: score, f"{column}_queries": 50.0, f"{column}_chance": 0.1, f"{column}_baseline": baseline,
                   f"{column}_baseline_offset": 1.0})


def test_a_dependency_label_below_its_relations_fixed_offset_baseline_is_not_earned():
    support = causal_support({10: 5}, 4, {})
    chance = _chance(((10,), (5,)), True, None, None, 4)

    def dependency(score, baseline):
        rows = corpus_labels(_relation_row(score, baseline), support, chance, LabelThresholds(), causal=True,
                             delimiter_share=0.1)
        return [row for row in rows if row[2] == "dependency"]

    assert dependency(0.8, 0.85) == [] and dependency(0.8, 0.8) == []       # it must beat the baseline
    earned = dependency(0.8, 0.6)
    assert len(earned) == 1 and earned[0][8] == 50
    assert earned[0][3] == "compound → head; best fixed-offset baseline 0.60 at word offset +1"


def test_relation_baselines_equal_a_brute_force_count():
    """Random words, head words and relations over padded sentences: each relation and side's share of queries whose
    related word is at the single most common offset in words, counted query by query and word by word."""
    generator = np.random.default_rng(3)
    batch, width = 6, 14
    lengths = generator.integers(5, width + 1, batch)
    valid = np.arange(width)[None, :] < lengths[:, None]
    word = np.where(valid, np.sort(generator.integers(0, 8, (batch, width)), axis=1), -1)
    word[:, 0] = -1                                              # the first token: never a candidate (batch_syntax)
    head_word = np.where(valid, generator.integers(0, 8, (batch, width)), -2)
    relation = np.where(valid, generator.integers(-1, 3, (batch, width)), -1)
    mask = valid[:, :, None] & valid[:, None, :] & np.tril(np.ones((width, width), dtype=bool))[None]
    probs = np.where(mask, generator.random((batch, width, width)), 0.0)
    syntax = BatchSyntax(pos=np.zeros((batch, width), dtype=np.int64), dependency=np.zeros_like(mask), word=word,
                         head_word=head_word, relation=relation)
    sums = SyntaxSums()
    sums.add(probs, mask, syntax)
    found = sums.values()
    checked = 0
    for number in range(3):
        for side in ("dependent", "head"):
            at: dict[int, int] = {}
            asked = 0                           # related words apart by each number of words, once per query
            for b in range(batch):
                for query in range(width):
                    targets = [key for key in range(width) if mask[b, query, key] and word[b, key] >= 0
                               and word[b, query] >= 0 and word[b, key] != word[b, query]
                               and (word[b, key] == head_word[b, query] and relation[b, query] == number
                                    if side == "dependent" else
                                    head_word[b, key] == word[b, query] and relation[b, key] == number)]
                    asked += bool(targets)
                    for apart in {word[b, key] - word[b, query] for key in targets}:
                        at[apart] = at.get(apart, 0) + 1
            column = f"relation_{RELATIONS[number]}_{side}"
            assert found[f"{column}_queries"] == asked
            if asked:
                best = max(at.values())
                assert found[f"{column}_baseline"] == pytest.approx(best / asked)
                assert at[int(found[f"{column}_baseline_offset"])] == best
                checked += 1
    assert checked >= 4


def test_every_label_row_says_how_many_queries_it_rests_on(tiny_run, tmp_path):
    run = previous_token_head(tiny_run("gpt2", max_sentences=30), tmp_path)
    atlas = qkviz.compute_stats(run, progress=False)
    labels = atlas.labels
    assert list(labels.columns[:len(LABEL_COLUMNS)]) == list(LABEL_COLUMNS) and "queries" in LABEL_COLUMNS
    assert labels.queries.notna().all() and (labels.queries > 0).all()
    position = run.tokens.position.to_numpy()
    previous = labels[(labels.layer == 0) & (labels["head"] == 0) & (labels.label == "previous-token")]
    assert previous.queries.tolist() == [int((position >= 2).sum())]    # key at -1 exists and is not the first token
    corpus_wide = labels[labels.label.isin(["first-token", "delimiter", "broad"])]
    assert (corpus_wide.queries == run.n_tokens).all()
    # a tiny random model earns no probe label at the threshold: every head does at a threshold of almost 0
    probes = atlas.probes.set_index(["layer", "head", "probe"]).queries
    on_probe = as_label_table(probe_labels(atlas.probes, LabelThresholds(copying=1e-9)))
    assert len(on_probe) == 2 * run.n_layers * run.n_heads
    assert all(row.queries == probes[(row.layer, row.head, row.label)] > 0 for row in on_probe.itertuples())
    again = qkviz.open_run(run.path).atlas.labels
    assert again.queries.tolist() == labels.queries.tolist()


def test_the_baseline_columns_are_named_and_shown_as_what_they_hold():
    from qkviz.analysis.statistics import describe_statistic, is_share

    assert describe_statistic("relation_det_dependent_baseline") == ("strongest key: its head word (det → head), best "
                                                                     "fixed-offset baseline")
    assert describe_statistic("relation_dobj_head_baseline_offset").endswith("(head → dobj), best fixed offset")
    assert is_share("relation_det_dependent_baseline") and not is_share("relation_det_dependent_baseline_offset")
    assert not is_share("relation_det_dependent_queries") and is_share("relation_det_dependent")
