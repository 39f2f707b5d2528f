"""What one head writes at a token (the OV half of the head, beside the QK half the rest of :mod:`qkviz.explain`
splits): its row of the direct effects on a target's logit split by the tokens it read each piece from, or by the
parts of the residual stream that wrote the values it moves (V-composition), and the tokens its output promotes and
suppresses most (:mod:`qkviz.extraction.residual.head_writes`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.explain.direct_effects import by_size, prepared, token_text
from qkviz.probes.model_on_demand import run_tokenizer
from qkviz.store.run import StoredRun

#: how :func:`head_output` splits a head's row: by the token each piece was read from, or by the residual parts that
#: wrote the values (``run.explain``'s ``by="key"`` is another thing: the key's parts, for its logit)
HEAD_OUTPUT_BY = ("source", "part")


def _written(run: StoredRun, layer: int, head: int, query: int, target, model, device: str, tokenizer):
    from qkviz.extraction.residual import head_write_parts

    run.check_head(layer, head)
    query, target, language_model, ids = prepared(run, query, target, model, device, tokenizer, "a head's writes")
    position = int(run.tokens.position.iat[query])
    writes = head_write_parts(language_model, ids, position, target, layer, head, run.logit_rule(layer, head))
    return query, target, writes


def head_output(run: StoredRun, layer: int, head: int, query: int, target=None, by: str = "source", *, model=None,
                device: str = "cpu", tokenizer=None) -> pd.DataFrame:
    """Head ``(layer, head)``'s direct effect on ``target``'s logit at token ``query`` (its row of
    :func:`~qkviz.explain.direct_effects.direct_effects`), split exactly.

    ``by="source"``: one row per token the query may attend to (``source``, a row of ``run.tokens``, with its
    ``token`` and ``attention`` weight): the weight times that token's value through the head's output slice, the
    frozen final norm and the target's unembedding row. ``by="part"``: one row per part of the residual stream that
    wrote those values (``part``, named as :func:`~qkviz.explain.direct_effects.direct_effects` names them, and the
    value projection's bias ``L{l}.value_bias``). Both add up to ``attrs["row"]``; sorted by ``|contribution|``."""
    if by not in HEAD_OUTPUT_BY:
        raise QkvizError(f"by must be one of {', '.join(HEAD_OUTPUT_BY)}, got {by!r}")
    return head_write_splits(run, layer, head, query, target, model=model, device=device, tokenizer=tokenizer)[by]


def head_write_splits(run: StoredRun, layer: int, head: int, query: int, target=None, *, top: int = 10, model=None,
                      device: str = "cpu", tokenizer=None) -> dict[str, pd.DataFrame]:
    """:func:`head_output`'s two splits (``"source"``, ``"part"``) and :func:`head_writes`' table (``"tokens"``, its
    ``top`` each way) from one pass of the model."""
    _check_top(top)
    query, target, writes = _written(run, layer, head, query, target, model, device, tokenizer)
    return _frames(run, layer, head, query, target, writes, top, tokenizer)


def head_outputs(run: StoredRun, layer: int, head: int, queries, by: str = "source", *, targets=None, model=None,
                 device: str = "cpu", tokenizer=None) -> list[pd.DataFrame]:
    """:func:`head_output` at each of ``queries`` (``targets[i]`` the target at ``queries[i]``; each query's next
    token when None), in their order, from one pass of the model per sequence instead of one per query: a causal
    model's pass over a sequence up to its last query holds every earlier query's writes as a pass up to that query
    does (the same to float32 rounding), and the values' parts are split once. The frames are
    :func:`head_output`'s."""
    from qkviz.extraction.residual import head_writes_at

    if by not in HEAD_OUTPUT_BY:
        raise QkvizError(f"by must be one of {', '.join(HEAD_OUTPUT_BY)}, got {by!r}")
    run.check_head(layer, head)
    queries = list(queries)
    targets = [None] * len(queries) if targets is None else list(targets)
    if len(targets) != len(queries):
        raise QkvizError(f"targets: one per query ({len(queries)}), got {len(targets)}")
    asked = [prepared(run, query, target, model, device, tokenizer, "a head's writes")
             for query, target in zip(queries, targets)]
    sentences = [int(run.tokens.sentence.iat[query]) for query, *_ in asked]
    positions = [int(run.tokens.position.iat[query]) for query, *_ in asked]
    frames: list[pd.DataFrame | None] = [None] * len(asked)
    for sentence in dict.fromkeys(sentences):
        mine = [index for index in range(len(asked)) if sentences[index] == sentence]
        _query, _target, language_model, ids = asked[max(mine, key=positions.__getitem__)]
        written = head_writes_at(language_model, ids, [positions[index] for index in mine],
                                 [asked[index][1] for index in mine], layer, head, run.logit_rule(layer, head))
        for index, writes in zip(mine, written):
            query, target = asked[index][:2]
            frames[index] = _frames(run, layer, head, query, target, writes, 1, tokenizer)[by]
    return frames


def _frames(run: StoredRun, layer: int, head: int, query: int, target: int, writes, top: int,
            tokenizer) -> dict[str, pd.DataFrame]:
    """The two splits of ``writes`` (``"source"``, ``"part"``) and the promoted tokens (``"tokens"``) as frames."""
    first = query - int(run.tokens.position.iat[query])
    sources = np.arange(first, query + 1)
    frames = {"source": pd.DataFrame({"source": sources, "token": run.tokens.token.to_numpy()[sources].astype(str),
                                      "attention": writes.attention, "contribution": writes.by_source}),
              "part": pd.DataFrame({"part": writes.part_names, "contribution": writes.by_part})}
    target_token = token_text(run, target, tokenizer)
    for by, frame in frames.items():
        frames[by] = by_size(frame)
        frames[by].attrs.update(layer=layer, head=head, query=query, by=by, target=target, target_token=target_token,
                                row=writes.row, logit=writes.effects.logit)
    frames["tokens"] = _promoted(run, layer, head, query, writes.logits, top, tokenizer)
    return frames


def head_writes(run: StoredRun, layer: int, head: int, query: int, top: int = 10, *, model=None, device: str = "cpu",
                tokenizer=None) -> pd.DataFrame:
    """The ``top`` tokens head ``(layer, head)``'s output promotes most at token ``query`` and the ``top`` it
    suppresses most: its direct effect on every token of the vocabulary (its vector through the frozen final norm and
    the unembedding). Columns ``direction`` (``"promotes"``, ``"suppresses"``), ``token_id``, ``token`` and
    ``effect`` (logits)."""
    _check_top(top)
    # any target serves (the effect on every token is the same pass): the next token where there is one
    query, _target, writes = _written(run, layer, head, query, None if _has_next(run, query) else 0, model, device,
                                      tokenizer)
    return _promoted(run, layer, head, query, writes.logits, top, tokenizer)


def _check_top(top) -> None:
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise QkvizError(f"top must be a whole number of at least 1, got {top!r}")


def _promoted(run: StoredRun, layer: int, head: int, query: int, logits: np.ndarray, top: int,
              tokenizer) -> pd.DataFrame:
    order = np.argsort(logits, kind="stable")
    promoted, suppressed = order[::-1][:top], order[:top]
    ids = np.concatenate([promoted, suppressed])
    frame = pd.DataFrame({"direction": ["promotes"] * len(promoted) + ["suppresses"] * len(suppressed),
                          "token_id": ids, "token": _decoded(run, ids, tokenizer), "effect": logits[ids]})
    frame.attrs.update(layer=layer, head=head, query=query, query_token=str(run.tokens.token.iat[query]))
    return frame


def _has_next(run: StoredRun, query: int) -> bool:
    tokens = run.tokens
    return (0 <= query < len(tokens) - 1) and int(tokens.sentence.iat[query + 1]) == int(tokens.sentence.iat[query])


def _decoded(run: StoredRun, ids: np.ndarray, tokenizer) -> list[str]:
    try:
        tokenizer = run_tokenizer(run, tokenizer)
    except QkvizError:
        return [f"<id {int(token)}>" for token in ids]
    return [str(tokenizer.decode([int(token)])) for token in ids]
