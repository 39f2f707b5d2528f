"""Why ``bench/results/families.json`` of 2026-11-28 called Falcon exact at a largest error of 0.99: the comparison
the families bench then kept for itself, run again beside the tests' own, on the same run of a tiny Falcon.

To read a model's own eager attention, that copy switched the model with ``model.set_attn_implementation("eager")``
alone. A family whose attention is computed by its own code reads its configuration's ``_attn_implementation``,
which that call leaves as it was (``sdpa`` for Falcon on transformers 5.23); asked for its attention weights, its
code takes its matmul-and-softmax path with the mask built for SDPA, a boolean one, and adds it to the logits. The
tests' comparison (``tests/support/family_sweep.model_attentions``) sets the configuration too. This bench extracts
one tiny Falcon (as ``bench/families.py`` does), then compares the run with the model's attention read both ways,
and records what each way ran: the implementation the configuration names, the mask's dtype, where the error is
largest and how the model's row spread there over the keys the run lets that query see, later keys and padding.

    python -m bench.eager_switch        # writes bench/results/eager_switch.json (seconds, transformers 5.23)
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench.figures.results import Results, figure, source
from bench.harness import Recorder, smoke_arguments
from bench.support.tiny_models import decoder_tokenizer

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "sentences.txt"
#: what ``bench/results/families.json`` at commit 828cf0d (2026-11-28) recorded for Falcon
RECORDED = {"commit": "828cf0d", "max_error": 0.9907427271828055, "gate_error": 1.6018603288259214e-07}
CHECKED = 3


def padded(token_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.zeros((len(token_ids), width), dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, :len(ids)], mask[row, :len(ids)] = torch.tensor(ids), 1
    return input_ids, mask


def switched_alone(model, run, token_ids: list[list[int]]) -> dict:
    """The copy of 828cf0d: ``set_attn_implementation("eager")`` alone, then the largest error over every layer,
    head and pair, where it is, and what the model's attention was there; the mask the first attention module got."""
    input_ids, mask = padded(token_ids)
    said: list[str] = []
    listener = logging.Handler()
    listener.emit = lambda record_: said.append(record_.getMessage())
    logging.getLogger("transformers").addHandler(listener)
    try:
        model.set_attn_implementation("eager")
    finally:
        logging.getLogger("transformers").removeHandler(listener)
    seen = {}

    def note(_module, _args, kwargs):
        given = kwargs.get("attention_mask")
        seen.setdefault("mask_dtype", str(given.dtype).removeprefix("torch.") if given is not None else None)

    attention = next(module for name, module in model.named_modules() if name.endswith("self_attention"))
    hook = attention.register_forward_pre_hook(note, with_kwargs=True)
    try:
        with torch.no_grad():
            attentions = [a for a in model(input_ids=input_ids, attention_mask=mask, output_attentions=True).attentions
                          if a is not None]
    finally:
        hook.remove()
    worst = (-1.0, None)
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            for row, ids in enumerate(token_ids):
                error = np.abs(run.attention(layer, head, row)
                               - attentions[layer][row, head, :len(ids), :len(ids)].double().numpy())
                if error.max() > worst[0]:
                    worst = (float(error.max()), (layer, head, row, *np.unravel_index(error.argmax(), error.shape)))
    error, (layer, head, row, query, key) = worst
    n = len(token_ids[row])
    theirs = attentions[layer][row, head, query].double().numpy()
    ours = run.attention(layer, head, row)[query]
    return {"implementation": model.config._attn_implementation, "transformers_said": said,
            "mask_dtype": seen["mask_dtype"], "max_error": error,
            "where": {"layer": layer, "head": head, "sentence": row, "query": int(query), "key": int(key),
                      "run": float(ours[key]), "model": float(theirs[key])},
            "model_row": {"keys_the_run_allows": float(theirs[:n][ours > 0].sum()),
                          "later_keys": float(theirs[query + 1:n].sum()), "padding": float(theirs[n:].sum())}}


def measure(sentences: list[str], tokenizer) -> dict:
    import transformers

    import qkviz
    from tests.support.family_configs import tiny_family_model
    from tests.support.family_sweep import eager_error

    model = tiny_family_model("falcon")
    with tempfile.TemporaryDirectory() as directory:
        run = qkviz.extract(model, sentences, Path(directory) / "run", tokenizer=tokenizer, progress=False)
        token_ids = [run.tokens.token_id.to_numpy()[run.sentence_tokens(s)].tolist() for s in range(CHECKED)]
        built_with = model.config._attn_implementation
        alone = switched_alone(model, run, token_ids)
        model.config._attn_implementation = built_with                  # as the bench found it, for the tests' way
        error, departure = eager_error(model, run)
        return {"transformers": transformers.__version__, "built_with": built_with,
                "gate_error": run.manifest["extraction"]["exactness_gate"]["max_error"],
                "set_attn_implementation_alone": alone,
                "configuration_too": {"implementation": model.config._attn_implementation, "max_error": error,
                                      "departure_from_uniform": departure},
                "recorded_2026_11_28": RECORDED}


#: what the smoke test adds to ``--smoke``: nothing (the measurement is one tiny Falcon already)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=6)
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/eager_switch.json)")
    args = smoke_arguments(parser, argv)
    recorder = Recorder("eager_switch", vars(args), args.out)
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
    figures = measure(lines[:args.sentences], decoder_tokenizer(lines))
    print(f"wrote {recorder.write(**figures)}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

@figure("falcon-eager-switch")
def falcon_eager_switch(results: Results) -> str:
    """docs/families.md: the cause of Falcon's 0.99 of 2026-11-28, measured again."""
    result = results("eager_switch")
    alone, too, recorded = (result["set_attn_implementation_alone"], result["configuration_too"],
                            result["recorded_2026_11_28"])
    where, row = alone["where"], alone["model_row"]
    same = "the same to the last digit" if alone["max_error"] == recorded["max_error"] else "**not** the same"
    said = f" (transformers says: \"{alone['transformers_said'][0]}\")" if alone["transformers_said"] else ""
    return (f"Falcon's tiny model on transformers {result['transformers']}, one run (gate error "
            f"{result['gate_error']:.1e}; {recorded['gate_error']:.1e} recorded then): switched by "
            f"`set_attn_implementation(\"eager\")` alone{said}, the configuration still names "
            f"`{alone['implementation']}`, "
            f"Falcon's attention gets a {alone['mask_dtype']} mask, and the largest error is "
            f"{alone['max_error']!r} ({same} as the {recorded['max_error']!r} recorded at commit "
            f"{recorded['commit']}), at layer {where['layer']}, head {where['head']}, query {where['query']} of sentence "
            f"{where['sentence']}, key {where['key']}: the run gives it {where['run']:.4f}, the model "
            f"{where['model']:.4f}; the model's row puts {row['keys_the_run_allows']:.4f} on the keys the run lets "
            f"that query see, {row['later_keys']:.2f} on later keys and {row['padding']:.2f} on the padding. With "
            f"the configuration "
            f"switched too (the tests' comparison, `{too['implementation']}`): {too['max_error']:.1e}, "
            f"{too['departure_from_uniform']:.2f} from uniform. ({source(results, 'eager_switch')}.)\n")


if __name__ == "__main__":
    main()
