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
from qkviz.analysis.attention_batches import batch_attention, sentence_batches
from qkviz.analysis.document_attention import attention_blocks, document_head, pixel_edges
from qkviz.analysis.related_sample import block_attention, query_blocks, sentence_token_numbers

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
