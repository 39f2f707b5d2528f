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
from bench.figures.results import Results, figure, run_name, source, span  # noqa: E402

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


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

def head_name(pair) -> str:
    return f"L{pair[0]} H{pair[1]}"

# -- related heads ---------------------------------------------------------------------------------
def related_runs(results: Results) -> list[dict]:
    return results("related")["runs"]

@figure("related-cost")
def related_cost(results: Results) -> str:
    parts = [f"{run_name(row)}: {row['queries']:,} queries in {row['sentences']} sentences, "
             f"{row['query_key_pairs']:,} query-key pairs, so {8 * row['layers'] * row['heads'] * row['query_key_pairs'] / 1e6:.0f} MB "
             f"of attention; the command {span(row['seconds'])} (min / median / max of {row['seconds']['runs']}), "
             f"peak RSS {row['peak_mb']:,.0f} MB" for row in related_runs(results)]
    return f"{'; '.join(parts)}. `bench/related.py` ({source(results, 'related')}).\n"

@figure("related-time")
def related_time(results: Results) -> str:
    rows = related_runs(results)
    header = "| `qkviz related`, default sample | " + " | ".join(
        f"{run_name(row)} ({row['layers'] * row['heads']} heads, {row['head_pairs']:,} head pairs)" for row in rows) + " |"
    lines = [("queries (sentences)", lambda row: f"{row['queries']:,} ({row['sentences']})"),
             ("its own compute time (`related.json`)", lambda row: span(row["compute_seconds"])),
             ("the command, start to end", lambda row: span(row["seconds"])),
             ("peak RSS of the command", lambda row: f"{row['peak_mb']:,.0f} MB")]
    body = "\n".join(f"| {name} | " + " | ".join(value(row) for row in rows) + " |" for name, value in lines)
    runs = rows[0]["seconds"]["runs"]
    return (f"{header}\n|---|{'---|' * len(rows)}\n{body}\n\nMin / median / max of {runs} runs. "
            f"`bench/related.py --repeats {runs}` ({source(results, 'related')}).\n")

def one_group(row: dict) -> str:
    """", one key-value head" when the closest pair of a grouped-keys run shares one."""
    a, b, size = row["closest"]["a"], row["closest"]["b"], row["heads"] // row["kv_heads"]
    return ", one key-value head" if size > 1 and a[0] == b[0] and a[1] // size == b[1] // size else ""

@figure("related-findings")
def related_findings(results: Results) -> str:
    rows = related_runs(results)
    layers = "; ".join(f"{run_name(row)} {row['js_within_layer']:.2f} / {row['js_layers_apart']:.2f}" for row in rows)
    alike = all(row["js_within_layer"] < row["js_layers_apart"] for row in rows)
    lines = [f"- {'Heads of one layer attend more alike' if alike else 'Heads of one layer do not always attend more alike'}: "
             f"mean JS distance within a layer / between layers two or more apart: {layers}. The most heads of each "
             "layer that stand side by side in the clustering order, layer by layer: "
             + "; ".join(f"{run_name(row)} (of {row['heads']}) {' '.join(map(str, row['longest_together_by_layer']))}"
                         for row in rows) + "."]
    for row in rows:
        previous = row.get("previous_token")
        if previous:
            heads = ", ".join(head_name(pair) for pair in previous["heads"])
            lines.append(f"- {run_name(row)}'s {len(previous['heads'])} previous-token heads ({heads}): mean JS distance "
                         f"{previous['js_among']:.2f} among them, {previous['js_to_others']:.2f} to the other heads.")
    closest = [f"{run_name(row)} {head_name(row['closest']['a'])} and {head_name(row['closest']['b'])}"
               f"{one_group(row)} (JS distance {row['closest']['js']:.3f}, CKA {row['closest']['cka']:.2f})"
               for row in rows]
    lines.append(f"- The closest pair of heads: {'; '.join(closest)}.")
    spearman = ", ".join(f"{row['spearman_js_cka']:+.2f} on {run_name(row)}" for row in rows)
    lines.append(f"- JS distance against CKA over the head pairs: Spearman {spearman} (a strong agreement would be "
                 "near −1: a small distance with a high similarity).")
    for row in rows:
        grouped = row.get("grouped_keys")
        if grouped:
            lines.append(f"- {run_name(row)} (grouped keys, {row['heads'] // row['kv_heads']} query heads a key-value "
                         f"head): the highest-CKA partner shares the head's key-value head for "
                         f"{grouped['top_cka_partner_shares_kv_head']:.0%} of heads; mean CKA "
                         f"{grouped['cka_within_group']:.2f} within a group, {grouped['cka_other_groups_of_layer']:.2f} "
                         "with the layer's other groups.")
    return "\n".join(lines) + f"\n\n`bench/related.py` ({source(results, 'related')}).\n"


if __name__ == "__main__":
    main()
