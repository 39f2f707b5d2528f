"""Figure blocks rendered from ``bench/results/*.json``; registered with :func:`bench.figures.results.figure` when imported.

docs/dask.md (projection and ``qkviz stats`` on a Dask ``LocalCluster`` against the local pool) and
docs/benchmarks.md's projections (qkviz's layouts against the AttentionViz recipe)."""

from __future__ import annotations

from bench.figures.results import Results, figure, minutes, source

#: bench/project.py's layouts, as the table names them
LAYOUT_LABELS = {"tsne 2D": "t-SNE 2D", "tsne 3D": "t-SNE 3D", "umap 2D": "UMAP 2D", "umap 3D": "UMAP 3D",
                 "pca 2D": "PCA 2D", "pca 3D": "PCA 3D"}


def seconds(value: float) -> str:
    return "< 0.1 s" if value < 0.05 else minutes(value)


#: below this many seconds (both sides) a time is the clock's noise, and a ratio of two of them means nothing
NOISE_S = 0.2


def ratio(theirs: float, ours: float) -> str:
    """How many times ``ours`` fits in ``theirs``; a dash where both are too short to compare."""
    if (theirs < NOISE_S and ours < NOISE_S) or not ours:
        return "–"
    return f"{theirs / ours:.1f}×"


def heads_named(pairs) -> str:
    """``L0 H0–H11, L3 H4``: a layer's consecutive heads as one range, in the order given."""
    runs: list[list[int]] = []           # [layer, first head, last head]
    for layer, head in pairs:
        if runs and runs[-1][0] == layer and runs[-1][2] == head - 1:
            runs[-1][2] = head
        else:
            runs.append([layer, head, head])
    return ", ".join(f"L{layer} H{first}" + (f"–H{last}" if last > first else "") for layer, first, last in runs)


@figure("project-recipe")
def project_recipe(results: Results) -> str:
    result = results("project")
    compare = result["compare"]
    totals, rows_ = compare["totals"], compare["heads"]
    points = rows_[0]["points"]
    rows = []
    for key, label in LAYOUT_LABELS.items():
        total = totals[key]
        ours = total.get("qkviz_with_2d_s", total["qkviz_s"])
        if "qkviz_with_2d_s" in total:
            label += " (qkviz: 2D + refinement)"
        rows.append(f"| {label} | {seconds(ours)} | {seconds(total['recipe_s'])} | {ratio(total['recipe_s'], ours)} | "
                    f"{total['trust_qkviz']:.3f} / {total['trust_recipe']:.3f} |")
    six = compare["six_layouts"]
    rows.append(f"| the six layouts (qkviz: with loading, alignment and the shared neighbour graph) | "
                f"{seconds(six['qkviz_s'])} | {seconds(six['recipe_s'])} | {ratio(six['recipe_s'], six['qkviz_s'])} | |")
    refine = totals["tsne 3D"]["qkviz_s"]
    orders = "; ".join(f"{heads_named([row['head']])} {' first, then '.join(row['order'])}" for row in rows_)
    text = (f"Summed over {len(rows_)} heads ({heads_named(row['head'] for row in rows_)}) of MiniLM at "
            f"{result['tokens']:,} tokens ({points:,} points per head), one process; trustworthiness (k = 10, the "
            f"mean over the heads) on a fixed 3,000-point sample:\n\n"
            f"| layout | qkviz | AttentionViz recipe | time: recipe / qkviz | trustworthiness qkviz / recipe |\n"
            f"|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"qkviz's 3D t-SNE refines the head's 2D layout ({seconds(refine)} for the refinement alone): its row "
            f"counts the 2D layout too, against the recipe's 3D fit from scratch. Order of each head's two sets: "
            f"{orders}. Numba compiled for both before timing ({seconds(compare['warm_up_s'])}).")
    parallel = compare.get("parallel")
    if parallel:
        text += (f" The same layouts with the heads over a warm pool of {parallel['jobs']} workers: "
                 f"{seconds(parallel['seconds'])} ({ratio(six['recipe_s'], parallel['seconds'])} less than the "
                 f"recipe in one process).")
    holder, named = result, ["project"]
    if "all_heads" not in result and results.exists("project_all_heads"):
        holder, named = results("project_all_heads"), ["project", "project_all_heads"]
    everything = holder.get("all_heads")
    if everything:
        arguments = holder["arguments"]
        chosen = " ".join(f"--{option} {arguments[f'all_heads_{option}']}" for option in ("layers", "heads")
                          if arguments.get(f"all_heads_{option}"))
        requests = "; ".join(f"{'the three again, cached' if label == 'cached re-run' else label} "
                             f"{seconds(figures['seconds'])}"
                             + (f", {figures['peak_mb']:.0f} MB" if "peak_mb" in figures else "")
                             for label, figures in everything["requests"].items())
        text += (f"\n\n{everything['heads']} heads{f' (`{chosen}`)' if chosen else ''} through `qkviz project --jobs "
                 f"{arguments['jobs']}` (a child process, start-up and numba compilation included; its own peak "
                 f"memory, not its workers'): {requests}.")
        if chosen:
            text += (" All the run's heads together are not measured in the current result files: `python "
                     "bench/project.py --run runs/minilm --compare-heads` measures them.")
    else:
        text += ("\n\nAll heads through `qkviz project --jobs 2` (PCA, UMAP, t-SNE, then the cached re-run) are not "
                 "measured in the current result files: `python -m bench.project --run runs/minilm --compare-heads` "
                 "measures them (into a result file of its own, which this block then reads).")
    return text + f" (`python -m bench.project`; {source(results, *named)}.)\n"


@figure("dask-projection")
def dask_projection(results: Results) -> str:
    result = results("dask_projection")
    arguments = result["arguments"]
    workers = arguments["workers"]
    rows = "\n".join(
        f"| {number} ({' first, then '.join('local pool' if side == 'local' else 'Dask' for side in round_['order'])}) "
        f"| {seconds(round_['local_s'])} | {seconds(round_['dask_s'])} | {round_['ratio']:.2f}× |"
        for number, round_ in enumerate(result["rounds"], 1))
    start = result["start_up_s"]
    equal = "equal to the bit in every round" if result["layouts_equal"] else "**not** equal in every round"
    order = result.get("start_up_order")
    started = (f" ({'the pool' if order[0] == 'local' else 'the cluster'} was started first: its workers were the "
               f"first to load the libraries)" if order else "")
    return (f"{len(result['heads'])} heads ({heads_named(result['heads'])}), {arguments['method']} "
            f"{arguments['dim']}D, {result['tokens']:,} tokens, {workers} workers:\n\n"
            f"| round (order) | local pool (`--jobs {workers}`) | Dask `LocalCluster` ({workers} processes) | "
            f"Dask / local |\n|---|---|---|---|\n{rows}\n\n"
            f"Median Dask / local {result['median_ratio']:.2f}×. Start-up, not in the times above: local pool "
            f"{seconds(start['local'])}, `LocalCluster` {seconds(start['dask'])}{started}. The layouts were {equal}. "
            f"(`python -m bench.dask_projection`; {source(results, 'dask_projection')}.)\n")



@figure("dask-stats")
def dask_stats(results: Results) -> str:
    result = results("dask_stats")
    ways = list(result["ways"])
    header = "| round (order; load after) | " + " | ".join(f"`{way}`" if way.startswith("--") else way
                                                         for way in ways) + " |"
    rows = []
    for number, round_ in enumerate(result["rounds"], 1):
        serial = round_["seconds"].get("serial")
        cells = []
        for way in ways:
            wall = round_["seconds"][way]
            cells.append(seconds(wall) + (f" ({serial / wall:.2f}×)" if serial and way != "serial" else ""))
        order = " → ".join(round_["order"])
        rows.append(f"| {number} ({order}; {round_['load_after']:.1f}) | " + " | ".join(cells) + " |")
    summaries = []
    for way in ways:
        figures = result["ways"][way]
        line = f"{way} {seconds(figures['seconds']['median'])}"
        if "speed_up_over_serial" in figures and way != "serial":
            line += f" ({figures['speed_up_over_serial']:.2f}× serial's speed)"
        summaries.append(line + f", peak {figures['peak_mb']['max']:.0f} MB")
    equal = "equal to the bit in every round and every way" if result["atlases_equal"] else "**not** all equal"
    parse = (f" The spaCy parse made once by the caller took {seconds(result['parse_s'])} (after loading the "
             f"pipeline)." if result.get("parse_s") is not None else "")
    syntax = "`qkviz -q stats --syntax`" if result.get("syntax") else "`qkviz -q stats`"
    return (f"{syntax} on {result['heads']} heads, {result['tokens']:,} tokens; in brackets the speed-up over "
            f"serial in the same round:\n\n{header}\n|" + "---|" * (len(ways) + 1) + "\n" + "\n".join(rows) + "\n\n"
            f"Medians: {'; '.join(summaries)} (the command's own peak memory; with `--jobs` and `--dask` the workers' "
            f"is not in it). "
            f"The atlases were {equal}.{parse} "
            f"(`python -m bench.dask_stats`; {source(results, 'dask_stats')}.)\n")
