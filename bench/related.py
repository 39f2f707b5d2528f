"""Related heads benchmark: ``qkviz related`` end to end, and what it finds.

    python -m bench.related --run runs/minilm [--run runs/smollm2] [--repeats 3] [--max-queries 2000]
                            [--out bench/results/related.json]

Times ``qkviz -q related`` on each run in a child process, ``--repeats`` times (wall seconds and the child's
own peak memory, ``VmHWM``: ``bench.harness``), with the command's own compute time from
``<run>/related/related.json``. Then, from the stored result: the mean JS distance between heads of one layer
and between heads two or more layers apart, Spearman's correlation of JS distance and CKA over the head pairs,
the closest pair of heads, the previous-token heads' (labels from ``qkviz stats``, when the run has them) mean
JS distance among themselves and to the other heads, and on grouped keys the share of heads whose highest-CKA
partner shares their key-value head. Writes ``bench/results/related.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from qkviz import open_run  # noqa: E402
from qkviz.analysis import load_atlas  # noqa: E402
from qkviz.analysis import load_head_similarity  # noqa: E402

from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]


def time_related(run: Path, max_queries: int) -> dict:
    child = run_measured([*QKVIZ, "-q", "related", "--run", str(run), "--max-queries", str(max_queries)],
                         stdout=subprocess.DEVNULL)
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz related failed with exit status {child['returncode']}")
    marker = json.loads((run / "related" / "related.json").read_text(encoding="utf-8"))
    return {**child, "compute_seconds": marker["seconds"]}


def longest_together(order: np.ndarray, n_heads: int, layer: int) -> int:
    """The most heads of ``layer`` that stand side by side in the clustering order."""
    best = current = 0
    for flat in order:
        current = current + 1 if flat // n_heads == layer else 0
        best = max(best, current)
    return best


def findings(path: Path) -> dict:
    """What the stored comparison shows (see the module)."""
    run = open_run(path)
    similarity = load_head_similarity(run)
    js, cka = similarity.js_distance, similarity.geometry_similarity
    n = run.n_layers * run.n_heads
    layer = np.arange(n) // run.n_heads
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    apart = np.abs(layer[:, None] - layer[None, :])
    closest = np.unravel_index(np.argmin(np.where(upper, js, np.inf)), js.shape)
    found = {"run": path.name, "model": run.model_id, "layers": run.n_layers, "heads": run.n_heads,
             "kv_heads": run.n_kv_heads, "queries": similarity.n_queries, "sentences": len(similarity.sentences),
             "head_pairs": int(upper.sum()), "query_key_pairs": int(similarity.n_pairs),
             "longest_together_by_layer": [longest_together(similarity.order, run.n_heads, number)
                                           for number in range(run.n_layers)],
             "js_within_layer": float(js[upper & (apart == 0)].mean()),
             "js_layers_apart": float(js[upper & (apart >= 2)].mean()),
             "spearman_js_cka": float(spearmanr(js[upper], cka[upper]).statistic),
             "closest": {"a": similarity.head_of(closest[0]), "b": similarity.head_of(closest[1]),
                         "js": float(js[closest]), "cka": float(cka[closest])}}
    atlas = load_atlas(run)
    if atlas is not None:
        table = atlas.table
        previous = [int(layer_ * run.n_heads + head) for layer_, head, label
                    in zip(table.layer, table["head"], table.label) if label == "previous-token"]
        others = [flat for flat in range(n) if flat not in previous]
        if len(previous) >= 2:
            among = js[np.ix_(previous, previous)][np.triu(np.ones((len(previous),) * 2, dtype=bool), 1)]
            found["previous_token"] = {"heads": [similarity.head_of(flat) for flat in previous],
                                       "js_among": float(among.mean()),
                                       "js_to_others": float(js[np.ix_(previous, others)].mean())}
    if run.n_kv_heads < run.n_heads:
        group = np.array([flat // run.n_heads * run.n_kv_heads + run.kv_head(flat % run.n_heads) for flat in range(n)])
        partner = np.argmax(np.where(np.eye(n, dtype=bool), -np.inf, cka), axis=1)
        same_layer = upper & (apart == 0)
        shares = group[:, None] == group[None, :]
        found["grouped_keys"] = {"top_cka_partner_shares_kv_head": float((group[partner] == group).mean()),
                                 "cka_within_group": float(cka[same_layer & shares].mean()),
                                 "cka_other_groups_of_layer": float(cka[same_layer & ~shares].mean())}
    return found


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, action="append", required=True, help="a run (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-queries", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/related.json)")
    args = smoke_arguments(parser, argv, out='out', repeats=1, max_queries=40)
    recorder = Recorder("related", vars(args), out=args.out)
    rows = []
    for path in args.run:
        timings = [time_related(path, args.max_queries) for _ in range(args.repeats)]
        row = {**findings(path), "seconds": summary([t["seconds"] for t in timings]),
               "compute_seconds": summary([t["compute_seconds"] for t in timings]),
               "peak_mb": max(t["peak_mb"] for t in timings)}
        print(json.dumps(row))
        rows.append(row)
    print(f"wrote {recorder.write(runs=rows)}")


if __name__ == "__main__":
    main()
