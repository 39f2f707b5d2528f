"""The label table: each label against an independent computation (brute force over the run's own attention, the
model's eager attention), on synthetic heads whose answers are known and on tiny random models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import qkviz
from qkviz.analysis import LabelThresholds
from qkviz.analysis.statistics.attention_batches import batch_mask, head_attention, sentence_batches
from qkviz.analysis.statistics.induction_scores import RepeatSums, RepeatTargets, duplicate_targets, induction_targets
from qkviz.analysis.labels.label_table import corpus_labels, strongest_labels
from qkviz.analysis.statistics.syntax import RELATIONS, BatchSyntax, SyntaxSums
from qkviz.analysis.statistics.uniform_chance import _chance
from qkviz.core.attention import allowed_pairs
from qkviz.core.logit_rule import LogitRule
from qkviz.cli import main
from qkviz.probes.repeat_probe import PROBES, RepeatedTokens, probe_scores
from qkviz.probes.writing_probe import CopyingSettings, corpus_repeats
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from test_head_stats import previous_token_head


@pytest.mark.parametrize("causal, window", [(True, None), (False, None), (True, 3), (False, 2)])
def test_uniform_chance_equals_a_brute_force_uniform_head(causal, window):
    lengths = {4: 3, 7: 1, 1: 2}
    max_offset = 5
    found = _chance((tuple(lengths), tuple(lengths.values())), causal, window, None, max_offset)
    rule = LogitRule(scale=1.0, causal=causal, window=window)
    at = {o: [] for o in range(-max_offset, max_offset + 1)}
    rest = {o: [] for o in at}                  # the same with the first token left out
    first, one = [], []
    for length, number in lengths.items():
        allowed = allowed_pairs(length, rule)
        uniform = allowed / allowed.sum(axis=1, keepdims=True)
        for _ in range(number):
            for i in range(length):
                first.append(uniform[i, 0])
                one.append(1 / allowed[i].sum())
                for o in at:
                    if 0 <= i + o < length and allowed[i, i + o]:
                        at[o].append(uniform[i, i + o])
                        if i + o > 0:
                            rest[o].append(uniform[i, i + o])
    expected = np.array([np.mean(at[o]) if at[o] else np.nan for o in at])
    np.testing.assert_allclose(found.offsets, expected, atol=1e-12)
    expected_rest = np.array([np.mean(rest[o]) if rest[o] else np.nan for o in rest])
    np.testing.assert_allclose(found.offsets_no_first, expected_rest, atol=1e-12)
    assert found.first_token == pytest.approx(np.mean(first)) and found.one_key == pytest.approx(np.mean(one))


def _row(**values):
    base = dict(layer=2, head=1, first_token_attention=0.05, argmax_delimiter=0.0, entropy_normalised=0.3)
    return {**base, **values}


def causal_support(lengths: dict[int, int], max_offset: int, attention: dict[int, float]) -> np.ndarray:
    """``[3, offset]`` offset support (head_stats.OFFSET_SUPPORT_ROWS) of a causal head over sentences of ``lengths``
    (length: how many) paying ``attention[o]`` at offset ``o`` to every key other than the first token."""
    offsets = np.arange(-max_offset, max_offset + 1)
    queries = np.array([sum(n * max(length - abs(o), 0) for length, n in lengths.items()) if o <= 0 else 0
                        for o in offsets], dtype=float)
    rest = queries - np.array([sum(n for length, n in lengths.items() if length > -o) if o <= 0 else 0 for o in offsets])
    mean = np.array([attention.get(int(o), 0.0) if r > 0 else np.nan for o, r in zip(offsets, rest)])
    return np.stack([queries, rest, mean])


def test_corpus_labels_follow_scores_chance_and_thresholds():
    support = causal_support({10: 5}, 4, {-1: 0.7, -3: 0.45})
    chance = _chance(((10,), (5,)), True, None, None, 4)
    rows = corpus_labels(_row(first_token_attention=0.35), support, chance, LabelThresholds(), causal=True,
                         delimiter_share=0.2)
    labels = {row[2]: row for row in rows}
    assert set(labels) == {"previous-token", "fixed-offset", "first-token"}
    assert labels["fixed-offset"][3].startswith("offset -3") and labels["previous-token"][4] == pytest.approx(0.7)
    assert labels["first-token"][6] == 0.3 and labels["first-token"][5] > 0.175 and "Gu et al. 2025" in labels["first-token"][3]
    # the queries each rests on: those whose key at the offset is not the first token; every query for first-token
    assert labels["previous-token"][8] == 5 * 8 and labels["fixed-offset"][8] == 5 * 6 and labels["first-token"][8] == 50
    # a uniform head's own scores never earn a label over twice its chance (the first token's, Gu et al.'s rule, is
    # under its 0.3)
    uniform = causal_support({10: 5}, 4, dict(zip(range(-4, 5), np.nan_to_num(chance.offsets_no_first))))
    uniform_rows = corpus_labels(_row(first_token_attention=chance.first_token), uniform, chance,
                                 LabelThresholds(position_mass=0.01, local_mass=0.01), causal=True,
                                 delimiter_share=0.2)
    assert uniform_rows == []
    assert corpus_labels(_row(), support, chance, LabelThresholds(position_mass=0.8), causal=True,
                         delimiter_share=0.2) == []


def test_the_strongest_label_names_what_a_head_does_before_where_it_rests():
    labels = pd.DataFrame([(0, 0, "first-token", "", 0.95, 0.1, 0.3, "corpus", 400),
                           (0, 0, "induction", "", 0.5, 0.01, 0.3, "probe", 392),
                           (0, 1, "first-token", "", 0.9, 0.1, 0.3, "corpus", 400),
                           (0, 1, "broad", "", 0.85, 1.0, 0.8, "corpus", 400),
                           (1, 0, "previous-token", "", 0.5, 0.1, 0.4, "corpus", 370),
                           (1, 0, "induction", "", 0.9, 0.01, 0.3, "probe", 392)],
                          columns=["layer", "head", "label", "detail", "score", "chance", "threshold", "probe",
                                   "queries"])
    found = strongest_labels(labels, [(0, 0), (0, 1), (1, 0), (1, 1)])
    assert [found[head][0] for head in [(0, 0), (0, 1), (1, 0), (1, 1)]] == ["induction", "first-token", "induction",
                                                                             "content"]
    assert found[(1, 0)][1].endswith("; probe; 392 queries)")         # the strongest label says what it rests on


@pytest.mark.parametrize("family", ["llama", "bert", "mistral"])
@pytest.mark.parametrize("shared", [False, True])
def test_corpus_repeats_equal_brute_force_over_the_runs_attention(tiny_run, family, shared):
    """``shared``: the uniform head's score is computed for the first head of a mask and reused by the next ones."""
    run = tiny_run(family, max_sentences=30)
    batches = sentence_batches(run, max_cells=3000)
    targets = RepeatTargets.of(run, batches)
    ids, special = run.tokens.token_id.to_numpy(), run.tokens.is_special.to_numpy(bool)
    for layer, head in [(0, 0), (1, 3), (1, 1)]:
        rule = run.logit_rule(layer, head)
        sums = RepeatSums(targets, (rule.causal, rule.window, rule.chunk) if shared else None)
        for number, (batch, probs) in enumerate(head_attention(run, layer, head, batches)):
            sums.add(number, probs, batch_mask(batch, run.logit_rule(layer, head)))
        found = sums.values()
        for kind, finder in (("induction", induction_targets), ("duplicate_token", duplicate_targets)):
            scores, chances = [], []
            for sentence in range(run.n_sentences):
                rows = run.sentence_tokens(sentence)
                attention = run.attention(layer, head, sentence)
                allowed = allowed_pairs(len(attention), run.logit_rule(layer, head))
                for query, keys in finder(ids[rows]):
                    if not special[rows.start + query]:
                        scores.append(attention[query, keys].sum())
                        chances.append(allowed[query, keys].sum() / allowed[query].sum())
            assert found[f"corpus_{kind}_queries"] == len(scores) > 0
            assert found[f"corpus_{kind}"] == pytest.approx(np.mean(scores), abs=1e-12)
            assert found[f"corpus_{kind}_chance"] == pytest.approx(np.mean(chances), abs=1e-12)


def test_dependency_relations_on_a_hand_made_sentence():
    det, nsubj = RELATIONS.index("det"), RELATIONS.index("nsubj")
    # tokens: 0 [CLS] (no word), 1 "The" (det -> 2), 2 "cat" (nsubj -> 3), 3 "sat" (root), 4 "." (punct -> 3)
    word = np.array([[-1, 0, 1, 2, 3]])
    head_word = np.array([[-1, 1, 2, 2, 2]])
    relation = np.array([[-1, det, nsubj, -1, -1]])
    probs = np.full((1, 5, 5), 0.01)
    probs[0, 1, 2] = 0.9                 # "The" -> its head "cat": a det -> head hit
    probs[0, 2, 0] = 0.9                 # "cat" -> [CLS] (not a candidate), then "The": not its head "sat"
    probs[0, 2, 1] = 0.5                 # ... a head -> det hit
    probs[0, 3, 2] = 0.9                 # "sat" -> its nsubj "cat": a head -> nsubj hit
    mask = np.ones((1, 5, 5), dtype=bool)
    syntax = BatchSyntax(pos=np.zeros((1, 5), dtype=np.int64), dependency=np.zeros((1, 5, 5), dtype=bool),
                         word=word, head_word=head_word, relation=relation)
    sums = SyntaxSums()
    sums.add(probs, mask, syntax)
    found = sums.values()
    assert found["relation_det_dependent"] == 1.0 and found["relation_det_dependent_queries"] == 1
    assert found["relation_det_dependent_chance"] == pytest.approx(1 / 3)      # "cat" of "cat", "sat", "."
    assert found["relation_nsubj_dependent"] == 0.0 and found["relation_nsubj_dependent_queries"] == 1
    assert found["relation_nsubj_head"] == 1.0 and found["relation_det_head"] == 1.0    # "cat" -> its det "The"
    assert np.isnan(found["relation_dobj_dependent"]) and found["relation_dobj_dependent_queries"] == 0


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_the_probe_equals_the_models_own_eager_attention(tiny_model, family):
    directory = tiny_model(family)
    loader = AutoModelForCausalLM if family == "llama" else AutoModel
    model = loader.from_pretrained(directory, attn_implementation="eager").eval()
    probe = RepeatedTokens.draw(np.arange(5, 90), 3, 12, seed=7, prefix=[1])
    found = probe_scores(model, probe)
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        attentions = model(input_ids=torch.as_tensor(probe.ids), output_attentions=True).attentions
    causal = family == "llama"
    for name in PROBES:
        rows, columns = probe.targets(name, causal)
        expected = np.array([[float(layer[:, head, rows, columns].double().mean()) for head in range(layer.shape[1])]
                             for layer in attentions])
        np.testing.assert_allclose(found[name], expected, atol=1e-5)
    assert len(probe.targets("induction", True)[0]) == 12 and (probe.ids[:, 1:13] == probe.ids[:, 13:25]).all()


def test_stats_labels_a_synthetic_previous_token_head_and_records_the_probe(tiny_run, tmp_path):
    run = previous_token_head(tiny_run("gpt2", max_sentences=30), tmp_path)
    atlas = qkviz.compute_stats(run, progress=False)
    mine = atlas.labels_of(0, 0)
    assert mine.label.iloc[0] == "previous-token" and mine.score.iloc[0] == pytest.approx(1.0, abs=1e-6)
    assert atlas.table.set_index(["layer", "head"]).loc[(0, 0), "label"] == "previous-token"
    assert "repeated random tokens" in atlas.probe_note and atlas.probes is not None
    attention_probes = atlas.probes[atlas.probes.probe.isin(PROBES)]
    assert set(attention_probes.probe) == set(PROBES) and len(attention_probes) == 3 * run.n_layers * run.n_heads
    # its model was saved with its language-model head: the copying probe ran too, one row per head and measure
    assert atlas.writes_note.startswith("repeated random tokens"), atlas.writes_note
    writing = atlas.probes[~atlas.probes.probe.isin(PROBES)]
    measures = {"copying", "suppression", "copying-shuffled", "suppression-shuffled", "attended-logit-raise"}
    corpus = {"copying-corpus", "suppression-corpus", "copying-corpus-shuffled", "suppression-corpus-shuffled",
              "attended-logit-raise-corpus"} if corpus_repeats(run, CopyingSettings()) else set()
    assert set(writing.probe) == measures | {"copying-weights-only"} | corpus
    assert len(writing) == (6 + len(corpus)) * run.n_layers * run.n_heads
    again = qkviz.open_run(run.path).atlas
    pd.testing.assert_frame_equal(again.labels, atlas.labels)
    assert main(["-q", "stats", "--no-probes", "--run", str(run.path)]) == 0
    without = qkviz.open_run(run.path).atlas
    assert without.probes is None and without.probe_note.startswith("not run") and without.writes_note.startswith("not run")
    assert not without.labels.probe.str.startswith("repeated").any()


def test_a_run_of_a_model_in_memory_is_labelled_from_the_corpus_with_a_warning(tiny_model, tiny_corpus, tmp_path,
                                                                                caplog):
    model = AutoModel.from_pretrained(tiny_model("llama"))

    tokenizer = AutoTokenizer.from_pretrained(tiny_model("llama"))
    run = qkviz.extract(model, tiny_corpus, tmp_path / "run", tokenizer=tokenizer, max_sentences=6, progress=False)
    atlas = qkviz.compute_stats(run, progress=False)
    assert atlas.probes is None and "pass it as model=" in atlas.probe_note
    assert any("did not run" in record.getMessage() for record in caplog.records)
    assert qkviz.compute_stats(run, progress=False, model=model).probes is not None
