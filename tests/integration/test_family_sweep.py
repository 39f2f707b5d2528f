"""The held-out batch: 32 text model types that no issue names, drawn at random from transformers' registry
(``support.family_sweep.HELD_OUT``), each exact, refused in one line, or its tiny configuration cannot be built
(stated) — never a traceback, a time-out or a run whose attention differs from the model's own. The whole registry
is swept by ``python -m bench.family_sweep`` (``bench/results/family_sweep.json``, checked here too)."""

import json

import pytest
import transformers
from support import CORPUS, REPO
from support.family_sweep import (EXACT, FAILURES, HELD_OUT, HELD_OUT_SIZE, NO_CONFIG, REFUSED, TOLERANCE,
                                  held_out_batch, registered_text_types, sweep_type)
from support.tiny_models import decoder_tokenizer

SENTENCES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:6]
DRAWN_ON = "5.23.0"


@pytest.fixture(scope="module")
def tokenizer():
    return decoder_tokenizer(CORPUS.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("model_type", HELD_OUT)
def test_a_held_out_model_type_is_exact_or_refused_in_one_line(model_type, tokenizer):
    row = sweep_type(model_type, SENTENCES, tokenizer)
    assert row["status"] in (EXACT, REFUSED, NO_CONFIG), row
    if row["status"] == EXACT:
        assert row["max_error"] <= TOLERANCE and row["gate_error"] <= TOLERANCE, row
        assert row["departure_from_uniform"] > 0.05, f"{model_type}: attention near uniform; the check proves nothing"
    if row["status"] == REFUSED:
        assert row["why"].startswith(f"{model_type}: ") or model_type.replace("-", "_") in row["why"], row


def test_the_held_out_batch_is_the_seeded_draw_from_the_registry():
    if transformers.__version__ != DRAWN_ON:
        pytest.skip(f"the batch was drawn from transformers {DRAWN_ON}'s registry; this is {transformers.__version__}")
    assert len(HELD_OUT) == HELD_OUT_SIZE and HELD_OUT == held_out_batch(registered_text_types())


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
