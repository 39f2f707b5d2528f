"""The random batch: 32 text model types that no issue names, drawn at random from transformers' registry
(``support.family_sweep.RANDOM_BATCH``; no longer held out: their tiny configurations were fixed type by type), each
exact as docs/families.md defines it (``support.family_exactness``), refused in one line, or its tiny configuration
cannot be built (stated) — never a traceback, a time-out, a run whose attention differs from the model's own, or one
the comparison does not show exact. A type's own bound holds only for its stated reason of precision: the same model
in float64 is within the common bound. The whole registry is swept by ``python -m bench.family_sweep``
(``bench/results/family_sweep.json``, checked here too)."""

import json

import pytest
import torch
import transformers
from support import CORPUS, REPO
from support.family_configs import tiny_family_model
from support.family_exactness import FAMILY_EXACT
from support.family_sweep import (EXACT, FAILURES, NO_CONFIG, OWN_BOUNDS, RANDOM_BATCH, RANDOM_BATCH_SIZE, REFUSED,
                                  TOLERANCE, eager_error, random_batch, registered_text_types, sweep_type)
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz.extraction.gate import FLOAT32_BOUND

SENTENCES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:6]
DRAWN_ON = "5.23.0"


@pytest.fixture(scope="module")
def tokenizer():
    return decoder_tokenizer(CORPUS.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("model_type", RANDOM_BATCH)
def test_a_model_type_of_the_random_batch_is_exact_or_refused_in_one_line(model_type, tokenizer):
    row = sweep_type(model_type, SENTENCES, tokenizer)
    assert row["status"] in (EXACT, REFUSED, NO_CONFIG), row
    if row["status"] == EXACT:
        assert not FAMILY_EXACT.missed(row) and row["gate_error"] <= FLOAT32_BOUND, row
    if row["status"] == REFUSED:
        assert row["why"].startswith(f"{model_type}: ") or model_type.replace("-", "_") in row["why"], row


def test_the_random_batch_is_the_seeded_draw_from_the_registry():
    if transformers.__version__ != DRAWN_ON:
        pytest.skip(f"the batch was drawn from transformers {DRAWN_ON}'s registry; this is {transformers.__version__}")
    assert len(RANDOM_BATCH) == RANDOM_BATCH_SIZE and RANDOM_BATCH == random_batch(registered_text_types())


@pytest.mark.parametrize("model_type", sorted(OWN_BOUNDS))
def test_a_type_with_its_own_bound_needs_it_for_float32_rounding_only(model_type, tokenizer, tmp_path):
    """The reason an own bound states: in float32 the run is beyond the common bound and within its own; the same
    model in float64 (its float32 weights, exactly) is within the common bound, so what the own bound allows is
    float32's rounding, not a term qkviz leaves out."""
    errors = {}
    for dtype in (torch.float32, torch.float64):
        model = tiny_family_model(model_type).to(dtype)
        run = qkviz.extract(model, SENTENCES, tmp_path / str(dtype), tokenizer=tokenizer, progress=False)
        errors[dtype], departure = eager_error(model, run)
        assert departure >= 0.05, (model_type, dtype, departure)
    own = OWN_BOUNDS[model_type][0]
    assert TOLERANCE < errors[torch.float32] <= own, errors
    assert errors[torch.float64] <= TOLERANCE, errors


def pinned_release() -> str:
    """The transformers release ``constraints.txt`` pins (the one the suite runs on, and the sweep's first)."""
    lines = (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
    return next(line.split("==")[1].strip() for line in lines if line.lower().startswith("transformers=="))


def test_the_sweep_results_cover_the_registry_with_no_failure():
    """``python -m bench.family_sweep``'s last runs: every registered text type of the pinned release tried, on the
    pinned release and newer ones the range allows, and none ended in a failure. A release the file does not cover
    (one the registry served after the sweep) is no failure here: the families' own tests judge every family on it,
    and the next sweep adds it."""
    result = json.loads((REPO / "bench" / "results" / "family_sweep.json").read_text(encoding="utf-8"))
    releases = {release["transformers"]: release for release in result["figures"]["releases"]}
    assert pinned_release() in releases and len(releases) >= 2, sorted(releases)
    pinned = releases[pinned_release()]
    if transformers.__version__ == pinned_release():    # this process's registry is the pinned release's
        assert {row["model_type"] for row in pinned["rows"]} >= set(registered_text_types())
    for version, release in releases.items():
        failed = [(row["model_type"], row["status"]) for row in release["rows"] if row["status"] in FAILURES]
        assert not failed, f"transformers {version}: {failed}"
