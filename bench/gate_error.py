"""The exactness gate's error and cost: what its bounds (``qkviz.extraction.gate.exactness_gate.tolerance``) are set from.

For every exact model type of ``qkviz.extraction.families.MODEL_FAMILIES`` (a tiny random model of it,
``tests/support/family_configs.py``) and the bundled models (MiniLM, SmolLM2), the gate's largest difference
between recomputed and model attention on its first batch, measured (not judged) in:

- ``float32``: the model in float32;
- ``float16`` / ``bfloat16``: the model cast to that precision, compared in it (what the gate does where the
  float32 weights do not fit);
- ``float16 on float32 weights`` / ``bfloat16 on float32 weights``: the same half model, lifted to float32
  for the gate (``qkviz.extraction.gate.float32_reference``; what the gate does otherwise).

The same on the long input (``qkviz.extraction.gate.attention_span``) of tiny windowed families whose window is
:data:`LONG_SPAN` tokens, longer than the first batch, and on a deep model (``bench.modern_model``'s random
32-layer Llama). Beside them, what a term left out costs: gpt-oss with its sink logits (which qkviz stores) left out of the
recomputation, in each precision. Then what the gate costs: its seconds and a whole extraction's
over the default corpus on each bundled model, min / median / max of ``--repeats`` (``--extract-repeats``),
alternating.

    python -m bench.gate_error            # writes bench/results/gate_error.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import tempfile
import time
from pathlib import Path

import torch
import transformers

from bench.harness import Recorder, smoke_arguments, summary
from bench.modern_model import make_model
from bench.support.tiny_models import decoder_tokenizer
from tests.support.family_configs import OVERRIDES, tiny_family_config, tiny_family_model

import qkviz
from qkviz.extraction import DEFAULT_CORPUS, load_corpus, load_model, model_adapter
from qkviz.extraction.adapters import EXACT, MODEL_FAMILIES
from qkviz.extraction.capture import LayerAttentionSettings
from qkviz.extraction.gate import GateInput, compared_rows, float32_weights, long_input_tokens, measure
from qkviz.extraction.models import model_for_extraction
from qkviz.extraction.streaming import attention_layers
from qkviz.extraction.writing import TextInput
from bench.figures.results import Results, figure, model_name, source, span

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "sentences.txt"
HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}
#: the term left out: gpt-oss's sink logits, which qkviz stores and uses; left out of the recomputation here
MISSING_TERM = "gpt_oss"
#: the window of the long-input measurements, longer than the gate's first batch (40 tokens)
LONG_SPAN = 48
#: the families whose window is measured on the long input, and the configuration attribute that sets it
WINDOWED = (("mistral", "sliding_window"), ("gemma2", "sliding_window"), ("gpt_neo", "window_size"),
            ("modernbert", "local_attention"))
DEEP = "random 32-layer Llama (bench/modern_model.py)"


@contextlib.contextmanager
def sinks_left_out():
    """The gate's recomputation without the sink logits the capture recorded: a term left out, measured."""
    original = LayerAttentionSettings.rule

    def without_sink(self, head):
        return dataclasses.replace(original(self, head), sink=None)

    LayerAttentionSettings.rule = without_sink
    try:
        yield
    finally:
        LayerAttentionSettings.rule = original


def gate_text(loaded, lines: list[str], max_length: int | None = None) -> TextInput:
    return TextInput.select(loaded, model_adapter(loaded.model), load_corpus(lines), max_tokens=None,
                            max_sentences=8, seed=0, max_length=max_length)


def first_batch(text: TextInput) -> GateInput:
    return GateInput(*text.gate_batch())


def long_batch(text: TextInput, span: int) -> GateInput:
    """The gate's long input for a window or chunk of ``span`` tokens: the run's longest sequence, cut past it."""
    longest = max(text.sentences, key=len).token_ids
    n = long_input_tokens(span, len(longest))
    input_ids = torch.tensor([longest[:n]])
    return GateInput({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}, [n], compared_rows(n))


def gate_error(text: TextInput, batch: GateInput, lift: bool) -> float:
    """The gate's largest error on ``batch``, in the model's precision or (``lift``) on float32 weights."""
    model = text.loaded.model
    with float32_weights(model) if lift else contextlib.nullcontext():
        return measure(model, text.adapter, text.shape, attention_layers(model, text.adapter, text.shape), batch)[1][0]


def errors_by_precision(text: TextInput, batch_of=first_batch) -> dict[str, float]:
    """The gate's error on ``text``'s model (float32) in float32, and in each half precision: compared in it and
    on float32 weights (the model is cast back to float32 after)."""
    model = text.loaded.model
    row = {"tokens": batch_of(text).describe()["tokens"], "float32": gate_error(text, batch_of(text), lift=False)}
    for name, dtype in HALF.items():
        model.to(dtype)
        row[name] = gate_error(text, batch_of(text), lift=False)
        row[f"{name} on float32 weights"] = gate_error(text, batch_of(text), lift=True)
        model.float()
    return row


def tiny_errors(model: torch.nn.Module, tokenizer, lines: list[str], batch_of=first_batch,
                max_length: int | None = None) -> dict[str, float]:
    with model_for_extraction(model, tokenizer, None, False) as loaded:
        return errors_by_precision(gate_text(loaded, lines, max_length), batch_of)


def windowed_errors(model_type: str, attribute: str, tokenizer, lines: list[str]) -> dict:
    """The long input's error on a tiny ``model_type`` whose window (``attribute``) is :data:`LONG_SPAN` tokens,
    longer than the gate's first batch, over sentences longer than it."""
    own = OVERRIDES.get(model_type, {})
    OVERRIDES[model_type] = {**own, attribute: LONG_SPAN}
    try:
        config = tiny_family_config(model_type)
    finally:
        OVERRIDES[model_type] = own
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config, dtype=torch.float32).eval()
    long_lines = [" ".join(lines[i:i + 4]) for i in range(0, 40, 4)]
    return {"model_type": model_type, "span": LONG_SPAN,
            **tiny_errors(model, tokenizer, long_lines, lambda text: long_batch(text, LONG_SPAN), max_length=128)}


def bundled_errors(spec: str, name: str, lines: list[str]) -> dict[str, float]:
    loaded = load_model(spec)
    return {"model": name, **errors_by_precision(gate_text(loaded, lines))}


def cost(name: str, repeats: int, extract_repeats: int) -> dict:
    """The gate's seconds on ``name`` (as ``qkviz extract`` runs it: ``TextInput.check_exactness``) and a whole
    extraction's over the default corpus, alternating, min / median / max of ``repeats`` (of the gate; the first
    ``extract_repeats`` of them followed by an extraction)."""
    loaded = load_model(name)
    text = TextInput.select(loaded, model_adapter(loaded.model), load_corpus(DEFAULT_CORPUS), max_tokens=None,
                            max_sentences=None, seed=0, max_length=None)
    text.check_exactness()                                  # torch's first pass is slower than the others
    gate, extract = [], []
    for repeat in range(repeats):
        started = time.perf_counter()
        result = text.check_exactness()
        gate.append(time.perf_counter() - started)
        if repeat >= extract_repeats:
            continue
        with tempfile.TemporaryDirectory() as directory:
            started = time.perf_counter()
            run = qkviz.extract(loaded.model, DEFAULT_CORPUS, Path(directory) / "run", tokenizer=loaded.tokenizer)
            extract.append(time.perf_counter() - started)
            tokens = run.n_tokens
    return {"model": name, "tokens": tokens, "gate_tokens": result.inputs, "gate_seconds": summary(gate),
            "extract_seconds": summary(extract),
            "gate_share_of_extract": round(sorted(gate)[len(gate) // 2] / sorted(extract)[len(extract) // 2], 4)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timings of the gate")
    parser.add_argument("--extract-repeats", type=int, default=3, help="timings of a whole extraction")
    parser.add_argument("--families", nargs="*", help="model types (default: every exact one)")
    parser.add_argument("--no-deep", action="store_true", help=f"leave out the {DEEP}")
    parser.add_argument("--no-cost", action="store_true", help="skip the timing of the gate and the extraction")
    parser.add_argument("--bundled", nargs="*", default=["minilm", "smollm2"], help="bundled models measured")
    parser.add_argument("--out", type=Path, default=None, help="the result file (default bench/results/gate_error.json)")
    args = smoke_arguments(parser, argv, families=["llama"], no_deep=True, no_cost=True, bundled=[])
    recorder = Recorder("gate_error", vars(args), args.out)
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
    tokenizer = decoder_tokenizer(lines)
    chosen = args.families or [family.model_type for family in MODEL_FAMILIES if family.status == EXACT]
    families = []
    for model_type in chosen:
        families.append({"model_type": model_type, **tiny_errors(tiny_family_model(model_type), tokenizer, lines)})
        print(families[-1], flush=True)
    windowed = [windowed_errors(model_type, attribute, tokenizer, lines) for model_type, attribute in WINDOWED
                if not args.smoke or model_type == "mistral"]
    print(windowed, flush=True)
    with sinks_left_out():
        missing = {"model_type": MISSING_TERM, "term": "sink logits",
                   **tiny_errors(tiny_family_model(MISSING_TERM), tokenizer, lines)}
    print(missing, flush=True)
    bundled = [bundled_errors(name, name, lines) for name in args.bundled]
    if not args.no_deep:
        with tempfile.TemporaryDirectory() as directory:
            bundled.append(bundled_errors(str(make_model(Path(directory) / "model")), DEEP, lines))
    print(bundled, flush=True)
    columns = [key for key in families[0] if key not in ("model_type", "tokens")]
    rows = families + windowed + bundled
    worst = {column: max(row[column] for row in rows) for column in columns}
    path = recorder.write(
        families=families, windowed=windowed, bundled=bundled, missing_term=missing, worst=worst,
        cost=[] if args.no_cost else [cost(name, args.repeats, args.extract_repeats) for name in ("minilm", "smollm2")])
    print(f"wrote {path}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

@figure("gate-cost")
def gate_cost(results: Results) -> str:
    """benchmarks.md's overhead: the exactness gate's seconds against a whole extraction's, and its error."""
    result = results("gate_error")
    cost = result["cost"]
    gate_runs, extract_runs = cost[0]["gate_seconds"]["runs"], cost[0]["extract_seconds"]["runs"]

    def seconds(values: dict, digits: int) -> str:
        return span(values, digits) if values["runs"] > 1 else f"{values['median']:.{digits}f} s"

    rows = "\n".join(f"| {model_name(row['model'])} | {row['tokens']:,} | {seconds(row['gate_seconds'], 2)} | "
                     f"{seconds(row['extract_seconds'], 1)} | {row['gate_share_of_extract']:.2%} |" for row in cost)
    extract_head = (f"min / median / max of {extract_runs}" if extract_runs > 1 else "one run")
    every = result["families"] + result["windowed"] + result["bundled"]
    worst = max(every, key=lambda row: row["float32"])
    lifted = max(max(row["float16 on float32 weights"], row["bfloat16 on float32 weights"]) for row in every)
    own = "; ".join(f"{model_name(row['model'])} {row['float16']:.1e} in float16, {row['bfloat16']:.1e} in bfloat16"
                    for row in result["bundled"])
    return (f"| model | tokens extracted | the gate, min / median / max of {gate_runs} | the whole `qkviz.extract`, "
            f"{extract_head} | gate / extract (medians) |\n|---|---|---|---|---|\n{rows}\n\n"
            f"The gate's largest error over {len(result['families'])} exact families' tiny models, "
            f"{len(result['windowed'])} windowed ones on their long input, MiniLM, SmolLM2 and a random 32-layer "
            f"Llama: {worst['float32']:.1e} in float32 ({worst.get('model') or worst['model_type']}), {lifted:.1e} for "
            f"half-precision models on float32 weights; compared in their own half precision instead: {own}. A term "
            f"left out (gpt-oss's sink logits): {result['missing_term']['float32']:.2f}. `python -m bench.gate_error` "
            f"({source(results, 'gate_error')}).\n")


if __name__ == "__main__":
    main()
