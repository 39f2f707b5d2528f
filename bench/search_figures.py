"""The figure blocks drawn from ``bench.search``'s result files (``bench/results/search.json``, and
``search_large.json`` / ``search_overlap.json`` where a separate run wrote a part there): what the pages say from
them (``python -m bench.figures``; each registered by name with ``@figure``, a goal judged by
``bench.figures.goals.verdict``). The bench itself is :mod:`bench.search`."""

from __future__ import annotations

from bench.figures.goals import Goal, verdict
from bench.figures.results import Results, figure, source

#: the goals of docs/benchmarks.md's Search table, on the p95 of a call of the Python API, from the call to its answer
#: (the app's search, Enter to the matches drawn, is judged with the app's goals)
PARTNER_QUERY = Goal("a head's first partner query", 50, "ms", True, "search", "the call to its answer, p95",
                     lambda found: found["partners"]["first"]["p95_ms"], 2)

TOKEN_SEARCH = Goal("an all-head token search", 150, "ms", True, "search",
                    "the call to its answer, p95, the slower of whole token and substring",
                    lambda found: max(found["tokens"]["whole"]["p95_ms"], found["tokens"]["substring"]["p95_ms"]), 2)

LAYOUT_NAMES = {"attn-tsne": "attn-tsne", "tsne": "t-SNE", "attn-umap": "attn-umap", "umap": "UMAP", "pca": "PCA"}

def ms(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value < 0.1:
        return f"{value:.3f} ms"
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"

def p50_p95(timing: dict, n: bool = False) -> str:
    return f"p50 {ms(timing['p50_ms'])}, p95 {ms(timing['p95_ms'])}" + (f" ({timing['n']:,})" if n else "")

def size(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.0f} kB"

def head_list(names: list[str]) -> str:
    """``L1 H4, L3 H8`` for a few heads; ``18: L0–L5 × H0, H4, H8`` for a grid of them."""
    pairs = [tuple(int(part[1:]) for part in name.split()) for name in names]
    layers, heads = sorted({layer for layer, _ in pairs}), sorted({head for _, head in pairs})
    if len(names) <= 4 or len(pairs) != len(layers) * len(heads):
        return ", ".join(names)
    spans = (f"L{layers[0]}–L{layers[-1]}" if layers == list(range(layers[0], layers[-1] + 1))
             else ", ".join(f"L{layer}" for layer in layers))
    return f"{len(names)}: {spans} × " + ", ".join(f"H{head}" for head in heads)

def layout_name(layout: str) -> str:
    """``pca 2D`` as the pages name it: ``PCA 2D``."""
    method, _, dim = layout.partition(" ")
    return f"{LAYOUT_NAMES.get(method, method)} {dim}".strip()

def part(results: Results, key: str) -> tuple[str, dict]:
    """The result file holding ``key`` (``overlap``, ``large``): ``search_<key>.json`` when a separate run of the
    bench wrote it there (``--out``), else ``search.json``."""
    name = f"search_{key}"
    if results.exists(name) and results(name).get(key):
        return name, results(name)
    return "search", results("search")

def measured_on(result: dict) -> str:
    run = result["run"]
    return (f"{run['model']}, {run['tokens']:,} tokens, {run['layers'] * run['heads']} heads, "
            f"d_head {run['d_head']}")

def command(result: dict) -> str:
    arguments = result["arguments"]
    parts = ["python -m bench.search"]
    if arguments.get("overlap_run"):
        parts.append("--overlap-run <run>")
    if arguments.get("large"):
        parts.append(f"--large {arguments['large']}")
    return " ".join(parts)

@figure("search-speed")
def search_speed(results: Results) -> str:
    result = results("search")
    build, partners, panel, tokens = result["build"], result["partners"], result["panel"], result["tokens"]
    rows = [("`qkviz index` (the token index only): time, its peak memory",
             f"{build['index_seconds']:.1f} s, {build['index_peak_mb']:,.0f} MB"),
            ("`<run>/indexes/` after it (only `tokens.parquet`)",
             f"{size(build['indexes_bytes'])}, **{build['indexes_bytes_per_token']:.1f} bytes/token** (the stored "
             f"queries and keys: {build['vectors_bytes_per_token']:,.0f} bytes/token)")]
    approximate = build.get("approximate")
    if approximate:
        recall = approximate["recall_at_10"]
        rows.append((f"an inverted file, forced (exact limit lowered to {approximate['exact_limit']:,} tokens; "
                     f"{approximate['indexes']} of the {approximate['of']} indexes built)",
                     f"{approximate['bytes_per_token_each']:.1f} bytes/token each, "
                     f"{approximate['bytes_per_token_all']:,.0f} bytes/token for all {approximate['of']}; built in "
                     f"{ms(approximate['build_ms']['median'])} each (median); recall@10 {recall['min']:.3f}–"
                     f"{recall['max']:.3f} (mean {recall['mean']:.3f}); nprobe/nlist "
                     f"{', '.join(approximate['nprobe_of_nlist'])}"))
    rows += [("partner query, exact on the mapped arrays, a head's first",
              f"{p50_p95(partners['first'])} ({partners['heads']} heads)"),
             ("partner query, exact on the mapped arrays, next ones", p50_p95(partners["later"], n=True)),
             ("for comparison, next ones: a faiss flat copy of the head held in memory (what qkviz built before)",
              p50_p95(partners["flat_copy_later"])),
             ("for comparison, next ones: numpy `K @ q` and a partial sort on the decoded head",
              p50_p95(partners["numpy_later"])),
             (f"the app's partner panel ({layout_name(panel['layout'])}), next clicks", p50_p95(panel["later"])),
             (f"the app's partner panel, a head's first click (averages the layout overlap over "
              f"{panel['overlap_sample']} points)", f"{p50_p95(panel['first'])} ({panel['heads']} heads)"),
             (f"all-head token search (matches and cluster counts in all {tokens['heads']} heads), whole token / "
              f"substring", f"p50 {ms(tokens['whole']['p50_ms'])} / {ms(tokens['substring']['p50_ms'])}, "
                            f"p95 {ms(tokens['whole']['p95_ms'])} / {ms(tokens['substring']['p95_ms'])}")]
    table = "\n".join(f"| {label} | {value} |" for label, value in rows)
    first, later = partners["first"], partners["later"]
    flat, numpy = partners["flat_copy_later"], partners["numpy_later"]
    return (f"| {measured_on(result)} | |\n|---|---|\n{table}\n\nA head's first partner query opens its arrays and "
            f"reads them from disk: p50 {ms(first['p50_ms'])} against {ms(later['p50_ms'])} for the next ones. At this "
            f"size the next ones take {later['p50_ms'] / flat['p50_ms']:.1f}× the time of the flat copy and "
            f"{later['p50_ms'] / numpy['p50_ms']:.1f}× that of numpy on the decoded head (p50)"
            + (": the price of decoding blocks from the mapped arrays instead of holding a copy. "
               if later["p50_ms"] > min(flat["p50_ms"], numpy["p50_ms"]) else ". ")
            + f"Partner queries are one clicked point's top {partners['k']} over the whole corpus, "
            f"{partners['points_per_head']} points a head after the first, every head. `{command(result)}` "
            f"({source(results, 'search')}).\n")

@figure("search-large")
def search_large(results: Results) -> str:
    name, result = part(results, "large")
    rows = result.get("large") or []
    if not rows:
        return (f"Not measured in `bench/results/search.json`: run `python -m bench.search --large 100000,500000` "
                f"({source(results, name)}).\n")
    head = rows[0]["head"]
    table = "\n".join(
        f"| {row['keys']:,} | {p50_p95(row['exact'])} | {row['ivf_build_s']:.1f} s, {row['nlist']:,} lists, nprobe "
        f"{row['nprobe']}, {row['bytes_per_vector']:.1f} bytes/vector, {p50_p95(row['ivf'])}, "
        f"{row['recall_at_10_held_out']:.3f} |" for row in rows)
    def listed(values: list[str]) -> str:
        return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]
    speedups = listed(["{:.1f}×".format(row["exact"]["p50_ms"] / row["ivf"]["p50_ms"]) for row in rows])
    sizes = listed(["{:,}".format(row["keys"]) for row in rows])
    builds = listed(["{:.0f}".format(row["ivf_build_s"]) for row in rows])
    verdict = (f"The inverted file answers {speedups} faster (p50) than the exact scan at {sizes} keys, after a build "
               f"of {builds} s for this one index")
    limit = result.get("default_exact_limit")   # recorded by the bench: qkviz's limit when it ran
    at_limit = limit and max((row for row in rows if row["keys"] <= limit), key=lambda row: row["keys"], default=None)
    if at_limit:
        verdict += (f". Up to the default exact limit ({limit:,} tokens) nothing is built: at {at_limit['keys']:,} keys "
                    f"of d_head {at_limit['d_head']} the exact scan took {p50_p95(at_limit['exact'])} a query here")
    return (f"| keys ({head}, d_head {rows[0]['d_head']}) | exact in blocks | inverted file: build, lists, nprobe, size, "
            f"query, recall@10 on held-out queries |\n|---|---|---|\n{table}\n\n{verdict}. "
            f"`{command(result)}` ({source(results, name)}).\n")

@figure("search-overlap")
def search_overlap(results: Results) -> str:
    name, result = part(results, "overlap")
    overlap = result.get("overlap")
    if not overlap or not overlap["layouts"]:
        return (f"Not measured in `bench/results/search.json`: run `python -m bench.search --overlap-run <run>` on a "
                f"run with layouts ({source(results, name)}).\n")
    layouts = overlap["layouts"]
    pca = next((row for row in layouts if row["method"] == "pca" and row["dim"] == 2), None)
    rows, chance = [], layouts[0]["chance"]
    for row in layouts:
        heads = len(row["heads"])
        which = f"all {heads}" if row["all_heads"] else head_list(row["heads"])
        beside = ""
        if pca and row is not pca and not row["all_heads"] and all(name in pca["per_head"] for name in row["heads"]):
            same = [pca["per_head"][name] for name in row["heads"]]
            beside = (f"{100 * sum(q for q, _ in same) / heads:.1f}% "
                      f"({100 * sum(k for _, k in same) / heads:.1f}%)")
        rows.append(f"| {LAYOUT_NAMES.get(row['method'], row['method'])} {row['dim']}D | {which} | "
                    f"{100 * row['query']:.1f}% ({100 * row['key']:.1f}%) | {row['query'] / chance:.0f}× | "
                    f"{beside or '–'} | {row['best_head']}, {100 * row['best_query']:.0f}% |")
    return (f"| layout | heads | top-{overlap['k']} partners kept | against chance | PCA 2D on the same heads | "
            f"best head |\n|---|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\nA query's top-{overlap['k']} keys that its {overlap['k']} nearest keys in the layout hold (a key's "
            f"top-{overlap['k']} queries in brackets), mean over the heads named, {overlap['sample']} sampled points "
            f"of each kind a head; a random layout keeps {100 * chance:.1f}%. {measured_on(result)}. "
            f"`{command(result)}` ({source(results, name)}).\n")

@figure("search-tokens")
def search_tokens(results: Results) -> str:
    result = results("search")
    tokens = result["tokens"]
    index, whole, substring = tokens["index"], tokens["whole"], tokens["substring"]
    return (f"On {measured_on(result)}: the vocabulary has {index['vocabulary']:,} entries for {index['tokens']:,} "
            f"tokens, built from the token table in {ms(index['build_ms'])}. The lookup alone takes "
            f"{ms(whole['lookup_median_ms'])} for a whole token and {ms(substring['lookup_median_ms'])} for a "
            f"substring (median), against {ms(whole['scan_median_ms'])} and {ms(substring['scan_median_ms'])} for a "
            f"scan of the tokens. The all-head token search (matches and cluster counts in all {tokens['heads']} "
            f"heads, {len(tokens['words'])} common words) takes {p50_p95(whole)} for a whole token and "
            f"{p50_p95(substring)} for a substring ({source(results, 'search')}).\n")

@figure("search-benchmarks")
def search_benchmarks(results: Results) -> str:
    result = results("search")
    build, partners, panel, tokens = result["build"], result["partners"], result["panel"], result["tokens"]
    rows = [("partner query, a head's first (exact on the run's memory-mapped arrays)",
             f"{p50_p95(partners['first'])} ({partners['heads']} heads)", verdict(PARTNER_QUERY, results)),
            ("partner query, next ones", p50_p95(partners["later"], n=True), ""),
            ("the app's partner panel (search, list, layout overlap)",
             f"next clicks {p50_p95(panel['later'])}; a head's first click {p50_p95(panel['first'])} (it averages the "
             f"overlap over {panel['overlap_sample']} sampled points)", ""),
            (f"all-head token search (matches and cluster counts in all {tokens['heads']} heads)",
             f"whole token {p50_p95(tokens['whole'])}; substring {p50_p95(tokens['substring'])}",
             verdict(TOKEN_SEARCH, results)),
            ("the token lookup alone, against a scan of the tokens",
             f"whole token {ms(tokens['whole']['lookup_median_ms'])} vs {ms(tokens['whole']['scan_median_ms'])}; "
             f"substring {ms(tokens['substring']['lookup_median_ms'])} vs {ms(tokens['substring']['scan_median_ms'])}", ""),
            ("`qkviz index` (exact heads: the token index only)",
             f"{build['index_seconds']:.1f} s, peak {build['index_peak_mb']:,.0f} MB; "
             f"{build['indexes_bytes_per_token']:.1f} bytes/token on disk", "")]
    approximate = build.get("approximate")
    if approximate:
        recall = approximate["recall_at_10"]
        rows.append((f"index build, inverted file (forced on {approximate['indexes']} indexes, exact limit "
                     f"{approximate['exact_limit']:,})",
                     f"{ms(approximate['build_ms']['median'])} each (median); recall@10 {recall['min']:.3f}–"
                     f"{recall['max']:.3f} (mean {recall['mean']:.3f})", ""))
    large_name, large = part(results, "large")
    for row in large.get("large") or []:
        rows.append((f"one head grown to {row['keys']:,} keys ({row['head']}'s keys resampled with jitter, its real "
                     f"queries)", f"exact {p50_p95(row['exact'])}; inverted file built in {row['ivf_build_s']:.1f} s "
                     f"({row['nlist']:,} lists, nprobe {row['nprobe']}), {p50_p95(row['ivf'])}, recall@10 "
                     f"{row['recall_at_10_held_out']:.3f} on held-out queries", ""))
    table = "\n".join(f"| {label} | {value} | {goal} |" for label, value, goal in rows)
    names = ["search"] + ([large_name] if large_name != "search" and large.get("large") else [])
    commands = " and ".join(f"`{command(results(name))}`" for name in names)
    return (f"{commands} ({measured_on(result)}; one run each):\n\n| | figure | goal |\n|---|---|---|\n{table}\n\n"
            f"({source(results, *names)}.)\n")
