"""Every model type of qkviz's families table, measured: exact (with its error) or refused (with its line).

For each model type of ``qkviz.extraction.families.MODEL_FAMILIES``, a tiny random model of it
(``tests/support/family_configs.py``) is extracted in memory over the first sentences of the corpus; an exact
one's attention recomputed from the run (``Run.attention``) is compared with the model's own eager attention
on three sentences in one padded batch, by the comparison the tests use (``tests/support/family_sweep.eager_error``,
which switches an own-code family to its eager code through its configuration), and judged by the families page's
definition (``tests/support/family_exactness``, the one the sweep uses): "exact" only within ``TOLERANCE`` (1e-5; a
type's own bound only for a stated reason of precision) and at least ``MIN_DEPARTURE`` from uniform somewhere,
"wrong" beyond the exactness gate's bound, else "not shown exact"; the result records the definition it followed.
The exactness gate's own error is read from the manifest. A refused one's one-line
error is kept. Then the exactness gate's time and error on the bundled models (MiniLM, SmolLM2), min / median / max
of five runs.

    python -m bench.families            # writes bench/results/families.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent

from bench.harness import Recorder, smoke_arguments, summary  # noqa: E402
from tests.support.family_configs import tiny_family_model  # noqa: E402
from tests.support.family_exactness import FAMILY_EXACT, MIN_DEPARTURE, TOLERANCE, judge  # noqa: E402
from tests.support.family_sweep import eager_error  # noqa: E402
from bench.support.tiny_models import decoder_tokenizer  # noqa: E402

import qkviz  # noqa: E402
from qkviz.core import QkvizError  # noqa: E402
from qkviz.extraction.adapters import MODEL_FAMILIES, REFUSED, counts  # noqa: E402
from qkviz.extraction.gate import FLOAT32_BOUND  # noqa: E402
from bench.figures.definitions import record  # noqa: E402
from bench.figures.results import Results, figure, source  # noqa: E402

CORPUS = REPO / "data" / "sentences.txt"


def measure_family(model_type: str, status: str, sentences: list[str], tokenizer) -> dict:
    model = tiny_family_model(model_type)
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        try:
            run = qkviz.extract(model, sentences, Path(directory) / "run", tokenizer=tokenizer, progress=False)
        except QkvizError as error:
            return {"model_type": model_type, "expected": status, "status": REFUSED, "refusal": str(error),
                    "seconds": round(time.perf_counter() - started, 2)}
        seconds = time.perf_counter() - started
        error, departure = eager_error(model, run)
        return {"model_type": model_type, "expected": status, "status": judge(model_type, error, departure, FLOAT32_BOUND),
                "max_error": error, "departure_from_uniform": departure,
                "gate_error": run.manifest["extraction"]["exactness_gate"]["max_error"],
                "layers": run.n_layers, "heads": run.n_heads, "kv_heads": run.n_kv_heads, "head_dim": run.head_dim,
                "seconds": round(seconds, 2)}


def gate_timing(name: str, repeats: int) -> dict:
    """The exactness gate's seconds (min / median / max of ``repeats``) and error on a bundled model."""
    from qkviz.extraction import DEFAULT_CORPUS, load_corpus, load_model, model_adapter
    from qkviz.extraction.writing import TextInput

    loaded = load_model(name)
    adapter = model_adapter(loaded.model)
    text = TextInput.select(loaded, adapter, load_corpus(DEFAULT_CORPUS), max_tokens=None, max_sentences=8, seed=0,
                            max_length=None)
    text.check_exactness()                                  # torch's first pass is slower than the others
    seconds, error = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        error = text.check_exactness().max_error
        seconds.append(time.perf_counter() - started)
    return {"model": name, "seconds": summary(seconds), "max_error": error}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/families.json)")
    args = smoke_arguments(parser, argv, out='out', sentences=4, repeats=1)
    recorder = Recorder("families", vars(args), args.out)
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
    tokenizer = decoder_tokenizer(lines)
    rows = []
    for family in MODEL_FAMILIES:
        rows.append(measure_family(family.model_type, family.status, lines[:args.sentences], tokenizer))
        print(rows[-1]["model_type"], rows[-1]["status"], rows[-1].get("max_error", ""), flush=True)
    exact = [row for row in rows if row["status"] == "exact"]
    refused = [row for row in rows if row["status"] == REFUSED]
    path = recorder.write(
        families=rows, table=counts(), definition=record(FAMILY_EXACT),
        bound={"tolerance": TOLERANCE, "min_departure": MIN_DEPARTURE},
        measured={"exact": len(exact), "refused": len(refused), "not_shown_exact": len(rows) - len(exact) - len(refused)},
        agrees_with_table=all(row["status"] == row["expected"] for row in rows),
        worst_error=max(row["max_error"] for row in rows if "max_error" in row),
        gate=[gate_timing(name, args.repeats) for name in ("minilm", "smollm2")])
    print(f"wrote {path}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

@figure("families")
def families(results: Results) -> str:
    result = results("families")
    exact = [row for row in result["families"] if row["status"] == "exact"]
    worst = max(exact, key=lambda row: row["max_error"])
    agrees = "as the table says" if result["agrees_with_table"] else "**not** as the table says"
    wrong = [row for row in result["families"] if row["status"] not in ("exact", REFUSED)]
    if wrong:
        agrees += "; **not exact**: " + ", ".join(
            f"{row['model_type']} ({row['status']}, error {row['max_error']:.1e}, {row['departure_from_uniform']:.2f} from uniform)"
            for row in wrong)
    gates = "; ".join(f"{gate['model']} {gate['seconds']['min']:.2f} / {gate['seconds']['median']:.2f} / "
                      f"{gate['seconds']['max']:.2f} s (error {gate['max_error']:.1e})" for gate in result["gate"])
    return (f"Measured by `bench/families.py`: {result['measured']['exact']} model types exact and "
            f"{result['measured']['refused']} refused, {agrees}; exact means within {result['bound']['tolerance']:.0e} "
            f"of the model's own eager attention and at least {result['bound']['min_departure']} from uniform, "
            f"applied by the bench; the largest error over every exact type's layers, heads and pairs is "
            f"{worst['max_error']:.1e} ({worst['model_type']}). The gate on the bundled models, "
            f"min / median / max of {result['gate'][0]['seconds']['runs']}: {gates}. ({source(results, 'families')}.)\n")


if __name__ == "__main__":
    main()
