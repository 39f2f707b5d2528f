"""What every head writes, over the probe (:mod:`qkviz.probes.writing_probe`) and as labels (``copying``,
``suppression``): proven against computations that do not use the probe's code.

* Each head's write from each source, read on a candidate token, equals that source's row of ``run.head_output`` (the
  split by source that tests/integration/explain/test_direct_effects.py checks against the model's own forward pass), on
  three families: llama, gemma3_text (a norm on the attention's output) and gpt2 (LayerNorm, Conv1D).
* The weights-only score's matrix equals TransformerLens's ``W_E W_V W_O W_U`` written here from the weights (the
  norms' gains on the way), up to a positive factor per row.
* Known answers: a one-layer model whose only head copies (its value and output projections the identity, its MLP
  off, its embeddings tied) earns ``copying`` and not ``suppression``; the same with the output projection negated
  earns ``suppression`` and not ``copying``; in both the shuffled control earns neither.
* A run whose model has no unembedding (the bundled MiniLM) is marked ``not computed: no unembedding``.
"""

from __future__ import annotations

import numpy as np
import pytest
import pandas as pd
import torch
import transformers
from support.family_configs import tiny_family_config
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz.analysis.labels.registry import LabelThresholds
from qkviz.analysis.statistics.induction_scores import induction_targets
from qkviz.analysis.labels.writing_rule import writing_labels
from qkviz.extraction.residual.own_token_writes import own_token_trace
from qkviz.probes.writing_probe import CopyingSettings, copying_probe, corpus_repeats
from qkviz.probes.head_probes import ProbeSettings
from qkviz.probes.model_on_demand import sequence_ids

SENTENCES = 6
#: a small probe: enough queries for a score, quick on a tiny model
PROBE = ProbeSettings(sequences=4, half=30, seed=0)


def _language_model_run(directory, model, sentences):
    model.save_pretrained(directory)
    decoder_tokenizer(sentences).save_pretrained(directory)
    run = qkviz.extract(str(directory), sentences[:SENTENCES], directory / "run", progress=False)
    model.config._attn_implementation = "eager"
    return run


@pytest.fixture(scope="module", params=["llama", "gemma3_text", "gpt2"])
def family_run(request, tmp_path_factory, corpus_sentences):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_family_config(request.param), dtype=torch.float32).eval()
    with torch.no_grad():      # norms and biases start at one and zero: some spread, so that they matter
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1 and ("norm" in name or name.endswith("bias")):
                parameter.add_(torch.randn_like(parameter) * 0.3)
    run = _language_model_run(tmp_path_factory.mktemp(f"{request.param}-copy"), model, corpus_sentences)
    return request.param, run, model


def test_each_sources_write_is_its_row_of_the_heads_output_by_source(family_run):
    family, run, model = family_run
    sentence = 1
    ids = sequence_ids(run, sentence)
    first = run.sentence_tokens(sentence).start
    query = len(ids) - 2                                  # its target: the next token
    target = int(ids[query + 1])
    layer, head = run.n_layers - 1, 1
    trace = own_token_trace(model, ids[:query + 1], range(query + 1))
    candidates = trace.unembedding.weight.detach().double()[[target]]
    source = trace.source_logits(layer, [run.logit_rule(layer, h) for h in range(run.n_heads)], candidates)[head]
    ours = source.attention[query] * source.logits[:, 0] * source.divisor / source.divisor[query]
    theirs = run.head_output(layer, head, first + query, target=target, by="source", model=model).sort_values("source")
    assert theirs.source.tolist() == list(range(first, first + query + 1)), family
    np.testing.assert_allclose(ours, theirs.contribution.to_numpy(), rtol=1e-5, atol=1e-8)   # candidates in float32
    assert np.abs(ours).max() > 1e-6                     # not a sum of zeros


def test_the_weights_only_circuit_is_transformer_lenss_from_the_weights(tmp_path, corpus_sentences):
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(tiny_family_config("llama"), dtype=torch.float32).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1 and "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    run = _language_model_run(tmp_path, model, corpus_sentences)
    candidates = np.arange(5, 105)
    trace = own_token_trace(model, sequence_ids(run, 0)[:1], [0])
    embeddings = model.get_input_embeddings().weight.detach().double()[candidates]
    unembedding = model.get_output_embeddings().weight.detach().double()[candidates]
    layer = run.n_layers - 1
    ours = trace.embedding_logits(layer, list(range(run.n_heads)), embeddings, unembedding)
    attention = model.model.layers[layer].self_attn
    d_head = attention.head_dim
    group = run.n_heads // model.config.num_key_value_heads
    gain_in = model.model.layers[layer].input_layernorm.weight.detach().double()
    gain_out = model.model.norm.weight.detach().double()
    for head in range(run.n_heads):
        kv = head // group
        w_v = attention.v_proj.weight.detach().double()[kv * d_head:(kv + 1) * d_head]          # [d, width]
        w_o = attention.o_proj.weight.detach().double()[:, head * d_head:(head + 1) * d_head]   # [width, d]
        theirs = ((embeddings * gain_in) @ w_v.T @ w_o.T * gain_out) @ unembedding.T
        theirs = theirs.numpy()
        factor = float(np.sum(ours[head] * theirs) / np.sum(theirs * theirs))     # one positive factor (a divisor)
        assert factor > 0
        np.testing.assert_allclose(ours[head], factor * theirs, atol=1e-4 * np.abs(factor * theirs).max())   # float32


def _copier(directory, corpus_sentences, sign: float):
    """A one-layer llama whose only head writes what it reads (``sign`` 1) or its negative (-1): value and output
    projections the identity (times ``sign``), its MLP off, its embeddings tied to its unembedding."""
    torch.manual_seed(2)
    config = tiny_family_config("llama", num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                                head_dim=64, tie_word_embeddings=True)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    attention = model.model.layers[0].self_attn
    width = config.hidden_size
    with torch.no_grad():
        attention.v_proj.weight.copy_(torch.eye(width))
        attention.o_proj.weight.copy_(sign * torch.eye(width))
        model.model.layers[0].mlp.down_proj.weight.zero_()
    return model, _language_model_run(directory, model, corpus_sentences)


@pytest.mark.parametrize("sign, earned, not_earned", [(1.0, "copying", "suppression"), (-1.0, "suppression", "copying")])
def test_a_head_that_writes_what_it_reads_copies_and_its_negative_suppresses(tmp_path, corpus_sentences, sign,
                                                                             earned, not_earned):
    written_twice = [sentence + " " + sentence for sentence in corpus_sentences[:4]]     # repeats for the corpus form
    model, run = _copier(tmp_path, [*written_twice, *corpus_sentences], sign)
    assert run.n_heads == 1 and run.n_layers == 1
    table = copying_probe(run, PROBE, CopyingSettings(), model=model)
    score = dict(zip(table.probe, table.score))
    assert score[earned] > 0.9 and score[not_earned] < 0.05, score
    assert score[f"{earned}-shuffled"] < 0.05 and score[f"{not_earned}-shuffled"] < 0.05, score
    assert np.sign(score["attended-logit-raise"]) == np.sign(sign)
    assert (score["copying-weights-only"] > 0.9) == (sign > 0), score
    labels = {row[2] for row in writing_labels(table, LabelThresholds())}
    assert labels == {earned}
    assert writing_labels(table, LabelThresholds(), control=True) == []
    assert (table.queries[table.probe == "copying"] == PROBE.sequences * PROBE.half).all()
    # the corpus form: the same head on the run's own text, at its repeats, earns the same label there
    repeats = corpus_repeats(run, CopyingSettings())
    assert repeats, "the test corpus repeats itself nowhere"
    assert (table.queries[table.probe == "copying-corpus"] == sum(len(queries) for _ids, queries in repeats)).all()
    assert score[f"{earned}-corpus"] > 0.5 and score[f"{not_earned}-corpus"] < 0.05, score
    assert score[f"{earned}-corpus-shuffled"] < 0.05, score
    assert np.sign(score["attended-logit-raise-corpus"]) == np.sign(sign)
    forms = {row[7].split(":")[0] for row in writing_labels(table, LabelThresholds())}
    assert forms == {"the corpus's own repeats", PROBE.describe().split(":")[0]}, forms


def test_the_corpus_form_reads_the_repeats_within_its_token_budget(tiny_run):
    run = tiny_run("gpt2", max_sentences=30)
    ids = run.tokens.token_id.to_numpy()
    for budget in (1000, 60):
        repeats = corpus_repeats(run, CopyingSettings(corpus_tokens=budget))
        assert repeats and sum(len(sequence) for sequence, _queries in repeats) <= budget + len(repeats[-1][0])
        for sequence, queries in repeats:
            matching = [sentence for sentence in range(run.n_sentences)
                        if np.array_equal(ids[run.sentence_tokens(sentence)][:len(sequence)], sequence)]
            assert matching, "a sequence that is not the start of one of the run's"
            assert list(queries) == [position for position, _ in induction_targets(sequence)]
    assert corpus_repeats(run, CopyingSettings(corpus_tokens=0)) == []


def test_a_corpus_score_on_too_few_queries_earns_nothing():
    row = {"layer": 0, "head": 0, "score": 0.8, "chance": 0.0025, "source": "the corpus's own repeats: ..."}
    table = pd.DataFrame([{**row, "probe": "copying-corpus", "queries": 19},
                          {**row, "probe": "copying-corpus", "queries": 20, "head": 1}])
    assert [(r[1], r[2], r[8]) for r in writing_labels(table, LabelThresholds(min_queries=20))] == [(1, "copying", 20)]


@pytest.fixture(scope="module")
def minilm_atlas(tmp_path_factory, corpus_sentences):
    run = qkviz.extract("minilm", corpus_sentences[:8], tmp_path_factory.mktemp("minilm-writes") / "run", progress=False)
    return run, qkviz.compute_stats(run, progress=False)


def test_minilm_has_no_unembedding_and_its_atlas_and_report_say_so(minilm_atlas):
    from qkviz.report.atlas_html import render_atlas_html

    run, atlas = minilm_atlas
    assert atlas.writes_note == "not computed: no unembedding"
    assert not atlas.labels.label.isin(["copying", "suppression"]).any()
    assert qkviz.open_run(run.path).atlas.writes_note == atlas.writes_note           # stored, read back
    page = render_atlas_html(atlas, "minilm", str(run.path))
    assert "Copying and suppression (what heads write): not computed: no unembedding." in page


def test_minilms_why_panel_says_what_it_writes_is_not_computed_in_one_line(minilm_atlas):
    from support.component_tree import texts

    from dash_app.explain_worker import ExplainWorker
    from dash_app.panels import why
    from dash_app.data.run_data import RunData

    run, _atlas = minilm_atlas
    data = RunData(qkviz.open_run(run.path), "minilm-writes")
    rows = run.sentence_tokens(1)
    subject = why.Subject("pair", 0, 2, 3, (rows.stop - 2,), (rows.start + 1,))
    answer = ExplainWorker().wait(subject, lambda: why.explain(data, subject))
    assert not answer.pending and answer.error is None, answer.error
    refusal = answer.result["writes"]
    assert isinstance(refusal, str) and "no unembedding" in refusal and "\n" not in refusal
    words = " ".join(texts(why.render(data, subject, answer)))
    assert "What it writes at the query" in words and refusal in words
