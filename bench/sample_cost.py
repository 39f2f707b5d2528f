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


if __name__ == "__main__":
    main()
