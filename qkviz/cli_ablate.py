"""``qkviz ablate``: whether a head matters -- its output removed, the change per token of the run, printed.

Prints the head's mean change over the run (next-token loss in nats; an encoder: the relative change of its last
hidden state) and the tokens it changes most, each with the text around it; ``--out`` writes every row (``.csv``
or ``.parquet``). The work is :func:`qkviz.probes.ablate`'s; this module parses nothing and only prints.
"""

from __future__ import annotations

import argparse
import sys

import qkviz
from qkviz.core import QkvizError
from qkviz.probes import ablation_summary, most_affected

#: characters of a sentence shown on each side of a token
CONTEXT_CHARS = 30
OUT_SUFFIXES = (".csv", ".parquet")


def context(run, token: int) -> str:
    """The text around ``token`` of the run, the token in brackets, on one line."""
    tokens = run.tokens
    text = str(run.sentences.text.iat[int(tokens.sentence.iat[token])])
    start, end = int(tokens.char_start.iat[token]), int(tokens.char_end.iat[token])
    if end <= start:
        return f"[{tokens.token.iat[token]}]"
    before, after = text[max(0, start - CONTEXT_CHARS):start], text[end:end + CONTEXT_CHARS]
    return " ".join(f"{before}[{text[start:end]}]{after}".split())


def ablate_command(args: argparse.Namespace) -> int:
    out = args.out
    if out is not None and out.suffix.lower() not in OUT_SUFFIXES:
        raise QkvizError(f"--out {out} must name a .csv or .parquet file")
    run = qkviz.open_run(args.run)
    frame = run.ablate(args.layer, args.head, args.mode, device=args.device, progress=not args.quiet)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(out, index=False) if out.suffix.lower() == ".parquet" else frame.to_csv(out, index=False)
    shown = most_affected(frame, args.top)[["token_index", "sentence", "position", "token", "loss", "ablated_loss",
                                            "change"]].copy()
    if frame.attrs["measure"] != "next-token loss":
        shown = shown.drop(columns=["loss", "ablated_loss"])
    shown["context"] = [context(run, int(token)) for token in shown.token_index]
    lines = [ablation_summary(frame), f"the {len(shown)} tokens it changes most:",
             shown.to_string(index=False, float_format=lambda value: f"{value:+.4f}")]
    if out is not None:
        lines.append(f"all {len(frame):,} rows: {out}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
