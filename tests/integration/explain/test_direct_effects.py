"""What the whole model writes at a token (``run.direct_effects``): a target's logit split by the parts of the final
residual stream, on every exact causal family with a language-model head that the issue names.

Each family is a tiny random language model saved with its tokenizer and extracted; the split is checked against the
model itself, never against qkviz's own numbers:

* the rows add up to the model's own logit (its forward pass, eager attention) within 1e-4 * max(1, |logit|);
* each head's row equals an independent computation written here: the head's slice of its output projection's input
  (kept by a forward pre-hook), through that slice of the projection's weight, through a norm on the attention's
  output where the family has one (Gemma's, OLMo 2's post-norms) and the final norm, both with the divisor fixed at
  the real input's (this file's own formula of each norm, first checked to reproduce the norm's real output), and the
  target's unembedding row;
* removing that head's vector from the final norm's real input, with the divisor held, changes the logit by exactly
  its row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from support.family_configs import tiny_family_config
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz import QkvizError

#: per family: the final norm's path, layer L's attention output projection, whether it is a Conv1D, and the norm
#: on the attention's output before the residual (None: none)
FAMILIES = {
    "llama": ("model.norm", "model.layers.{}.self_attn.o_proj", False, None),
    "mistral": ("model.norm", "model.layers.{}.self_attn.o_proj", False, None),
    "qwen2": ("model.norm", "model.layers.{}.self_attn.o_proj", False, None),
    "qwen3": ("model.norm", "model.layers.{}.self_attn.o_proj", False, None),
    "gemma2": ("model.norm", "model.layers.{}.self_attn.o_proj", False, "model.layers.{}.post_attention_layernorm"),
    "gemma3_text": ("model.norm", "model.layers.{}.self_attn.o_proj", False,
                    "model.layers.{}.post_attention_layernorm"),
    "olmo2": ("model.norm", "model.layers.{}.self_attn.o_proj", False, "model.layers.{}.post_attention_layernorm"),
    "phi": ("model.final_layernorm", "model.layers.{}.self_attn.dense", False, None),
    "gpt2": ("transformer.ln_f", "transformer.h.{}.attn.c_proj", True, None),
    "gpt_neox": ("gpt_neox.final_layer_norm", "gpt_neox.layers.{}.attention.dense", False, None),
}
#: the family whose final logits are capped in this file (Gemma 2's soft cap, which the tiny shape leaves out), the cap
#: small enough for the tiny model's logits (about 0.1) to feel it
CAPPED = {"gemma2": dict(final_logit_softcapping=0.05)}
SENTENCES = 6


def close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= 1e-4 * max(1.0, abs(theirs))


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_run(request, tmp_path_factory, corpus_sentences):
    """``(family, run, language model)``: a tiny random language model of the family, its run over 6 sentences."""
    family = request.param
    torch.manual_seed(0)
    config = tiny_family_config(family, **CAPPED.get(family, {}))
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():      # norms and biases start at one and zero: some spread, so that they matter
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1 and ("norm" in name or name.endswith("bias")):
                parameter.add_(torch.randn_like(parameter) * 0.3)
    directory = tmp_path_factory.mktemp(f"{family}-lm")
    model.save_pretrained(directory)
    decoder_tokenizer(corpus_sentences).save_pretrained(directory)
    run = qkviz.extract(str(directory), corpus_sentences[:SENTENCES], directory / "run", progress=False)
    model.config._attn_implementation = "eager"
    return family, run, model


def model_logits(model, run, query: int) -> torch.Tensor:
    rows = run.sentence_tokens(int(run.tokens.sentence.iat[query]))
    ids = torch.as_tensor(run.tokens.token_id.to_numpy()[rows.start:query + 1].astype(np.int64))[None]
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1].double()


def frozen(module: torch.nn.Module, real_input: torch.Tensor):
    """This file's own form of ``module`` (a LayerNorm or an RMSNorm, Gemma's ``1 + w``) with its divisor fixed at
    ``real_input``'s: ``(linear, bias)``, ``linear(v)`` the norm's linear part applied to ``v``."""
    x = real_input.double()
    eps = next(float(getattr(module, name)) for name in ("eps", "variance_epsilon", "epsilon") if hasattr(module, name))
    centred = "LayerNorm" in type(module).__name__ and "RMS" not in type(module).__name__
    weight = module.weight.detach().double()
    gain = 1.0 + weight if type(module).__name__.startswith("Gemma") else weight
    if centred:
        sigma = torch.sqrt(((x - x.mean()) ** 2).mean() + eps)
    else:
        sigma = torch.sqrt((x ** 2).mean() + eps)
    bias = getattr(module, "bias", None)
    bias = torch.zeros_like(x) if bias is None else bias.detach().double()

    def linear(v: torch.Tensor) -> torch.Tensor:
        v = v.double()
        return gain * ((v - v.mean()) if centred else v) / sigma
    return linear, bias


def kept_inputs(model, paths: list[str], run, query: int) -> dict[str, torch.Tensor]:
    """Each module's first input at the query token, kept by forward pre-hooks over the query's sequence."""
    kept = {}
    handles = [model.get_submodule(path).register_forward_pre_hook(
        lambda _m, args, path=path: kept.__setitem__(path, args[0][0, -1].detach().double())) for path in paths]
    try:
        model_logits(model, run, query)
    finally:
        for handle in handles:
            handle.remove()
    return kept


def independent_head_vector(model, family: str, run, query: int, layer: int, head: int):
    """Head ``(layer, head)``'s vector in the final residual stream at ``query`` (through any post-norm), and the
    final norm's real input there."""
    final_path, projection_path, conv1d, post_path = FAMILIES[family]
    projection = model.get_submodule(projection_path.format(layer))
    paths = [final_path, projection_path.format(layer)] + ([post_path.format(layer)] if post_path else [])
    kept = kept_inputs(model, paths, run, query)
    d_head = run.head_dim
    z = kept[projection_path.format(layer)][head * d_head:(head + 1) * d_head]
    weight = projection.weight.detach().double()
    vector = z @ weight[head * d_head:(head + 1) * d_head] if conv1d else weight[:, head * d_head:(head + 1) * d_head] @ z
    if post_path:
        post = model.get_submodule(post_path.format(layer))
        linear, _bias = frozen(post, kept[post_path.format(layer)])
        vector = linear(vector)
    return vector, kept[final_path]


def queries_of(run) -> list[int]:
    """Three queries of the first sentence that have a next token: the second, a middle one, the last but one."""
    rows = run.sentence_tokens(0)
    return sorted({rows.start + 1, (rows.start + rows.stop) // 2, rows.stop - 2})


def test_the_rows_add_up_to_the_models_own_logit(family_run):
    family, run, model = family_run
    for query in queries_of(run):
        frame = run.direct_effects(query, model=model)
        target = int(run.tokens.token_id.iat[query + 1])
        logits = model_logits(model, run, query)
        assert list(frame.columns) == ["part", "contribution"] and frame.attrs["target"] == target
        total = float(frame.contribution.sum())
        assert close(total, frame.attrs["logit"])
        if family in CAPPED:
            cap = CAPPED[family]["final_logit_softcapping"]
            assert close(frame.attrs["capped_logit"], float(logits[target]))
            assert close(cap * np.tanh(total / cap), float(logits[target]))
            assert abs(total - float(logits[target])) > 1e-3, "the cap is seen: the sum is the logit before it"
        else:
            assert frame.attrs["capped_logit"] is None and close(total, float(logits[target]))
        heads = {f"L{layer}H{head}" for layer in range(run.n_layers) for head in range(run.n_heads)}
        assert heads <= set(frame.part) and "embed" in set(frame.part)


def test_a_heads_row_is_its_output_through_the_frozen_final_norm_and_the_unembedding(family_run):
    family, run, model = family_run
    final_path = FAMILIES[family][0]
    unembedding = model.get_output_embeddings().weight.detach().double()
    query = queries_of(run)[1]
    target = int(run.tokens.token_id.iat[query + 1])
    frame = run.direct_effects(query, model=model).set_index("part").contribution
    for layer, head in [(0, 1), (run.n_layers - 1, run.n_heads - 1)]:
        vector, final_input = independent_head_vector(model, family, run, query, layer, head)
        linear, bias = frozen(model.get_submodule(final_path), final_input)
        real_output = model.get_submodule(final_path)(final_input.float()[None]).double()[0]
        assert torch.allclose(linear(final_input) + bias, real_output, atol=1e-4), "this file's norm is the model's"
        row = float(linear(vector) @ unembedding[target])
        assert close(float(frame[f"L{layer}H{head}"]), row), (family, layer, head)
        # removed from the final residual stream, the final norm's divisor held: the logit moves by exactly the row
        full = float((linear(final_input) + bias) @ unembedding[target])
        removed = float((linear(final_input - vector) + bias) @ unembedding[target])
        assert close(full - removed, float(frame[f"L{layer}H{head}"]))


@pytest.mark.parametrize("family_run", ["llama"], indirect=True)
def test_a_target_may_be_an_id_or_one_token_and_is_refused_in_one_line_otherwise(family_run):
    _family, run, model = family_run
    query = queries_of(run)[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(run.manifest["model"]["id"])
    word = tokenizer.decode([int(run.tokens.token_id.iat[query + 1])])      # its leading space as the tokenizer writes it
    by_string = run.direct_effects(query, word, model=model)      # the run's own tokenizer, loaded from its model
    assert by_string.attrs["target_token"] == word
    by_id = run.direct_effects(query, int(run.tokens.token_id.iat[query + 1]), model=model)
    assert by_string.attrs["target"] == by_id.attrs["target"] and close(by_string.attrs["logit"], by_id.attrs["logit"])
    vocabulary = model.get_output_embeddings().weight.shape[0]
    last = run.sentence_tokens(0).stop - 1
    refusals = {
        "two tokens": lambda: run.direct_effects(query, "the quick brown fox", model=model),
        "outside the vocabulary": lambda: run.direct_effects(query, vocabulary, model=model),
        "no next token": lambda: run.direct_effects(last, model=model),
        "an out-of-range token": lambda: run.direct_effects(len(run.tokens), model=model),
        "not a token": lambda: run.direct_effects(query, 2.5, model=model),
    }
    for what, call in refusals.items():
        with pytest.raises(QkvizError) as refused:
            call()
        assert "\n" not in str(refused.value), what
    with pytest.raises(QkvizError, match=r"tokens of the model's vocabulary \('"):
        refusals["two tokens"]()
    with pytest.raises(QkvizError, match="last token of its sequence"):
        refusals["no next token"]()


def test_an_encoder_is_refused_in_one_line(tiny_run):
    run = tiny_run("bert")
    with pytest.raises(QkvizError, match="encoder") as refused:
        run.direct_effects(1)
    assert "\n" not in str(refused.value)


# -- what one head writes -------------------------------------------------------------------------------------------
def model_attention(model, run, query: int, layer: int, head: int) -> np.ndarray:
    """The model's own eager attention of head ``(layer, head)`` at ``query`` over its sequence up to it."""
    rows = run.sentence_tokens(int(run.tokens.sentence.iat[query]))
    ids = torch.as_tensor(run.tokens.token_id.to_numpy()[rows.start:query + 1].astype(np.int64))[None]
    with torch.no_grad():
        return model(input_ids=ids, output_attentions=True).attentions[layer][0, head, -1].double().numpy()


def test_a_heads_row_split_by_source_and_by_part_adds_up_to_it(family_run):
    _family, run, model = family_run
    query = queries_of(run)[2]
    effects = run.direct_effects(query, model=model).set_index("part").contribution
    for layer, head in [(0, 0), (run.n_layers - 1, 1)]:
        by_source = run.head_output(layer, head, query, model=model)
        by_part = run.head_output(layer, head, query, by="part", model=model)
        row = float(effects[f"L{layer}H{head}"])
        assert close(by_source.attrs["row"], row) and close(by_part.attrs["row"], row)
        assert close(float(by_source.contribution.sum()), row) and close(float(by_part.contribution.sum()), row)
        # one row per token the query may read, each with the model's own attention weight
        first = run.sentence_tokens(0).start
        assert sorted(by_source.source) == list(range(first, query + 1))
        weights = by_source.set_index("source").attention.reindex(range(first, query + 1)).to_numpy()
        assert np.allclose(weights, model_attention(model, run, query, layer, head), atol=1e-5)
        # the value side's parts: the embeddings and every earlier head and MLP, named as the direct effects name them
        earlier = {f"L{earlier}H{h}" for earlier in range(layer) for h in range(run.n_heads)}
        assert earlier | {"embed"} <= set(by_part.part)


@pytest.mark.parametrize("family_run", ["llama", "gpt2"], indirect=True)
def test_the_tokens_a_head_promotes_are_its_direct_effect_on_them(family_run):
    _family, run, model = family_run
    query, layer, head = queries_of(run)[1], run.n_layers - 1, 0
    writes = run.head_writes(layer, head, query, top=3, model=model)
    assert list(writes.direction) == ["promotes"] * 3 + ["suppresses"] * 3
    effects = writes.effect.to_numpy()
    assert effects[0] >= effects[1] >= effects[2] > effects[3] and effects[3] <= effects[4] <= effects[5]
    for token_id, effect in zip(writes.token_id[[0, 3]], effects[[0, 3]]):
        assert close(run.head_output(layer, head, query, int(token_id), model=model).attrs["row"], float(effect))
    with pytest.raises(QkvizError, match="by must be one of source, part"):
        run.head_output(layer, head, query, by="key", model=model)


@pytest.mark.parametrize("family_run", ["llama"], indirect=True)
def test_qkviz_writes_prints_the_split_and_writes_every_row(family_run, tmp_path):
    from support.cli import run_main

    _family, run, model = family_run
    query = queries_of(run)[1]
    done = run_main("writes", "--run", str(run.path), "--query", str(query), "--out", str(tmp_path / "all.csv"))
    assert done.returncode == 0, done.stderr
    written = pd.read_csv(tmp_path / "all.csv")
    assert close(float(written.contribution.sum()), run.direct_effects(query, model=model).attrs["logit"])
    assert "= sum of" in done.stdout and f"all {len(written)} rows" in done.stdout
    done = run_main("writes", "--run", str(run.path), "--query", str(query), "--layer", "1", "--head", "0",
                    "--by", "part", "--out", str(tmp_path / "part.csv"))
    assert done.returncode == 0, done.stderr
    assert close(float(pd.read_csv(tmp_path / "part.csv").contribution.sum()),
                 run.head_output(1, 0, query, model=model).attrs["row"])
    for bad in (["--layer", "1"], ["--by", "part"], ["--target", "the quick brown fox"], ["--target-id", "400"],
                ["--layer", "1", "--head", "0", "--by", "tokens", "--target-id", "5"]):
        done = run_main("writes", "--run", str(run.path), "--query", str(query), *bad, "--out", str(tmp_path / "bad.csv"))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (bad, done.stderr)
        assert not (tmp_path / "bad.csv").exists(), "nothing is written on a refusal"
