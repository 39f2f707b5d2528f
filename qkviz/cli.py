"""The ``qkviz`` command line: parse the arguments, call the Python API (``qkviz.extract``,
``qkviz.project``, ...), print.

Every user mistake ends in one line on stderr and exit status 2; progress bars go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Iterator

import pandas as pd

import qkviz
from qkviz.analysis.labels import THRESHOLD_OPTIONS, LabelThresholds
from qkviz.api import app_entry_point
from qkviz.cli_ablate import ablate_command
from qkviz.cli_writes import print_split, writes_command
from qkviz.cli_options import describe_os_error
from qkviz.cli_parser import build_parser
from qkviz.core import QkvizError, command_line_caller
from qkviz.probes import ProbeSettings
from qkviz.cluster import dask_client
from qkviz.extraction import DEFAULT_CORPUS, load_images
from qkviz.projection import command_line_options, projection_method

logger = logging.getLogger("qkviz")


def _extract(args: argparse.Namespace) -> int:
    if args.images is not None and args.corpus is not None:
        raise QkvizError("give --corpus (text) or --images (an image model's images), not both")
    if args.images is not None:
        if not args.images.strip():
            raise QkvizError("--images is empty; give a folder, a list file, imagefolder:DIR or skimage-samples")
        corpus = load_images(args.images)      # a list file given to --images is a list of images, not text
    elif args.corpus is not None:
        corpus = args.corpus
    elif DEFAULT_CORPUS.exists():
        corpus = str(DEFAULT_CORPUS)
    else:
        raise QkvizError("give --corpus (a text file or dataset) or --images (for an image model)")
    qkviz.extract(args.model, corpus, args.out, max_tokens=args.max_tokens, max_sentences=args.max_sentences,
                  seed=args.seed, dtype=args.dtype, batch_size=args.batch_size, max_length=args.max_length,
                  chunk=args.chunk, chunk_overlap=args.chunk_overlap, device=args.device, text_column=args.text_column,
                  overwrite=args.overwrite, head_update=args.head_update, progress=not args.quiet)
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


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[object]:
    """The Dask client of ``--dask`` (``None`` without it), closed at the end; with ``--jobs`` too, one line."""
    if args.dask is None:
        yield None
        return
    if getattr(args, "jobs", None) not in (None, 1):
        raise QkvizError("--jobs starts local worker processes; with --dask the cluster's workers run the heads: "
                         "give one or the other")
    with dask_client(args.dask) as client:
        yield client


def _project(args: argparse.Namespace) -> int:
    run = qkviz.open_run(args.run)
    methods = [projection_method(m.strip()).name for m in args.method.split(",") if m.strip()]
    try:
        dims = [int(d) for d in args.dim.split(",")] if args.dim else ([2, 3] if args.tsne_3d else None)
    except ValueError:
        raise QkvizError(f"--dim {args.dim!r} must be 2, 3 or 2,3") from None
    params = _method_params(args, methods)
    options = dict(layers=parse_indices(args.layers, run.n_layers, "layers"),
                   heads=parse_indices(args.heads, run.n_heads, "heads"), jobs=args.jobs, seed=args.seed,
                   translate_keys=not args.no_translate, scale_norms=not args.no_scale, params=params,
                   progress=not args.quiet)
    with _cluster(args) as client:
        summary = qkviz.project(run, methods, dims, client=client, **options)
    for layer, head, method, dim, error in summary.failed:
        sys.stderr.write(f"qkviz: layer {layer} head {head} {method} {dim}D failed: {error}\n")
    if summary.failed:
        sys.stderr.write(f"qkviz: {len(summary.failed)} layouts failed, the others were made; "
                         f"'qkviz status --run {run.path}' lists the failures\n")
        return 1
    return 0


def _method_params(args: argparse.Namespace, methods: list[str]) -> dict[str, dict]:
    """``{method: {parameter: value}}`` of the parameter flags given, for each chosen method that takes them; a flag
    that none of them takes is a one-line error (not silently dropped)."""
    params: dict[str, dict] = {}
    for option in command_line_options():
        value = getattr(args, option.parameter.name)
        if value is None:
            continue
        takers = [method for method in methods if method in option.methods]
        if not takers:
            raise QkvizError(f"{option.parameter.flag} is a parameter of {', '.join(option.methods)}, not of "
                             f"{', '.join(methods)}: add one of those to --method, or leave it out")
        for method in takers:
            params.setdefault(method, {})[option.parameter.name] = value
    return params


def _report(args: argparse.Namespace) -> int:
    from qkviz.report.report_directory import check_destination

    run = qkviz.open_run(args.run)
    check_destination(args.out, args.overwrite)   # before the work, not after it
    report = qkviz.correlation_report(run, max_pairs=args.max_pairs, seed=args.seed, progress=not args.quiet)
    qkviz.write_report(report, args.out, overwrite=args.overwrite)
    return 0


def _stats(args: argparse.Namespace) -> int:
    run = qkviz.open_run(args.run)
    with _cluster(args) as client:
        qkviz.compute_stats(run, max_offset=args.max_offset, argmax_share=args.argmax_share,
                            broad_entropy=args.broad_entropy, exemplars=args.exemplars, syntax=args.syntax,
                            progress=not args.quiet, jobs=args.jobs, client=client, probes=not args.no_probes,
                            device=args.device, probe_settings=ProbeSettings(seed=args.probe_seed), ablate=args.ablate,
                            thresholds=LabelThresholds(**{name: getattr(args, name) for name in THRESHOLD_OPTIONS},
                                                       over_chance=args.over_chance))
    if args.circuits:
        from qkviz.explain import compute_circuits

        compute_circuits(run, budget=args.circuit_budget, device=args.device, progress=not args.quiet)
    return 0


def _related(args: argparse.Namespace) -> int:
    qkviz.relate_heads(qkviz.open_run(args.run), max_queries=args.max_queries, seed=args.seed,
                       progress=not args.quiet, jobs=args.jobs)
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
    layers, heads = parse_indices(args.layers, run.n_layers, "layers"), parse_indices(args.heads, run.n_heads, "heads")
    with _cluster(args) as client:
        qkviz.build_indexes(run, layers=layers, heads=heads, exact_limit=args.exact_limit, seed=args.seed,
                            progress=not args.quiet, client=client)
    return 0


def _serve(args: argparse.Namespace) -> int:
    serve = app_entry_point("serve")
    background = None if args.background.lower() == "none" else args.background
    serve(args.run, host=args.host, port=args.port, background=background, jobs=args.jobs,
          allow_hosts=tuple(args.allow_host), root_path=args.root_path, read_only=args.read_only,
          model=not args.no_model, max_explain_tokens=args.max_explain_tokens, model_memory=args.model_memory)
    sys.stderr.write("qkviz: stopped\n")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from qkviz.explain import set_trace_memory

    if args.out is not None and args.out.suffix.lower() != ".csv":
        raise QkvizError(f"--out {args.out} must name a .csv file")
    run = qkviz.open_run(args.run)
    if args.circuit:
        if args.query is not None or args.key is not None:
            raise QkvizError("--circuit explains the head over a sample of the run: leave --query and --key out")
        circuit = run.circuit(args.layer, args.head, budget=args.budget, seed=args.seed, device=args.device,
                              progress=not args.quiet)
        table, title = circuit.table, circuit.summary
        sample = circuit.sample
        title += (f" (mean partner logit {circuit.mean_logit:.4g}, mean moved length {circuit.mean_moved:.4g}; "
                  f"{len(sample['sentences'])} sequences, {sample['n_tokens']:,} of {sample['n_run_tokens']:,} tokens)")
        shown = pd.concat([table[table.side == side].head(args.top) for side in ("key", "query", "value")])
    else:
        if args.query is None or args.key is None:
            raise QkvizError("give --query I and --key J (token indices of the run), or --circuit")
        set_trace_memory(0)         # one pair per process: a trace of its whole sequence would never be read again
        table = run.explain(args.layer, args.head, args.query, args.key, by=args.by, device=args.device)
        attrs = table.attrs
        title = (f"L{args.layer}H{args.head}: query {args.query} {attrs['query_token']!r} x key {args.key} "
                 f"{attrs['key_token']!r}: logit {attrs['logit']:.6g} = sum of {len(table)} rows (by {args.by})")
        if attrs.get("softcap"):
            title += f"; the model then soft-caps it at {attrs['softcap']:g}"
        shown = table.head(args.top)
    print_split(title, table, shown, args.out)
    return 0


def _tokens(args: argparse.Namespace) -> int:
    table = qkviz.open_run(args.run).token_rows(args.sentence)
    rows = table.token_index
    header = (f"sentence {args.sentence}: tokens {rows.iat[0]}-{rows.iat[-1]} of the run (the indices qkviz explain's "
              f"--query and --key take)")
    width = max(len("index"), len(str(rows.iat[-1])))
    lines = [header, " ".join(table.attrs["text"].split()), f"{'index':>{width}}  position  token"]
    lines += [f"{row.token_index:>{width}}  {row.position:>8}  {row.token!r}" for row in table.itertuples()]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _models(args: argparse.Namespace) -> int:
    sys.stdout.write(models_listing() + "\n")
    return 0


def models_listing() -> str:
    """What ``qkviz models`` prints: the bundled models, every text model type tried with its status and why, and
    the image families."""
    import importlib.util

    from qkviz.extraction import BUNDLED_MODELS
    from qkviz.extraction.families import DECLARED_ADAPTERS, MODEL_FAMILIES, attribution_status, counts

    lines = ["Bundled models (--model NAME):"]
    for model in BUNDLED_MODELS.values():
        installed = importlib.util.find_spec(model.module) is not None
        state = "installed" if installed else f"not installed: {model.install_command}"
        if installed and model.converted is not None:
            converted = (model.converted / "config.json").exists()
            state += f", converted in {model.converted}" if converted else ", converted on first use"
        lines.append(f"  {model.name:<9} {model.description} [{model.package}=={model.version}, {state}]")
    tally = counts()
    lines.append(f"Text model types (any Hugging Face model of these, by directory, hub id or object; {tally['exact']} "
                 f"exact, {tally['refused']} refused; a type not listed is found from its structure and is extracted "
                 "only if its attention recomputes exactly):")
    width = max(len(family.model_type) for family in MODEL_FAMILIES)
    for family in MODEL_FAMILIES:
        explained = f" [qkviz explain: {attribution_status(family.model_type)}]" if family.status == "exact" else ""
        lines.append(f"  {family.model_type:<{width}} {family.status:<7} {family.note}{explained}".rstrip())
    lines.append("Image families (--images; a whole CLIP / SigLIP checkpoint: its vision tower):")
    images = [adapter for adapter in DECLARED_ADAPTERS if adapter.modality == "image"]
    family_width = max(len(adapter.family) for adapter in images)
    for adapter in images:
        lines.append(f"  {adapter.family:<{family_width}} model_type {', '.join(adapter.model_types)}: "
                     f"{adapter.description}")
    return "\n".join(lines)


def _quiet_transformers() -> None:
    """transformers' own weight-loading bars and notices are noise next to ours."""
    import os

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _quiet_dask() -> None:
    """Dask's own INFO messages (workers starting and stopping, connections closing) are noise next to ours
    (read by distributed when --dask imports it)."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


COMMANDS = {"extract": _extract, "project": _project, "report": _report, "stats": _stats, "related": _related,
            "compare": _compare, "status": _status, "index": _index, "serve": _serve, "models": _models,
            "explain": _explain, "writes": writes_command, "ablate": ablate_command, "tokens": _tokens}


#: the loggers whose information lines the console shows (other libraries' only from warnings up)
OWN_LOGGERS = ("qkviz", "dash_app")


def _console_log(level: int) -> None:
    """The console log: ``qkviz: message`` lines on stderr, at ``level`` for qkviz and the app, and from warnings
    up for any other library (a library's progress chatter, e.g. a browser driver's temporary files, is not
    qkviz's to print). Set up only where no handler is (``logging.basicConfig``'s rule)."""
    root = logging.getLogger()
    before = set(root.handlers)
    logging.basicConfig(level=level, format="qkviz: %(message)s")
    for handler in set(root.handlers) - before:
        handler.addFilter(lambda record: record.levelno >= logging.WARNING
                          or record.name.split(".")[0] in OWN_LOGGERS)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (2 for a user mistake, with one line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:           # --help (0) or a usage mistake (2), already printed by argparse
        return exit.code if isinstance(exit.code, int) else 2
    _console_log(logging.WARNING if args.quiet else logging.INFO)
    _quiet_transformers()
    _quiet_dask()
    try:
        with command_line_caller():         # the library's messages name options as this command's flags
            return COMMANDS[args.command](args)
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
