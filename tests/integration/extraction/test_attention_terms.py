"""The terms a run stores beside its vectors (gpt-oss's sink logits, Llama 4's chunks, BLOOM's and MPT's ALiBi
slopes) reach every recomputation of attention, not only ``Run.attention``: the corpus batches of the statistics,
the document view's blocks and the related-heads sample each give the model's own eager attention, on tiny random
models of those families."""

import numpy as np
import pytest
import torch
from support import CORPUS
from support.family_configs import tiny_family_model
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz.analysis.statistics.attention_batches import batch_attention, sentence_batches
from qkviz.analysis.documents.document_attention import attention_blocks, document_head, pixel_edges
from qkviz.analysis.atlas.related_sample import block_attention, query_blocks, sentence_token_numbers

TOLERANCE = 1e-5
SENTENCES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:4]
CHECKED = [0, 1, 2]


@pytest.fixture(scope="module", params=["gpt_oss", "llama4_text", "bloom", "mpt"])
def family_run(request, tmp_path_factory):
    """``(run, theirs)``: a run of the family's tiny model and the model's own eager attention of every layer,
    ``theirs[layer][sentence]`` ``[head, query, key]`` for the sentences :data:`CHECKED`, each alone."""
    tokenizer = decoder_tokenizer(CORPUS.read_text(encoding="utf-8").splitlines())
    model = tiny_family_model(request.param)
    run = qkviz.extract(model, SENTENCES, tmp_path_factory.mktemp(request.param) / "run", tokenizer=tokenizer,
                        progress=False)
    model.set_attn_implementation("eager")
    theirs: list[dict[int, np.ndarray]] = [{} for _ in range(run.n_layers)]
    for sentence in CHECKED:
        ids = torch.from_numpy(run.tokens.token_id.to_numpy()[run.sentence_tokens(sentence)].astype(np.int64))[None]
        with torch.no_grad():
            attentions = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True).attentions
        for layer, weights in enumerate(attentions):
            theirs[layer][sentence] = weights[0].double().numpy()
    return run, theirs


def test_the_run_holds_the_families_term(family_run):
    run, _ = family_run
    rules = [run.logit_rule(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)]
    terms = {"gpt_oss": "sinks", "llama4_text": "chunks", "bloom": "alibi_slopes", "mpt": "alibi_slopes"}
    assert set(run.manifest["attention"]) & {"sinks", "chunks", "alibi_slopes"} == {terms[run.family]}
    if run.family == "gpt_oss":
        assert all(rule.sink is not None for rule in rules) and len({rule.sink for rule in rules}) == len(rules)
        assert run.manifest["attention"]["sinks"][1][2] == rules[run.n_heads + 2].sink
    elif run.family == "llama4_text":
        assert [run.chunk(layer) for layer in range(run.n_layers)] == [8, None]
    else:       # the geometric ALiBi slopes of 4 heads, the same in every layer (BLOOM and MPT agree on them)
        assert [rule.alibi_slope for rule in rules] == [0.25, 0.0625, 0.015625, 0.00390625] * run.n_layers


def test_run_attention_and_the_statistics_batches_are_the_models(family_run):
    run, theirs = family_run
    batches = sentence_batches(run, max_cells=2_000, sentences=np.array(CHECKED))
    assert len(batches) > 1                  # several padded batches
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            for batch in batches:
                probs = batch_attention(run, layer, head, batch)
                for row, (sentence, n) in enumerate(zip(batch.sentences, batch.lengths)):
                    expected = theirs[layer][int(sentence)][head]
                    np.testing.assert_allclose(probs[row, :n, :n], expected, atol=TOLERANCE)
                    np.testing.assert_allclose(run.attention(layer, head, int(sentence)), expected, atol=TOLERANCE)
                    assert (probs[row, n:] == 0).all() and (probs[row, :, n:] == 0).all()


def test_the_document_views_blocks_are_the_models(family_run):
    run, theirs = family_run
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            for sentence in CHECKED:
                head_view = document_head(run, layer, head, sentence)
                n = head_view.n_tokens
                dense = np.zeros((n, n))
                for first, stop, key_first, probs in attention_blocks(head_view, pixel_edges(0, n, n), max_cells=60):
                    dense[first:stop, key_first:key_first + probs.shape[1]] = probs
                np.testing.assert_allclose(dense, theirs[layer][sentence][head], atol=TOLERANCE)


def test_the_related_heads_sample_is_the_models(family_run):
    run, theirs = family_run
    tokens = sentence_token_numbers(run, np.array(CHECKED))
    firsts = run.sentences.first_token.to_numpy()
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            queries, keys = run.queries(layer, head), run.keys(layer, head)
            for block in query_blocks(run, tokens, max_cells=200):
                probs = block_attention(run, layer, head, block, queries, keys)
                for row, token in enumerate(block.queries):
                    sentence = int(np.searchsorted(firsts, token, side="right") - 1)
                    expected = theirs[layer][sentence][head][int(token - firsts[sentence])]
                    support = block.support[row]
                    np.testing.assert_allclose(probs[row, support], expected[block.key_positions[row, support]],
                                               atol=TOLERANCE)
                    assert (probs[row, ~support] == 0).all()


def test_a_manifest_without_the_terms_reads_as_a_run_without_them(family_run, tmp_path):
    """The terms' manifest keys are optional: a run written before they existed (here: a copy of this run with
    them taken out) opens, and its heads have no such term."""
    import json
    import shutil

    run, _ = family_run
    copy = tmp_path / "older"
    shutil.copytree(run.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    for key in ("sinks", "chunks", "alibi_slopes"):
        manifest["attention"].pop(key, None)
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    older = qkviz.open_run(copy)
    rule = older.logit_rule(0, 1)
    assert (rule.sink, rule.chunk, rule.alibi_slope) == (None, None, None)
    assert rule.scale == run.logit_rule(0, 1).scale and rule.window == run.logit_rule(0, 1).window
    np.testing.assert_allclose(older.attention(0, 1, 0).sum(axis=1), 1.0)


def test_attention_change_counts_a_changed_sink_share(family_run, tmp_path):
    """Two runs of gpt-oss whose sinks differ: each query's JS distance is that of its two attention rows with the
    sink's share as one more outcome (scipy's distance as the reference), not of the keys' weights alone."""
    import json
    import shutil

    from scipy.spatial.distance import jensenshannon

    from qkviz.analysis.atlas.attention_change import query_js_distances

    run, _ = family_run
    if run.family != "gpt_oss":
        pytest.skip("a head with a sink logit")
    copy = tmp_path / "other_sinks"
    shutil.copytree(run.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["attention"]["sinks"] = [[sink + 1.5 for sink in layer] for layer in manifest["attention"]["sinks"]]
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    other = qkviz.open_run(copy)
    layer, head = 1, 0
    batches = sentence_batches(run, sentences=np.array(CHECKED))
    found = query_js_distances(run, other, layer, head, batches)
    expected = []
    for batch in batches:
        for sentence in batch.sentences:
            for ours, theirs in zip(run.attention(layer, head, int(sentence)), other.attention(layer, head, int(sentence))):
                expected.append(jensenshannon(np.append(ours, 1 - ours.sum()), np.append(theirs, 1 - theirs.sum()), base=2))
    np.testing.assert_allclose(found, expected, atol=1e-7)
    assert min(expected) > 0.05
