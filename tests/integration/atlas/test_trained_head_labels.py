"""The atlas's labels on the trained SmolLM2 against independent measurements of the model's own attention
(issue 38's "done when").

The text is held out: 40 lines of data/classics.txt chosen by their line numbers (0-based 3000-3039) before any result
was seen; nothing of qkviz was tuned on them. The independent probes do not go through qkviz's capture: the model's
own eager attention (``output_attentions``) on repeated random tokens drawn with another seed from another range of the
vocabulary (induction), and on the held-out text itself (previous token).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import qkviz
from qkviz.probes import run_model
from support import REPO

LINES = slice(3000, 3040)
#: the independent induction probe: sequences of HALF random ids written twice, its own seed and vocabulary range
SEQUENCES, HALF, SEED, ID_RANGE = 6, 40, 1234, (2000, 40000)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    lines = (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()[LINES]
    run = qkviz.extract("smollm2", lines, tmp_path_factory.mktemp("labels") / "run", progress=False)
    atlas = qkviz.compute_stats(run, progress=False, ablate=True)
    return run, atlas


def _eager_attentions(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """The model's own attention probabilities per layer, ``[batch, head, query, key]``, from its eager code."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            return [layer.double() for layer in model(input_ids=ids, output_attentions=True).attentions]
    finally:
        model.set_attn_implementation(previous)


def _independent_induction(model) -> np.ndarray:
    """``[layer, head]`` mean attention from each second-copy token to the token after its first occurrence."""
    generator = torch.Generator().manual_seed(SEED)
    half = torch.stack([torch.randperm(ID_RANGE[1] - ID_RANGE[0], generator=generator)[:HALF] + ID_RANGE[0]
                        for _ in range(SEQUENCES)])
    attentions = _eager_attentions(model, torch.cat([half, half], dim=1))
    queries = torch.arange(HALF, 2 * HALF)
    return np.array([[float(layer[:, head, queries, queries - HALF + 1].mean()) for head in range(layer.shape[1])]
                     for layer in attentions])


def _independent_previous_token(model, run) -> np.ndarray:
    """``[layer, head]`` mean attention to the token before, over the held-out sentences (every query but the first)."""
    totals, count = None, 0
    for sentence in range(run.n_sentences):
        ids = torch.as_tensor(np.array(run.tokens.token_id.to_numpy()[run.sentence_tokens(sentence)]))[None]
        attentions = _eager_attentions(model, ids)
        n = ids.shape[1]
        sums = np.array([[float(layer[0, head, torch.arange(1, n), torch.arange(n - 1)].sum())
                          for head in range(layer.shape[1])] for layer in attentions])
        totals = sums if totals is None else totals + sums
        count += n - 1
    return totals / count


def _carrying(atlas, label: str) -> set[tuple[int, int]]:
    rows = atlas.labels[atlas.labels.label == label]
    return set(zip(rows.layer.astype(int), rows["head"].astype(int)))


def test_the_strongest_induction_heads_are_labelled_and_no_weak_head_is(labelled):
    run, atlas = labelled
    scores = _independent_induction(run_model(run))
    ranked = [tuple(int(i) for i in np.unravel_index(flat, scores.shape)) for flat in np.argsort(-scores, axis=None)]
    induction = _carrying(atlas, "induction")
    assert set(ranked[:5]) <= induction, (ranked[:5], sorted(induction))
    weak = {head for head in induction if scores[head] < 0.1}
    assert not weak, {head: scores[head] for head in weak}
    assert scores[ranked[0]] > 0.5                          # the probe finds real induction heads (0.6-0.9 in the issue)
    assert "repeated random tokens" in atlas.probe_note


def test_the_strongest_previous_token_heads_are_labelled(labelled):
    run, atlas = labelled
    scores = _independent_previous_token(run_model(run), run)
    ranked = [tuple(int(i) for i in np.unravel_index(flat, scores.shape)) for flat in np.argsort(-scores, axis=None)]
    assert set(ranked[:3]) <= _carrying(atlas, "previous-token"), (ranked[:3], scores[tuple(zip(*ranked[:3]))])


def test_labels_carry_their_evidence_and_the_strongest_label_is_not_only_sinks(labelled):
    _, atlas = labelled
    labels = atlas.labels
    assert list(labels.columns) == ["layer", "head", "label", "detail", "score", "chance", "threshold", "probe",
                                    "queries", "ablation_change", "ablation_measure"]
    assert (labels.queries >= 20).all()                     # every label rests on queries, and says how many
    assert (labels.score >= labels.threshold).all()
    assert (labels.chance < labels.score)[labels.label != "broad"].all()     # broad's chance (1) is its ceiling
    first = labels[labels.label == "first-token"]
    assert (first.threshold == 0.3).all() and first.detail.str.contains("Gu et al. 2025").all()
    # a head that is both an induction head and a sink is named for what it does
    both = _carrying(atlas, "induction") & _carrying(atlas, "first-token")
    table = atlas.table.set_index(["layer", "head"])
    assert all(table.loc[head, "label"] != "first-token" for head in both)
    assert atlas.table.label.value_counts().get("first-token", 0) < len(atlas.table) * 0.8


def test_ablation_confirms_the_induction_labels_on_their_probe(labelled):
    """--ablate: removing the strongest labelled induction head raises the loss on the probe's second copy by far the
    most; on average the labelled induction heads raise it (a single weak one may lower it: others take over)."""
    run, atlas = labelled
    labels = atlas.labels
    checked = labels[labels.label.isin(["induction", "previous-token"])]
    assert checked.ablation_change.notna().all() and labels[~labels.index.isin(checked.index)].ablation_change.isna().all()
    on_probe = checked[checked.probe.str.startswith("repeated random tokens")].sort_values("score", ascending=False)
    assert on_probe.ablation_measure.str.contains("next-token loss change on the probe's second copy").all()
    strongest = on_probe.iloc[0]
    assert strongest.ablation_change > 0.5, on_probe[["layer", "head", "score", "ablation_change"]]
    assert strongest.ablation_change == on_probe.ablation_change.max() and on_probe.ablation_change.mean() > 0.1


def test_what_heads_write_the_copying_labels_rest_on_their_writes_and_the_control_earns_none(labelled):
    """The copying probe (qkviz.probes.writing_probe) on the same atlas: the shuffled-target control earns no head;
    every head labelled copying raises the attended tokens' own logits, every suppressing head lowers them; and the
    strongest induction head, by the independent probe, writes what it attends far above chance with a positive
    raise. (It is not labelled copying: its score, 0.17 when the threshold was set, is under the 0.3 set from chance
    before any head was looked at; its writes are amplified by later heads rather than reaching the logits alone.)"""
    from qkviz.analysis.labels import writing_labels

    run, atlas = labelled
    assert atlas.writes_note.startswith("repeated random tokens"), atlas.writes_note
    scores = atlas.probes.pivot_table(index=["layer", "head"], columns="probe", values="score")
    chance = float(atlas.probes[atlas.probes.probe == "copying"].chance.iloc[0])
    assert writing_labels(atlas.probes, atlas.thresholds, control=True) == []
    copying, suppressing = _carrying(atlas, "copying"), _carrying(atlas, "suppression")
    assert copying, "a trained model has heads that copy"
    assert all(scores.loc[head, "attended-logit-raise"] > 0 for head in copying)
    assert all(scores.loc[head, "attended-logit-raise"] < 0 for head in suppressing)
    induction = np.unravel_index(int(np.argmax(_independent_induction(run_model(run)))), (run.n_layers, run.n_heads))
    induction = tuple(int(i) for i in induction)
    assert scores.loc[induction, "copying"] >= 10 * chance and scores.loc[induction, "attended-logit-raise"] > 0, \
        scores.loc[induction]
