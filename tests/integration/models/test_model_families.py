"""Every model type of qkviz's families table, on a tiny random model of it: exact, or refused in one line.

Exact: a run extracted from the model in memory (``qkviz.extract``) recomputes, from its stored queries and keys
(``Run.attention``), the attention the model itself computes with its eager implementation
(``output_attentions``), to 1e-5, on sentences of different lengths in one padded batch; and that attention is
far from uniform, so the comparison can fail. Refused: the one-line error quotes the table's reason, and no run
directory is left behind.
"""

import pytest
import torch
from support import CORPUS
from support.family_configs import tiny_family_model
from support.family_sweep import eager_error
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz.core.errors import QkvizError
from qkviz.extraction.families import EXACT, MODEL_FAMILIES, REFUSED, counts

TOLERANCE = 1e-5
SENTENCES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:6]
CHECKED = 3


@pytest.fixture(scope="module")
def tokenizer():
    return decoder_tokenizer(CORPUS.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("family", MODEL_FAMILIES, ids=lambda family: family.model_type)
def test_every_family_is_exact_or_refused_in_one_line(family, tokenizer, tmp_path):
    model = tiny_family_model(family.model_type)
    out = tmp_path / "run"
    if family.status == REFUSED:
        with pytest.raises(QkvizError) as refusal:
            qkviz.extract(model, SENTENCES, out, tokenizer=tokenizer, progress=False)
        message = str(refusal.value)
        assert "\n" not in message and family.note in message, message
        assert not out.exists()
        return
    assert_exact(family.model_type, model, tokenizer, out)


def assert_exact(name: str, model, tokenizer, out) -> qkviz.Run:
    """Extract ``model`` to ``out`` and check its run against the model's own eager attention (the module doc)."""
    run = qkviz.extract(model, SENTENCES, out, tokenizer=tokenizer, progress=False)
    worst, departure = eager_error(model, run, CHECKED)     # the model's own attention, on the run's sentences
    assert worst <= TOLERANCE, f"{name}: max abs error {worst:.2e}"
    assert departure > 0.05, f"{name}: attention is near uniform ({departure:.3f}); the test proves nothing"
    gate = run.manifest["extraction"]["exactness_gate"]
    assert gate["max_error"] <= 1e-4
    return run


@pytest.mark.parametrize("architecture, kv_heads", [
    (dict(new_decoder_architecture=True, num_kv_heads=2), 2),       # grouped keys, broadcast to every head before q.k
    (dict(new_decoder_architecture=False, multi_query=True), 1),    # one key head for every query head
    (dict(new_decoder_architecture=False, multi_query=False, num_kv_heads=4), 4),   # a key head per query head
], ids=["new-grouped", "old-multi-query", "old-multi-head"])
def test_falcon_is_exact_in_both_of_its_architectures(architecture, kv_heads, tokenizer, tmp_path):
    """Falcon computes attention in its own code (no attention interface, no method of its own that receives the
    queries and keys): captured where that code multiplies queries by keys, each key-value head stored once."""
    run = assert_exact("falcon", tiny_family_model("falcon", **architecture), tokenizer, tmp_path / "run")
    assert run.n_kv_heads == kv_heads


#: families beyond the table whose attention is computed by their own code (BERT-style encoders and older decoders
#: written before transformers' attention interface), captured where that code multiplies queries by keys
OWN_CODE_TYPES = [("megatron-bert", {}), ("rembert", {}), ("roformer", {}), ("tapas", {}), ("ibert", {}), ("luke", {}),
                  ("big_bird", dict(attention_type="original_full")), ("big_bird", {}), ("openai-gpt", {}), ("gpt_neox_japanese", {}),
                  ("xlm", dict(init_std=0.12)), ("flaubert", dict(init_std=0.12)),     # attention modules in a list
                  ("xlm", dict(init_std=0.12, causal=True)), ("git", {})]


@pytest.mark.parametrize("model_type, settings", OWN_CODE_TYPES,
                         ids=[name + ("-causal" if settings.get("causal") else "-block-sparse" if name == "big_bird"
                                      and not settings else "") for name, settings in OWN_CODE_TYPES])
def test_families_with_their_own_attention_code_are_exact(model_type, settings, tokenizer, tmp_path):
    model = tiny_family_model(model_type, **settings)
    if model_type == "openai-gpt":      # its Conv1D weights ignore initializer_range: drawn again, or attention is flat
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("attn.c_attn.weight"):
                    parameter.normal_(0.0, 0.12)
    assert_exact(model_type, model, tokenizer, tmp_path / "run")


def test_convbert_passes_each_sentence_alone_because_its_convolution_reads_the_padding(tokenizer, tmp_path):
    """ConvBERT's q.k heads are captured where its own code multiplies queries by keys; its span convolution beside
    them reads the hidden states of the padding, so a sentence's vectors in a padded batch would depend on the
    sentences beside it. Each sentence passes alone (the manifest's batch size 1), and the run is exact against the
    model's attention on each sentence alone, which the same sentences in one padded batch do not give."""
    from support.family_sweep import model_attentions

    model = tiny_family_model("convbert")
    run = assert_exact("convbert", model, tokenizer, tmp_path / "run")
    assert run.manifest["extraction"]["batch_size"] == 1
    token_ids = [run.tokens.token_id.to_numpy()[run.sentence_tokens(s)].tolist() for s in range(CHECKED)]
    shortest = min(range(CHECKED), key=lambda s: len(token_ids[s]))
    n = len(token_ids[shortest])
    padded = model_attentions(model, token_ids)[-1][shortest, 0, :n, :n].double().numpy()
    assert abs(run.attention(run.n_layers - 1, 0, shortest) - padded).max() > 1e-3


#: a block-sparse BigBird whose own code attends in full to at most (5 + 2 * 1) * 4 = 28 tokens
SHORT_SPAN = dict(block_size=4, num_random_blocks=1)


def test_a_block_sparse_big_bird_is_refused_a_document_longer_than_it_attends_to_in_full(tokenizer, tmp_path):
    """BigBird's own code replaces block-sparse attention by full attention on a sequence no longer than
    ``(5 + 2 * num_random_blocks) * block_size`` tokens: a longer document is refused in one line with its count,
    nothing written; in windows of that span (``chunk``) every sentence is attended in full, and is exact."""
    model = tiny_family_model("big_bird", **SHORT_SPAN)
    assert max(len(tokenizer(sentence)["input_ids"]) for sentence in SENTENCES) > 28
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(model, SENTENCES, tmp_path / "long", tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert "more than the 28 tokens within which BigBird" in message and "\n" not in message, message
    assert not (tmp_path / "long").exists()
    run = qkviz.extract(model, SENTENCES, tmp_path / "run", tokenizer=tokenizer, chunk=28, progress=False)
    worst, departure = eager_error(model, run, CHECKED)
    assert worst <= TOLERANCE and departure > 0.05, (worst, departure)


def test_a_block_sparse_big_bird_refuses_any_pass_longer_than_its_full_attention_span(tokenizer):
    """Where a pass longer than the span reaches the model under capture (not through a corpus, whose documents are
    refused first), it is refused in one line before BigBird's block-sparse attention runs."""
    from qkviz.extraction.capture.block_sparse import attending_in_full

    model = tiny_family_model("big_bird", **SHORT_SPAN)
    with attending_in_full(model), pytest.raises(QkvizError) as refusal, torch.no_grad():
        model(input_ids=torch.arange(3, 43)[None])
    assert "a sequence of 40 tokens is longer than the 28 tokens" in str(refusal.value)
    assert model.attention_type == "original_full"      # the switch the model's own code makes on a short pass


def test_whisper_s_text_decoder_is_exact_and_its_speech_model_is_refused_in_one_line(tokenizer, tmp_path):
    """Whisper's causal language model is its text decoder alone (``WhisperForCausalLM``): without an encoder's
    output its layers skip cross-attention, and its self-attention is exact. Whisper's base model reads audio
    features, not token ids: refused in one line that says so, nothing written."""
    import transformers
    from support.family_configs import tiny_family_config

    decoder = tiny_family_model("whisper")
    assert isinstance(decoder, transformers.WhisperForCausalLM)
    assert_exact("whisper", decoder, tokenizer, tmp_path / "run")
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(transformers.WhisperModel(tiny_family_config("whisper")).eval(), SENTENCES, tmp_path / "speech",
                      tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert "WhisperModel reads input_features" in message and "\n" not in message, message
    assert not (tmp_path / "speech").exists()


def test_falcon_is_captured_in_its_eager_code_as_in_its_fused_attention(tokenizer, tmp_path):
    """A Falcon set to its eager attention multiplies queries by keys itself (``@``) instead of calling PyTorch's
    fused attention (as it does by default): the capture follows either, and stays exact."""
    model = tiny_family_model("falcon")
    model.config._attn_implementation = "eager"
    assert_exact("falcon", model, tokenizer, tmp_path / "run")
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("settings, model_layers", [
    (dict(inner_group_num=2, num_hidden_layers=3), [0, 1, 0, 1, 0, 1]),   # two shared layers in turn, three times
    (dict(num_hidden_groups=2, num_hidden_layers=4), [0, 0, 1, 1]),       # two groups, each shared by two layers
], ids=["two-layers-in-a-group", "two-groups"])
def test_albert_shares_its_layers_in_any_grouping_and_is_exact_per_call(settings, model_layers, tokenizer, tmp_path):
    """Each call of a shared ALBERT layer is a run layer, in call order, compared with the attention the model
    returns for that call."""
    run = assert_exact("albert", tiny_family_model("albert", **settings), tokenizer, tmp_path / "run")
    assert run.n_layers == len(model_layers) and run.manifest["shape"]["model_layers"] == model_layers


def test_at_least_52_of_the_57_model_types_are_exact():
    assert len(MODEL_FAMILIES) == 57 and len({family.model_type for family in MODEL_FAMILIES}) == 57
    assert counts()[EXACT] >= 52


def test_a_model_mixing_attention_and_linear_attention_layers_says_which_it_extracted(tokenizer, tmp_path, caplog):
    model = tiny_family_model("qwen3_next")        # layer 0: linear attention (Gated DeltaNet); layer 1: attention
    with caplog.at_level("INFO", logger="qkviz.extraction.writing.pipeline"):
        run = qkviz.extract(model, SENTENCES, tmp_path / "run", tokenizer=tokenizer, progress=False)
    assert run.n_layers == 1 and run.manifest["shape"]["model_layers"] == [1]
    assert "the run's layers 0-0 are its attention layers, model layers 1" in caplog.text


def with_an_unseen_distance_bias(model):
    """``model`` (a Llama) with a term no family table declares: every attention layer adds ``-0.5 * |i - j|`` to its
    logits, through the attention mask it receives, in every implementation (qkviz's capture and eager alike)."""

    def add_bias(_module, args, kwargs):
        n = kwargs["hidden_states"].shape[1]
        position = torch.arange(n, dtype=torch.float32)
        bias = -0.5 * (position[:, None] - position[None, :]).abs()
        mask = kwargs.get("attention_mask")
        if mask is None:
            mask = torch.ones(n, n, dtype=torch.bool).tril()
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        return args, {**kwargs, "attention_mask": mask + bias}

    for layer in model.layers:
        layer.self_attn.register_forward_pre_hook(add_bias, with_kwargs=True)
    return model


def test_the_gate_refuses_a_family_never_seen_that_adds_a_term(tokenizer, tmp_path):
    """A Llama whose layers add a distance bias through their attention mask is a family qkviz has never seen:
    the bias reaches the softmax, so the gate finds that the recomputed attention differs, and refuses before
    writing anything."""
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(with_an_unseen_distance_bias(tiny_family_model("llama")), SENTENCES, tmp_path / "run",
                      tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert message.startswith("llama: refused: attention recomputed") and "\n" not in message, message
    assert not (tmp_path / "run").exists()


def falcon_alibi(heads: int = 4):
    """A tiny Falcon with ALiBi (the old architecture, a key head per query head), ``heads`` heads of 16 dimensions,
    and its hidden states under transformers' eager and SDPA attention."""
    import transformers

    from support.family_configs import tiny_family_config

    config = tiny_family_config("falcon")
    config.alibi, config.new_decoder_architecture, config.multi_query = True, False, False
    config.num_attention_heads = config.num_kv_heads = heads
    config.hidden_size = 16 * heads
    ids = torch.arange(3, 23)[None]
    hidden = {}
    for implementation in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(config, dtype=torch.float32, attn_implementation=implementation)
        with torch.no_grad():
            hidden[implementation] = model.eval()(input_ids=ids).last_hidden_state
    return model, float((hidden["eager"] - hidden["sdpa"]).abs().max())


def test_falcon_with_alibi_is_refused_while_its_attention_differs_and_exact_where_the_gate_proves_it(tokenizer,
                                                                                                    tmp_path):
    """Falcon with ALiBi depends on the release. Before transformers 5.25 its eager attention adds the bias twice
    and SDPA once: refused in one line that names the release. From 5.25 on the bias goes once, in the mask, and
    both agree: extracted with a slope per head, exact against the model's own eager attention."""
    import transformers
    from packaging.version import Version

    from qkviz.extraction.families.decoders import FALCON_ALIBI, FALCON_ALIBI_EXACT_FROM

    model, eager_from_sdpa = falcon_alibi()
    if Version(transformers.__version__) < Version(FALCON_ALIBI_EXACT_FROM):
        assert eager_from_sdpa > 1e-2
        with pytest.raises(QkvizError) as refusal:
            qkviz.extract(model, SENTENCES, tmp_path / "run", tokenizer=tokenizer, progress=False)
        message = str(refusal.value)
        assert FALCON_ALIBI in message and transformers.__version__ in message and "\n" not in message, message
        assert not (tmp_path / "run").exists()
        return
    assert eager_from_sdpa < 1e-5
    run = assert_exact("falcon-alibi", model.to(torch.float32), tokenizer, tmp_path / "run")
    slopes = [run.alibi_slope(0, head) for head in range(run.n_heads)]
    assert all(slope and slope > 0 for slope in slopes) and len(set(slopes)) == run.n_heads, slopes


def test_falcon_alibi_rounded_to_bfloat16_is_refused_in_one_line(tokenizer, tmp_path):
    """Falcon multiplies slope by position in bfloat16: with 12 heads, four slopes are not powers of two, and its
    bias departs from a slope per head within the gate's 40 tokens. Refused in one line saying by how much; nothing
    written (before 5.25, refused for the release)."""
    from qkviz.extraction.families.decoders import FALCON_ALIBI

    model, _ = falcon_alibi(heads=12)
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(model, SENTENCES, tmp_path / "run", tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert ("rounds slope x position to bfloat16" in message or FALCON_ALIBI in message) and "\n" not in message
    assert not (tmp_path / "run").exists()


def test_a_model_whose_attention_cannot_be_switched_is_one_line(tokenizer, tmp_path, monkeypatch):
    model = tiny_family_model("llama")

    def fixed(implementation, **kwargs):
        raise ValueError("this model's attention is fixed to sdpa")

    monkeypatch.setattr(model, "set_attn_implementation", fixed)
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(model, SENTENCES, tmp_path / "run", tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert "cannot be switched" in message and "fixed to sdpa" in message and "\n" not in message, message
    assert not (tmp_path / "run").exists()


def test_the_docs_table_is_the_families_table():
    from support import REPO

    from qkviz.extraction.families import families_markdown

    assert families_markdown() in (REPO / "docs" / "families.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("model_type, split", [("llama", True), ("phi", True), ("cohere", False), ("gptj", False),
                                              ("falcon", True), ("roformer", False)])
def test_the_logit_is_split_by_position_only_where_the_rotation_is_inverted(model_type, split, tokenizer, tmp_path):
    """Llama (rotate_half) and Phi (partial rotate_half) keep their rotary tables, and so does Falcon (rotate_half in
    its own attention code, from the tables its attention receives); Cohere (interleaved pairs), GPT-J and RoFormer
    (rotated inside their own code, by their own convention) are marked unsplit, and their logits stay one term."""
    from qkviz.analysis.logits.logit_decomposition import UNSPLIT, available_terms
    from qkviz.store import files as run_files

    run = qkviz.extract(tiny_family_model(model_type), SENTENCES, tmp_path / "run", tokenizer=tokenizer,
                        progress=False)
    assert run.has_part(run_files.ROTARY_COS) == split
    assert run.has_part(run_files.POSITION_UNSPLIT) == (not split)
    assert ("positional" in available_terms(run)) == split
    assert (available_terms(run) == (UNSPLIT,)) == (not split)


@pytest.mark.parametrize("model_type, why", [("cpmant", "relative-position bias"), ("longformer", "sliding window"),
                                             ("nystromformer", "landmark"), ("mra", "block resolutions"),
                                             ("yoso", "hashing"), ("perceiver", "latent vectors")])
def test_own_attention_code_that_is_not_softmax_of_q_k_is_refused_in_one_line(model_type, why, tokenizer, tmp_path):
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(tiny_family_model(model_type), SENTENCES, tmp_path / "run", tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert why in message and "\n" not in message, message
    assert not (tmp_path / "run").exists()


def test_a_declared_own_code_capture_that_sees_no_product_is_one_line(tokenizer, tmp_path, monkeypatch):
    """Where a release changes a family's own attention code so that the declared capture no longer finds its
    product of queries and keys (here: a head count that matches no product), nothing is captured and the family is
    refused in one line, nothing written."""
    from dataclasses import replace

    from qkviz.extraction.capture import own_code_capture
    from qkviz.extraction.adapters.discovery import OWN_CODE

    key = "modeling_falcon.FalconAttention"
    monkeypatch.setitem(own_code_capture.OWN_CODE_CAPTURES, key,
                        replace(own_code_capture.OWN_CODE_CAPTURES[key], heads=lambda module: 3))
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(tiny_family_model("falcon"), SENTENCES, tmp_path / "run", tokenizer=tokenizer, progress=False)
    message = str(refusal.value)
    assert OWN_CODE in message and "\n" not in message, message
    assert not (tmp_path / "run").exists()
