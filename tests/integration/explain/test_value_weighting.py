"""What a head moves (issue 38, part 3): ``run.attention(..., weighting="value")`` is ``a_ij * |W_O^h v_j|``,
checked against the model itself.

The reference runs the model with its own eager attention (``output_attentions=True``), takes each layer's values
from its value projection's output and the output projection's weight, and computes ``|W_O^h v_j|`` by a direct
product with ``W_O^h`` (not qkviz's factorisation), for the grouped-query Llama, GPT-2's fused projection, BERT,
Gemma 3 (QK-norm, sliding windows) and the bundled MiniLM. A family whose attention output is gated before the
projection (Qwen3-Next) keeps no output norms, and asking for them says why.
"""

import json
import shutil
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
import transformers
from support.family_configs import tiny_family_model
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz.core.errors import QkvizError
from qkviz.store import files as run_files

#: the issue's bound: value-weighted attention within 1e-4 relative of the model's
RELATIVE = 1e-4
SENTENCES = 4


@dataclass(frozen=True)
class Reach:
    """Where a family keeps a layer's attention, its value projection and its output projection, and how they are
    read: ``values(output of the value module)`` -> ``[batch, pos, kv_heads x d]``, ``head_rows(weight, head, d)``
    -> ``W_O^h`` as ``[d, d_model]`` (``v @ W_O^h`` is what the head writes)."""

    attention: Callable
    value_module: str
    output_module: str
    values: Callable = lambda output: output
    head_rows: Callable = lambda weight, head, d: weight[:, head * d:(head + 1) * d].T   # nn.Linear: y = x W^T


LINEAR = dict(value_module="v_proj", output_module="o_proj")
REACH = {
    "llama": Reach(lambda model, layer: model.layers[layer].self_attn, **LINEAR),
    "gemma3": Reach(lambda model, layer: model.layers[layer].self_attn, **LINEAR),
    "bert": Reach(lambda model, layer: model.encoder.layer[layer].attention, "self.value", "output.dense"),
    # GPT-2: one Conv1D (y = x W) for queries, keys and values, the values its last third; Conv1D output projection
    "gpt2": Reach(lambda model, layer: model.h[layer].attn, "c_attn", "c_proj",
                  values=lambda output: output.chunk(3, dim=-1)[2],
                  head_rows=lambda weight, head, d: weight[head * d:(head + 1) * d]),
}


def _follow(module, path: str):
    for name in path.split("."):
        module = getattr(module, name)
    return module


def reference(model, reach: Reach, token_ids: list[int], n_heads: int, n_kv_heads: int
              ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer, the model's own attention ``[head, query, key]`` and ``|W_O^h v_j|`` ``[head, key]``, float64,
    for one sentence passed alone."""
    n_layers = len(model.config.layer_types) if hasattr(model.config, "layer_types") else model.config.num_hidden_layers
    kept: dict[int, torch.Tensor] = {}
    hooks = []
    for layer in range(n_layers):
        module = _follow(reach.attention(model, layer), reach.value_module)
        hooks.append(module.register_forward_hook(
            lambda _m, _i, output, layer=layer: kept.__setitem__(layer, reach.values(output).detach())))
    try:
        with torch.no_grad():
            attentions = model(input_ids=torch.tensor([token_ids]), output_attentions=True).attentions
    finally:
        for hook in hooks:
            hook.remove()
    norms = []
    for layer in range(n_layers):
        values = kept[layer][0].double()                                        # [pos, kv_heads x d]
        d = values.shape[-1] // n_kv_heads
        weight = _follow(reach.attention(model, layer), reach.output_module).weight.detach().double()
        per_head = []
        for head in range(n_heads):
            kv = head // (n_heads // n_kv_heads)
            moved = values[:, kv * d:(kv + 1) * d] @ reach.head_rows(weight, head, d)     # [pos, d_model]
            per_head.append(moved.norm(dim=-1))
        norms.append(torch.stack(per_head))
    return [a[0].double() for a in attentions], norms


def largest_errors(run, model, reach: Reach) -> tuple[float, float, float]:
    """``(largest relative error of the output norms, largest error of the value-weighted attention relative to its
    largest weight, the same with the plain attention in place of the value-weighted one)`` over the run's first
    sentences; the last shows the comparison can fail."""
    norm_error = weighted_error = plain_error = 0.0
    for sentence in range(min(SENTENCES, run.n_sentences)):
        rows = run.sentence_tokens(sentence)
        ids = run.tokens.token_id.to_numpy()[rows].tolist()
        attentions, norms = reference(model, reach, ids, run.n_heads, run.n_kv_heads)
        for layer in range(run.n_layers):
            for head in range(run.n_heads):
                theirs_norms = norms[layer][head].numpy()
                ours_norms = run.output_norms(layer, head)[rows]
                norm_error = max(norm_error, float(np.max(np.abs(ours_norms - theirs_norms) / theirs_norms)))
                theirs = attentions[layer][head].numpy() * theirs_norms[None, :]
                scale = float(np.abs(theirs).max())
                ours = run.attention(layer, head, sentence, weighting="value")
                weighted_error = max(weighted_error, float(np.abs(ours - theirs).max()) / scale)
                plain = run.attention(layer, head, sentence)
                plain_error = max(plain_error, float(np.abs(plain - theirs).max()) / scale)
    return norm_error, weighted_error, plain_error


@pytest.mark.parametrize("family", sorted(REACH))
def test_value_weighted_attention_is_attention_times_the_output_norm(family, tiny_run, tiny_model):
    run = tiny_run(family)
    assert run.has_output_norms and run.manifest["output_norms"] == {"stored": True}
    model = transformers.AutoModel.from_pretrained(str(tiny_model(family)), attn_implementation="eager").eval()
    norm_error, weighted_error, plain_error = largest_errors(run, model, REACH[family])
    assert norm_error <= RELATIVE, f"{family}: |W_O v| differs by {norm_error:.2e} relative"
    assert weighted_error <= RELATIVE, f"{family}: a |W_O v| differs by {weighted_error:.2e} relative"
    assert plain_error > 100 * RELATIVE, f"{family}: the check cannot tell attention from value weighting"


def test_grouped_query_heads_read_their_own_key_value_head_through_their_own_slice(tiny_run):
    """In the grouped-query Llama (4 query heads, 2 key-value heads) the two query heads of one key-value head share
    its values but not their slice of the output projection: their norms differ."""
    run = tiny_run("llama")
    assert run.n_kv_heads < run.n_heads and run.kv_head(0) == run.kv_head(1)
    assert not np.allclose(run.output_norms(0, 0), run.output_norms(0, 1), rtol=1e-2)


def test_the_bundled_minilm_matches_its_own_model(minilm_run):
    from qkviz.extraction.models.loading import model_directory

    model = transformers.AutoModel.from_pretrained(str(model_directory("minilm")[0]),
                                                   attn_implementation="eager").eval()
    norm_error, weighted_error, plain_error = largest_errors(minilm_run, model, REACH["bert"])
    assert norm_error <= RELATIVE and weighted_error <= RELATIVE, (norm_error, weighted_error)
    assert plain_error > 100 * RELATIVE


def test_a_gated_attention_output_keeps_no_output_norms_and_says_why(tmp_path):
    tokenizer = decoder_tokenizer(["a small corpus of words for a tiny tokenizer", "the cat sat on the mat"])
    run = qkviz.extract(tiny_family_model("qwen3_next"), ["the cat sat on the mat", "a small corpus of words"],
                        tmp_path / "run", tokenizer=tokenizer, progress=False)
    assert not run.has_output_norms and run.manifest["output_norms"]["stored"] is False
    gate = run.manifest["extraction"]["exactness_gate"]
    assert gate["output_projection_error"] > 0.01, gate
    with pytest.raises(QkvizError) as refusal:
        run.attention(0, 0, 0, weighting="value")
    message = str(refusal.value)
    assert "\n" not in message and "gate" in message and "output projection" in message, message
    assert np.isfinite(run.attention(0, 0, 0)).all()


def test_a_run_from_before_output_norms_opens_and_names_the_remedy(tiny_run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(tiny_run("llama").path, old)
    manifest = json.loads((old / run_files.MANIFEST).read_text())
    for key in ("files", "sha256"):
        manifest[key].pop(run_files.OUTPUT_NORMS)
    manifest.pop("output_norms")
    (old / run_files.MANIFEST).write_text(json.dumps(manifest))
    (old / run_files.OUTPUT_NORMS).unlink()
    run = qkviz.open_run(old)
    assert not run.has_output_norms and run.attention(0, 0, 0).shape[0] > 0
    with pytest.raises(QkvizError, match="overwrite=True"):
        run.output_norms(0, 0)


def test_an_unknown_weighting_is_one_line(tiny_run):
    with pytest.raises(QkvizError) as refusal:
        tiny_run("llama").attention(0, 0, 0, weighting="values")
    assert "\n" not in str(refusal.value) and "'attention', 'value'" in str(refusal.value)
