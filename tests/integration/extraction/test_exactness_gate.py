"""The exactness gate sees what the model does on the run: a window longer than its first batch acts on the run's
longest sequence, and a half-precision model is held to the float32 bound, which a term of about 1/40 cannot pass.

The models are tiny random ones (``tests/support/family_configs.py``) extracted in memory; a family whose capture
misses its window, or whose attention adds a term, is made by patching a real family, so that the gate has
something it must catch.
"""

import re

import pytest
import torch
from support import CORPUS
from support.family_configs import OVERRIDES, tiny_family_config, tiny_family_model
from support.tiny_models import decoder_tokenizer

import qkviz
import transformers
from qkviz.core.errors import QkvizError
from qkviz.extraction.capture import recorder as capture
from qkviz.extraction.gate.attention_span import SPAN_MARGIN
from qkviz.extraction.gate.exactness_gate import GATE_TOKENS, tolerance

LINES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
#: a window longer than the gate's first batch
SPAN = GATE_TOKENS + 8
#: sentences longer than :data:`SPAN` (four of the corpus's each), cut to fit the tiny model's context
LONG = [" ".join(LINES[i:i + 4]) for i in range(0, 24, 4)]
MAX_LENGTH = 120


@pytest.fixture(scope="module")
def tokenizer():
    return decoder_tokenizer(CORPUS.read_text(encoding="utf-8").splitlines())


def windowed_mistral(span: int = SPAN) -> torch.nn.Module:
    """A tiny Mistral whose sliding window is ``span`` tokens."""
    own = OVERRIDES["mistral"]
    OVERRIDES["mistral"] = {**own, "sliding_window": span}
    try:
        config = tiny_family_config("mistral")
    finally:
        OVERRIDES["mistral"] = own
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config, dtype=torch.float32).eval()


def test_a_window_longer_than_the_first_batch_is_checked_on_the_longest_sequence(tokenizer, tmp_path):
    run = qkviz.extract(windowed_mistral(), LONG, tmp_path / "run", tokenizer=tokenizer, max_length=MAX_LENGTH)
    gate = run.manifest["extraction"]["exactness_gate"]
    assert max(len(range(run.n_tokens)[run.sentence_tokens(s)]) for s in range(run.n_sentences)) > SPAN + SPAN_MARGIN
    assert gate["window"]["span"] == SPAN and gate["window"]["exercised"], gate
    assert gate["inputs"][-1]["tokens"] == [SPAN + SPAN_MARGIN] and max(gate["inputs"][0]["tokens"]) <= SPAN
    assert gate["max_error"] <= gate["bound"] == tolerance(torch.float32)


def test_a_window_the_capture_misses_is_refused_on_the_long_input(tokenizer, tmp_path, monkeypatch):
    """A family whose layers pass their window under a name qkviz does not read: the first batch (40 tokens, inside
    the window) cannot tell, the long input can, and nothing is written."""
    record = capture.AttentionRecorder.record

    def forgetting_the_window(self, module, query, key, value, scaling, kwargs):
        record(self, module, query, key, value, scaling, {k: v for k, v in kwargs.items() if k != "sliding_window"})

    monkeypatch.setattr(capture.AttentionRecorder, "record", forgetting_the_window)
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(windowed_mistral(), LONG, tmp_path / "run", tokenizer=tokenizer, max_length=MAX_LENGTH)
    message = str(refusal.value)
    assert message.startswith("mistral: refused: attention recomputed") and "\n" not in message, message
    assert f"on {SPAN + SPAN_MARGIN} tokens" in message, message
    assert not (tmp_path / "run").exists()


def test_a_window_the_run_never_reaches_is_said_to_be_unchecked(tokenizer, tmp_path):
    short = [line for line in LINES if len(tokenizer(line).input_ids) < SPAN][:6]
    run = qkviz.extract(windowed_mistral(), short, tmp_path / "run", tokenizer=tokenizer)
    window = run.manifest["extraction"]["exactness_gate"]["window"]
    assert window["span"] == SPAN and not window["exercised"] and "never acts in this run" in window["note"], window
    assert len(run.manifest["extraction"]["exactness_gate"]["inputs"]) == 1


def test_a_model_without_a_window_has_one_gate_input(tokenizer, tmp_path):
    run = qkviz.extract(tiny_family_model("llama"), LONG, tmp_path / "run", tokenizer=tokenizer,
                        max_length=MAX_LENGTH)
    gate = run.manifest["extraction"]["exactness_gate"]
    assert gate["window"] == {"span": None, "exercised": False} and len(gate["inputs"]) == 1


def add_logit_term(model: torch.nn.Module, delta: float) -> None:
    """Make every attention layer of a tiny Llama add ``delta`` to the logit of the first key, through the attention
    mask its attention functions add (as ALiBi families do): a term ``q . k`` cannot express."""
    def with_term(_module, args, kwargs):
        hidden = kwargs["hidden_states"]
        n = hidden.shape[1]
        mask = kwargs.get("attention_mask")
        if mask is None:
            mask = torch.ones(n, n, dtype=torch.bool).tril()
        if mask.dtype == torch.bool:
            mask = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
        term = torch.zeros(n, mask.shape[-1])
        term[:, 0] = delta
        kwargs["attention_mask"] = (mask.float() + term).to(hidden.dtype)
        return args, kwargs

    for layer in model.layers:
        layer.self_attn.register_forward_pre_hook(with_term, with_kwargs=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_is_checked_on_float32_weights_and_left_as_it_was(dtype, tokenizer, tmp_path):
    model = tiny_family_model("llama").to(dtype)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    buffers = {name: buffer.dtype for name, buffer in model.named_buffers()}
    run = qkviz.extract(model, LINES[:6], tmp_path / "run", tokenizer=tokenizer)
    gate = run.manifest["extraction"]["exactness_gate"]
    assert gate["compared_in"] == "float32" and gate["max_error"] <= gate["bound"] == tolerance(torch.float32)
    after = model.state_dict()
    assert all(torch.equal(after[name], tensor) and after[name].dtype == tensor.dtype for name, tensor in before.items())
    assert {name: buffer.dtype for name, buffer in model.named_buffers()} == buffers


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_refuses_a_term_of_a_fortieth(dtype, tokenizer, tmp_path):
    """A first-key term of 0.1 moves a probability by about 1/40: below the bound a gate in half precision needs
    (its own rounding), far above the float32 one."""
    model = tiny_family_model("llama").to(dtype)
    add_logit_term(model, 0.1)
    with pytest.raises(QkvizError) as refusal:
        qkviz.extract(model, LINES[:6], tmp_path / "run", tokenizer=tokenizer)
    message = str(refusal.value)
    assert message.startswith("llama: refused: attention recomputed") and "\n" not in message, message
    error = float(re.search(r"differs from the model's own by (\S+) ", message).group(1))
    assert error < tolerance(dtype), "the term is not the small one a comparison in half precision lets through"
    assert not (tmp_path / "run").exists()


def test_without_room_for_float32_weights_the_gate_compares_in_half_precision(tokenizer, tmp_path, monkeypatch,
                                                                               caplog):
    from qkviz.extraction.gate import float32_reference

    monkeypatch.setattr(float32_reference, "_free_bytes", lambda device: 0)
    with caplog.at_level("WARNING", logger="qkviz.extraction.gate.float32_reference"):
        run = qkviz.extract(tiny_family_model("llama").to(torch.bfloat16), LINES[:6], tmp_path / "run",
                            tokenizer=tokenizer)
    gate = run.manifest["extraction"]["exactness_gate"]
    assert gate["compared_in"] == "bfloat16" and gate["bound"] == tolerance(torch.bfloat16)
    assert "compares in the model's own bfloat16" in caplog.text
