"""Every pass qkviz makes through a model sits behind one boundary: a failure of the model's own code in any step
of an extraction is a one-line refusal that names the family and the step, and nothing is left written."""

import re

import numpy as np
import pytest
import torch
from support import CORPUS
from support.family_configs import tiny_family_model
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz.core.errors import QkvizError
from qkviz.extraction.models import model_boundary

SENTENCES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:6]
STEPS = (model_boundary.DISCOVERY, model_boundary.GATE, model_boundary.LOGIT_PARTS, model_boundary.CAPTURE)


@pytest.fixture(scope="module")
def tokenizer():
    return decoder_tokenizer(CORPUS.read_text(encoding="utf-8").splitlines())


def forward_calls(model, tokenizer, tmp_path) -> int:
    """How many forward passes a whole extraction of ``model`` makes."""
    calls = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
    qkviz.extract(model, SENTENCES, tmp_path / "counted", tokenizer=tokenizer, progress=False)
    handle.remove()
    return len(calls)


def test_a_failure_in_any_pass_is_one_line_that_names_the_step_and_nothing_is_written(tokenizer, tmp_path):
    """The model's n-th forward pass raises what a family's own code might (a view that cannot be taken), for
    every n an extraction reaches: discovery, the gate's two passes, the rotary tables, the rotation check, the
    capture."""
    model = tiny_family_model("llama")
    n_calls = forward_calls(model, tokenizer, tmp_path)
    assert n_calls >= 6
    steps_seen = set()
    for failing in range(1, n_calls + 1):
        count = [0]

        def fail(module, args, failing=failing):
            count[0] += 1
            if count[0] == failing:
                raise RuntimeError("view size is not compatible with input tensor's size and stride\nsecond line")

        handle = model.register_forward_pre_hook(fail)
        out = tmp_path / f"run{failing}"
        try:
            with pytest.raises(QkvizError) as refusal:
                qkviz.extract(model, SENTENCES, out, tokenizer=tokenizer, progress=False)
        finally:
            handle.remove()
        message = str(refusal.value)
        assert "\n" not in message and message.startswith("llama: "), message
        assert "RuntimeError: view size is not compatible" in message and "nothing was written" in message
        steps_seen |= {step for step in STEPS if step in message}
        assert not out.exists(), f"pass {failing} of {n_calls}: {sorted(p.name for p in out.iterdir())}"
    assert steps_seen == set(STEPS)


def test_a_refused_capture_leaves_an_empty_directory_it_was_given_empty(tokenizer, tmp_path):
    model = tiny_family_model("llama")
    out = tmp_path / "given"
    out.mkdir()
    capture_calls = [0]

    def fail_late(module, args, kwargs):
        capture_calls[0] += 1
        if capture_calls[0] > 6:          # past the probe, the gate and the logit parts: inside the capture
            raise RuntimeError("cuBLAS failure")

    handle = model.register_forward_pre_hook(fail_late, with_kwargs=True)
    with pytest.raises(QkvizError, match=re.escape(model_boundary.CAPTURE)):
        qkviz.extract(model, SENTENCES, out, tokenizer=tokenizer, progress=False, batch_size=1)
    handle.remove()
    assert out.is_dir() and not any(out.iterdir())


def test_a_model_with_a_scalar_parameter_is_hashed_and_exact(tokenizer, tmp_path):
    """A 0-dim parameter (a learned temperature or gate, as some families have) once ended the run's identity hash
    in a traceback."""
    model = tiny_family_model("llama")
    model.register_parameter("temperature", torch.nn.Parameter(torch.tensor(0.5)))
    first = qkviz.extract(model, SENTENCES, tmp_path / "a", tokenizer=tokenizer, progress=False)
    with torch.no_grad():
        model.temperature.fill_(0.25)
    second = qkviz.extract(model, SENTENCES, tmp_path / "b", tokenizer=tokenizer, progress=False)
    assert first.manifest["extraction"]["exactness_gate"]["max_error"] <= 1e-5
    assert first.manifest["model"]["weights_sha256"] != second.manifest["model"]["weights_sha256"]


def test_memory_running_out_in_the_capture_says_so_keeps_what_was_written_and_resumes(tokenizer, tmp_path):
    """Running out of memory is not the family's fault: the refusal says what to lower, and the same extraction
    with a smaller batch resumes from the chunks already written."""
    from qkviz.extraction.streaming import text_capture

    model = tiny_family_model("llama")
    reference = qkviz.extract(model, SENTENCES, tmp_path / "reference", tokenizer=tokenizer, progress=False)
    chunks = [0]
    real_chunk = text_capture._capture_chunk

    def exhaust_on_second_chunk(*args, **kwargs):
        chunks[0] += 1
        if chunks[0] == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_chunk(*args, **kwargs)

    out = tmp_path / "run"
    patch = pytest.MonkeyPatch()
    patch.setattr(text_capture, "CHUNK_BYTES", 2 * text_capture.bytes_per_token(
        qkviz.extraction.adapters.ModelShape(2, 4, 2, 16), np.dtype("float32")) * 40)
    patch.setattr(text_capture, "_capture_chunk", exhaust_on_second_chunk)
    try:
        with pytest.raises(model_boundary.OutOfMemory) as refusal:
            qkviz.extract(model, SENTENCES, out, tokenizer=tokenizer, progress=False)
        message = str(refusal.value)
        assert "ran out of memory" in message and "lower batch_size and it resumes" in message, message
        assert "\n" not in message and out.is_dir()
        resumed = qkviz.extract(model, SENTENCES, out, tokenizer=tokenizer, progress=False, batch_size=1)
    finally:
        patch.undo()
    np.testing.assert_allclose(resumed.queries(1, 2), reference.queries(1, 2), atol=1e-5)
