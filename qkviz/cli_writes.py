"""``qkviz writes``: what the model writes at a token -- a target's logit split by the parts of the final residual
stream -- or what one head writes there: its share split by the tokens it read (``--by source``), by the parts that
wrote its values (``--by part``), or the tokens its output promotes and suppresses (``--by tokens``). The work is
:mod:`qkviz.explain`'s (``run.direct_effects``, ``run.head_output``, ``run.head_writes``); this module parses
nothing and only prints, and ``--out`` writes every row to a ``.csv`` file.
"""

from __future__ import annotations

import argparse
import sys

import qkviz
from qkviz.core import QkvizError

WRITES_BY = ("source", "part", "tokens")


def _target(args: argparse.Namespace):
    if args.target is not None and args.target_id is not None:
        raise QkvizError("give --target TEXT or --target-id N, not both")
    return args.target_id if args.target_id is not None else args.target


def _whole_model(run, args: argparse.Namespace):
    if args.by is not None:
        raise QkvizError("--by splits one head's writes: give --layer and --head too")
    table = run.direct_effects(args.query, _target(args), device=args.device)
    attrs = table.attrs
    title = (f"query {args.query} {attrs['query_token']!r}: logit of {attrs['target_token']!r} (id {attrs['target']}) "
             f"{attrs['logit']:.6g} = sum of {len(table)} parts of the final residual stream")
    if attrs.get("capped_logit") is not None:
        title += f"; after the model's soft cap {attrs['capped_logit']:.6g}"
    return table, title


def _one_head(run, args: argparse.Namespace):
    by = args.by or "source"
    if by == "tokens":
        if _target(args) is not None:
            raise QkvizError("--by tokens lists the tokens the head promotes and suppresses: leave the target out")
        table = run.head_writes(args.layer, args.head, args.query, top=args.top, device=args.device)
        return table, (f"L{args.layer}H{args.head} at query {args.query} {table.attrs['query_token']!r}: the "
                       f"{args.top} tokens its output promotes and suppresses most (logits)")
    table = run.head_output(args.layer, args.head, args.query, _target(args), by=by, device=args.device)
    attrs = table.attrs
    return table, (f"L{args.layer}H{args.head} at query {args.query}: its direct effect on {attrs['target_token']!r} "
                   f"(id {attrs['target']}) {attrs['row']:.6g} = sum of {len(table)} rows (by {by}; the model's "
                   f"logit {attrs['logit']:.6g})")


def writes_command(args: argparse.Namespace) -> int:
    if args.out is not None and args.out.suffix.lower() != ".csv":
        raise QkvizError(f"--out {args.out} must name a .csv file")
    if (args.layer is None) != (args.head is None):
        raise QkvizError("give --layer and --head together (one head's writes), or neither (the whole model's)")
    run = qkviz.open_run(args.run)
    table, title = _whole_model(run, args) if args.layer is None else _one_head(run, args)
    print_split(title, table, table if args.by == "tokens" else table.head(args.top), args.out)
    return 0


def print_split(title: str, table, shown, out) -> None:
    """Print ``title`` and the rows ``shown`` of ``table``; with ``out`` (a ``.csv`` path), write every row there
    first and say where."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False)
    lines = [title, shown.to_string(index=False, float_format=lambda value: f"{value:.6g}")]
    if out is not None:
        lines.append(f"all {len(table)} rows: {out}")
    sys.stdout.write("\n".join(lines) + "\n")
