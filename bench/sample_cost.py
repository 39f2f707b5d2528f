"""What fitting a head's layout on a sample costs against a full fit, with a result file:
``python -m bench.sample_cost [--tokens 20000] [--heads 3:4,0:1,5:2] [--samples 2500,5000,10000] [--methods attn-tsne,tsne]``.

``bench/scale.py --stages sample-cost``'s measurement (its ``sample_cost``: MiniLM over ``data/sentences.txt``
followed by ``data/classics.txt``, the first ``--tokens`` tokens, extracted into ``--dir`` unless already there;
for each method, each sample size and the full fit, seconds, partner recall@10 and trustworthiness per head),
written with :class:`bench.harness.Recorder` (date, machine, load, commit, arguments) to
``bench/results/sampling.json`` or ``--json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


from bench.harness import RESULTS, Recorder, smoke_arguments  # noqa: E402
from bench.scale import sample_cost  # noqa: E402
from bench.faithful_figures import defaults  # noqa: E402
from bench.figures.results import Results, figure, source  # noqa: E402
from statistics import mean  # noqa: E402


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/qkviz-scale"), help="where the run is made")
    parser.add_argument("--heads", default="3:4,0:1,5:2", help="layer:head pairs")
    parser.add_argument("--samples", default="2500,5000,10000")
    parser.add_argument("--methods", default="attn-tsne,tsne")
    parser.add_argument("--json", type=Path, help="default bench/results/sampling.json")
    args = smoke_arguments(parser, argv, out='json', tokens=300, dir=Path(tempfile.mkdtemp(prefix='qkviz-smoke-')),
                           heads='0:0', samples='150', methods='attn-tsne')
    args.dir.mkdir(parents=True, exist_ok=True)
    recorder = Recorder("sampling", vars(args), args.json or RESULTS / "sampling.json")
    heads = [tuple(int(part) for part in pair.split(":")) for pair in args.heads.split(",")]
    started = time.perf_counter()
    rows = sample_cost(args.dir, args.tokens, heads, [int(size) for size in args.samples.split(",")],
                       [method.strip() for method in args.methods.split(",") if method.strip()])
    print(recorder.write(tokens=args.tokens, heads=[list(head) for head in heads], rows=rows,
                         seconds=time.perf_counter() - started))


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

# -- Large heads: what fitting on a sample costs ----------------------------------------------------
@figure("sampling-cost")
def sampling_cost(results: Results) -> str:
    return sampling_table(results, "sampling")

@figure("sampling-cost-100k")
def sampling_cost_100k(results: Results) -> str:
    return sampling_table(results, "sampling_100k")

def sampling_table(results: Results, name: str) -> str:
    """``bench/sample_cost.py``'s figures: each sample size against the full fit, per method."""
    result = results(name)
    rows = result["rows"]
    labels = {"attn-tsne": "attn-tsne", "tsne": "t-SNE", "umap": "UMAP", "attn-umap": "attn-umap"}
    heads = ", ".join(f"{layer}/{head}" for layer, head in result["heads"])
    tables = []
    for method in dict.fromkeys(row["method"] for row in rows):
        default = defaults(method).get("sample")
        of = {sample: [r for r in rows if r["method"] == method and r["sample"] == sample]
              for sample in dict.fromkeys(r["sample"] for r in rows if r["method"] == method)}
        lines = [f"| {labels.get(method, method)}, a run of at most {result['tokens']:,} tokens (layers/heads {heads}) | recall@10 | "
                 "trustworthiness | s / head |", "|---|---|---|---|"]
        for sample in sorted(of, key=lambda size: size or float("inf")):
            found = of[sample]
            label = "full fit" if sample == 0 else f"sample {sample:,}"
            if sample and sample >= result["tokens"]:
                label += " (every token: a full fit)"
            elif sample == default:
                label = f"**{label} (default)**"
            lines.append(f"| {label} | {mean(r['recall'] for r in found):.3f} | {mean(r['trust'] for r in found):.3f} | "
                         f"{mean(r['seconds'] for r in found):.1f} |")
        text = "\n".join(lines) + "\n"
        if 0 in of and default in of and default < result["tokens"]:
            full, ours = of[0], of[default]
            below = mean(r["trust"] for r in full) - mean(r["trust"] for r in ours)
            text += (f"\nAt the default sample: {mean(r['recall'] for r in ours) / mean(r['recall'] for r in full):.0%} "
                     f"of the full fit's recall, trustworthiness {abs(below):.3f} {'below' if below >= 0 else 'above'} "
                     f"the full fit's, in {mean(r['seconds'] for r in ours) / mean(r['seconds'] for r in full):.0%} "
                     "of its time.\n")
        tables.append(text)
    arguments = result["arguments"]
    return ("\n".join(tables) + f"\n`bench/sample_cost.py --tokens {result['tokens']} --heads {arguments['heads']} "
            f"--samples {arguments['samples']} --methods {arguments['methods']}` ({source(results, name)}).\n")


if __name__ == "__main__":
    main()
