"""Every text model type transformers registers, through qkviz on a tiny random model: exact, refused in one line,
or its tiny configuration cannot be built (stated). A traceback, a time-out or a run whose attention differs from
the model's own by more than the exactness gate allows is a failure of qkviz; a run within the gate's bound that
the families page does not call exact (:data:`NOT_SHOWN`) is said as such.

Used by ``python -m bench.family_sweep`` (all types, on the pinned and the newest transformers the range allows, into
``bench/results/family_sweep.json``) and by ``tests/integration/models/test_family_sweep.py`` (the random batch).

*Exact* is checked twice and independently of each other: the exactness gate passed, and the attention recomputed
from the stored run (``Run.attention``) matches the model's own eager attention (``output_attentions``) on three
sentences of different lengths in one padded batch as docs/families.md defines it (``support.family_exactness``:
within 1e-5, a type's own bound only for a stated reason of precision, and at least 0.05 from uniform somewhere;
the largest error and departure are recorded).
"""

from __future__ import annotations

import contextlib
import random
import signal
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.models.auto import modeling_auto

from qkviz.extraction.capture import forward
from qkviz.extraction.gate import FLOAT32_BOUND

from .family_configs import tiny_family_model
from .family_exactness import EXACT, MIN_DEPARTURE, NOT_SHOWN, OWN_BOUNDS, TOLERANCE, WRONG, bound, judge  # noqa: F401

REFUSED, NO_CONFIG = "refused", "config cannot be built"
#: outcomes that are qkviz's failures (:data:`WRONG`: beyond the exactness gate's float32 bound, :data:`FLOAT32_BOUND`)
TRACEBACK, TIMEOUT = "traceback", "timeout"
FAILURES = (TRACEBACK, TIMEOUT, WRONG)
CHECKED_SENTENCES = 3
SECONDS_PER_TYPE = 120

#: the 57 model types of issue 27 (qkviz's families table, ``qkviz.extraction.families``)
ISSUE_27 = ("bert roberta xlm-roberta camembert distilbert electra modernbert albert mpnet deberta deberta-v2 gpt2 "
            "gpt_bigcode opt biogpt xglm bloom mpt falcon llama mistral ministral mixtral qwen2 qwen2_moe qwen3 "
            "qwen3_moe qwen3_next gemma gemma2 gemma3_text phi phi3 gpt_neox gptj codegen gpt_neo olmo olmo2 olmoe "
            "stablelm starcoder2 cohere cohere2 granite glm glm4 helium nemotron exaone4 smollm3 arcee ernie4_5 "
            "seed_oss deepseek_v3 gpt_oss llama4_text").split()
#: the random batch: 32 model types that no issue names, drawn by :func:`random_batch` (seed 36) from the 190
#: registered text types of transformers 5.23.0 not in :data:`ISSUE_27`; written out so that a new release's registry
#: does not change the batch. Not held out: their tiny configurations were fixed type by type after they were drawn
#: (a regression batch; the types a new release adds are what no one tuned on)
RANDOM_BATCH_SEED = 36
RANDOM_BATCH_SIZE = 32
RANDOM_BATCH = ("afmoe bailing_hybrid big_bird convbert cpmant deepseek_v2 deepseek_v32 deepseek_v4 eurobert falcon_mamba "
            "gemma4_unified_assistant glm4_moe gpt-sw3 gpt_neox_japanese granitemoe granitemoeshared hyperclovax "
            "inkling2_text jamba jina_embeddings_v3 kimi_linear kolibri1 longformer mamba2 megatron-bert "
            "modernbert-decoder nemotron_h perceiver phimoe rembert whisper xlm").split()


#: a sub-configuration by one of these names makes a model type multimodal, not a text model type
OTHER_MODALITIES = ("vision", "audio", "image", "speech", "vq")


def registered_text_types() -> list[str]:
    """Every model type transformers registers with a causal or masked language-model head, less the
    encoder-decoders (sequence-to-sequence) and the multimodal types (a vision, audio or image sub-configuration):
    the text decoders and encoders."""
    causal = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    masked = set(modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    types = sorted((causal | masked) - set(modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES))
    return [model_type for model_type in types if not _multimodal(model_type)]


def _multimodal(model_type: str) -> bool:
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except Exception:  # noqa: BLE001 -- a default configuration that cannot be built is judged by the sweep
        return False
    names = getattr(config, "sub_configs", None) or {}
    return any(modality in name for name in names for modality in OTHER_MODALITIES)


def random_batch(candidates: list[str]) -> list[str]:
    """:data:`RANDOM_BATCH_SIZE` types of ``candidates`` (registered text types not in :data:`ISSUE_27`), drawn with
    :data:`RANDOM_BATCH_SEED`."""
    pool = sorted(set(candidates) - set(ISSUE_27))
    return sorted(random.Random(RANDOM_BATCH_SEED).sample(pool, RANDOM_BATCH_SIZE))


class _TimeOut(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    """Raise :class:`_TimeOut` in the main thread after ``seconds`` (SIGALRM; Unix)."""
    def expire(_signal, _frame):
        raise _TimeOut()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def model_attentions(model, token_ids: list[list[int]], layers: list[int] | None = None) -> list[torch.Tensor]:
    """The model's eager attention ``[batch, head, query, key]`` of every layer that has attention (of the model
    layers ``layers`` where given: a hybrid model's other layers may return weights of their own), for one
    right-padded batch of ``token_ids``, computed as qkviz's own passes run the model: whole, without a cache."""
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.zeros((len(token_ids), width), dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        mask[row, :len(ids)] = 1
    model.set_attn_implementation("eager")
    model.config._attn_implementation = "eager"    # families with their own attention code ignore the call above
    device = next(model.parameters()).device
    with torch.no_grad():
        attentions = forward(model, input_ids=input_ids.to(device), attention_mask=mask.to(device),
                             output_attentions=True).attentions
    if layers is not None and len(attentions) > len(layers) and max(layers) < len(attentions):
        return [attentions[layer] for layer in layers]      # one entry per model layer: the attention layers' own
    return [layer for layer in attentions if layer is not None]


def eager_error(model, run, sentences: int = CHECKED_SENTENCES) -> tuple[float, float]:
    """``(largest |recomputed - model|, largest departure of the model's attention from uniform)`` over every
    layer, head and pair of the run's first ``sentences``; the second shows that the comparison could fail. The
    model's attention is computed on the sentences in one padded batch, or each alone where the run's sentences
    passed alone (its manifest's batch size 1: a family whose own code reads the padding, ConvBERT)."""
    token_ids = [run.tokens.token_id.to_numpy()[run.sentence_tokens(s)].tolist()
                 for s in range(min(sentences, run.n_sentences))]
    model_layers = run.manifest["shape"].get("model_layers")
    subset = model_layers is not None and list(model_layers) == sorted(set(model_layers))   # not a shared layer's calls
    layers = list(model_layers) if subset else None
    if run.manifest["extraction"]["batch_size"] == 1:
        alone = [model_attentions(model, [ids], layers) for ids in token_ids]
        attentions = [[sentence[layer][0] for sentence in alone] for layer in range(len(alone[0]))]
    else:
        attentions = model_attentions(model, token_ids, layers)
    if len(attentions) != run.n_layers:
        return float("inf"), 0.0
    worst, departure = 0.0, 0.0
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            for row, ids in enumerate(token_ids):
                n = len(ids)
                ours = run.attention(layer, head, row)
                theirs = attentions[layer][row][head, :n, :n].double().cpu().numpy()
                worst = max(worst, float(np.abs(ours - theirs).max()))
                allowed = ours > 0
                departure = max(departure, float(np.abs(theirs - allowed / allowed.sum(1, keepdims=True)).max()))
    return worst, departure


def sweep_type(model_type: str, sentences: list[str], tokenizer, seconds: int = SECONDS_PER_TYPE) -> dict:
    """One model type through qkviz: ``{"model_type", "status", ...}`` with the refusal's line, the reason the
    configuration cannot be built, or the run's error and departure from uniform (judged by
    :func:`support.family_exactness.judge`); :data:`TRACEBACK`, :data:`TIMEOUT` and :data:`WRONG` are failures."""
    import qkviz
    from qkviz.core.errors import QkvizError

    started = time.perf_counter()
    row: dict = {"model_type": model_type}
    try:
        with time_limit(seconds):
            try:
                model = tiny_family_model(model_type)
            except _TimeOut:
                raise
            except Exception as error:  # noqa: BLE001 -- a configuration the tiny shape does not fit
                row.update(status=NO_CONFIG, why=_line(error))
            else:
                with tempfile.TemporaryDirectory() as directory:
                    out = Path(directory) / "run"
                    try:
                        run = qkviz.extract(model, sentences, out, tokenizer=tokenizer, progress=False)
                    except QkvizError as refusal:
                        message = str(refusal)
                        row.update(status=REFUSED if "\n" not in message and not out.exists() else TRACEBACK,
                                   why=message, left_a_run=out.exists())
                    else:
                        error, departure = eager_error(model, run)
                        row.update(status=judge(model_type, error, departure, FLOAT32_BOUND), max_error=error,
                                   departure_from_uniform=departure,
                                   gate_error=run.manifest["extraction"]["exactness_gate"]["max_error"],
                                   layers=run.n_layers, heads=run.n_heads, kv_heads=run.n_kv_heads)
    except _TimeOut:
        row.update(status=TIMEOUT, why=f"no outcome within {seconds} s")
    except Exception as error:  # noqa: BLE001 -- what the sweep exists to find
        frames = traceback.extract_tb(error.__traceback__)[-3:]
        row.update(status=TRACEBACK, why=_line(error),
                   where=[f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames])
    row["seconds"] = round(time.perf_counter() - started, 2)
    row["transformers"] = transformers.__version__
    return row


def _line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:240]}"
