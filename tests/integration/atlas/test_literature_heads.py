"""Heads the literature named, found by the atlas: GPT-2 small's induction and previous-token heads (Olsson et al. 2022,
Wang et al. 2022) and BERT-base's syntactic heads (Clark et al. 2019), all 0-based.

The weights are not bundled (the model hubs are unreachable here); each test runs where they are in the Hugging Face
cache, or in a directory named by ``QKVIZ_GPT2_SMALL`` / ``QKVIZ_BERT_BASE``, and skips with one line naming them
otherwise. With hub access: ``huggingface-cli download gpt2`` and ``huggingface-cli download bert-base-uncased``, then
``HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/integration/atlas/test_literature_heads.py`` (docs/atlas.md).
"""

from __future__ import annotations

import os

import pytest

import qkviz
from support import REPO

GPT2_INDUCTION = [(5, 1), (5, 5), (6, 9), (7, 2), (7, 10)]
GPT2_PREVIOUS_TOKEN = [(4, 11)]
#: Clark et al.'s heads: the relation and the direction its attention goes, as the label table's detail writes it
BERT_RELATIONS = {(7, 10): "det → head", (7, 9): "head → dobj", (6, 5): "poss → head", (3, 9): "auxpass → head"}
#: held-out text, as for the SmolLM2 labels (data/classics.txt, 0-based lines)
LINES = slice(3300, 3400)


def _weights(repo_id: str, variable: str) -> str:
    """The model's directory or hub id where its weights are here, else a skip naming them."""
    if os.environ.get(variable):
        return os.environ[variable]
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(found, str):
        pytest.skip(f"the {repo_id} weights are not here (no Hugging Face cache entry, no ${variable}); "
                    f"'huggingface-cli download {repo_id}' with hub access runs this test")
    return repo_id


def _corpus() -> list[str]:
    return (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()[LINES]


def _carrying(atlas, label: str) -> set[tuple[int, int]]:
    rows = atlas.labels[atlas.labels.label == label]
    return set(zip(rows.layer.astype(int), rows["head"].astype(int)))


def test_gpt2_small_induction_and_previous_token_heads(tmp_path):
    model = _weights("gpt2", "QKVIZ_GPT2_SMALL")
    run = qkviz.extract(model, _corpus(), tmp_path / "gpt2", max_tokens=3000, progress=False)
    atlas = qkviz.compute_stats(run, progress=False)
    assert set(GPT2_INDUCTION) <= _carrying(atlas, "induction"), sorted(_carrying(atlas, "induction"))
    assert set(GPT2_PREVIOUS_TOKEN) <= _carrying(atlas, "previous-token")
    assert (7, 2) in _carrying(atlas, "first-token")      # 7.2 is both an induction and a first-token head


def test_bert_base_syntactic_heads(tmp_path):
    model = _weights("bert-base-uncased", "QKVIZ_BERT_BASE")
    run = qkviz.extract(model, _corpus(), tmp_path / "bert", max_tokens=3000, progress=False)
    atlas = qkviz.compute_stats(run, syntax=True, progress=False, probes=False)
    dependency = atlas.labels[atlas.labels.label == "dependency"]
    for (layer, head), detail in BERT_RELATIONS.items():
        mine = dependency[(dependency.layer == layer) & (dependency["head"] == head)]
        assert detail in set(mine.detail), (layer, head, detail, list(mine.detail))
