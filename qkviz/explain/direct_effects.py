"""What the whole model writes at one token: the logit of a target token split exactly by the parts of the final
residual stream (embeddings, each head, each MLP, the biases), each through the final norm with its divisor fixed
and then the unembedding (:mod:`qkviz.extraction.residual.final_stream`). The head rows are the heads' direct
effects; what a head's row is made of (the keys it read, the parts that wrote its values) is :mod:`.head_writes`'."""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.explain.pair_logit import check_token
from qkviz.probes.model_on_demand import run_language_model, run_tokenizer, sequence_ids
from qkviz.store.run import StoredRun

#: the columns of a direct-effects table (as ``run.explain``'s one-side tables)
DIRECT_EFFECT_COLUMNS = ("part", "contribution")


def _next_token(run: StoredRun, query: int) -> int:
    tokens = run.tokens
    if query + 1 >= len(tokens) or int(tokens.sentence.iat[query + 1]) != int(tokens.sentence.iat[query]):
        raise QkvizError(f"query {query} is the last token of its sequence: it has no next token to split the logit "
                         "of; give target= (a token id or one token of the vocabulary)")
    return int(tokens.token_id.iat[query + 1])


def _target_id(run: StoredRun, query: int, target, tokenizer) -> int:
    """``target`` as a token id: the query's next token for None; an id as given; a string that is exactly one token
    of the model's vocabulary (its leading space as the tokenizer writes it), else a one-line refusal showing how it
    tokenises."""
    if target is None:
        return _next_token(run, query)
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        return int(target)
    if not isinstance(target, str) or not target:
        raise QkvizError(f"target must be a token id or one token of the vocabulary (a string), got {target!r}")
    tokenizer = run_tokenizer(run, tokenizer)
    ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = " + ".join(repr(tokenizer.decode([piece])) for piece in ids) or "no token"
        raise QkvizError(f"target {target!r} is {len(ids)} tokens of the model's vocabulary ({pieces}), not one; give "
                         "one token (with its leading space as the tokenizer writes it) or its id")
    return int(ids[0])


def token_text(run: StoredRun, token_id: int, tokenizer) -> str:
    """How token id ``token_id`` reads, as the tokenizer writes it (its leading space kept: the form a target string
    takes); where the run's tokenizer cannot be had, as the run's token table shows it, else its id."""
    try:
        return str(run_tokenizer(run, tokenizer).decode([token_id]))
    except QkvizError:
        held = np.flatnonzero(run.tokens.token_id.to_numpy() == token_id)
        return str(run.tokens.token.iat[int(held[0])]) if len(held) else f"<id {token_id}>"


def direct_effects(run: StoredRun, query: int, target=None, *, model=None, device: str = "cpu",
                   tokenizer=None) -> pd.DataFrame:
    """The logit of ``target`` at token ``query`` (a row of ``run.tokens``) split by the parts of the final residual
    stream: columns ``part`` and ``contribution``, one row per part (named as :func:`qkviz.explain.explain_pair`
    names them, plus the final norm's bias and ``unembed.bias`` where the model has them), sorted by
    ``|contribution|``. ``target``: the query's next token when None, a token id, or a string that is exactly one
    token. The rows add up to ``attrs["logit"]``, the model's own logit (where it caps its final logits, the logit
    before the cap; ``attrs["capped_logit"]`` the one after). A model without a language-model head, an encoder run,
    or the last token without a target is refused in one line."""
    from qkviz.extraction.residual import direct_effect_parts

    query, target, language_model, ids = prepared(run, query, target, model, device, tokenizer, "direct effects")
    position = int(run.tokens.position.iat[query])
    effects = direct_effect_parts(language_model, ids, position, target)
    frame = by_size(pd.DataFrame({"part": effects.names, "contribution": effects.contributions}))
    frame.attrs.update(query=query, target=target, target_token=token_text(run, target, tokenizer),
                       query_token=str(run.tokens.token.iat[query]), logit=effects.logit,
                       capped_logit=effects.capped)
    return frame


def by_size(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` sorted by ``|contribution|``, largest first (ties in their order)."""
    order = np.argsort(-np.abs(frame.contribution.to_numpy()), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def prepared(run: StoredRun, query: int, target, model, device: str, tokenizer, purpose: str):
    """``(query, target id, the run's language model, the query's sequence up to it)`` for a split of what is
    written at ``query``, each checked (one-line refusals: an encoder, a model without an unembedding, a token out
    of range, a target outside the vocabulary or not one token)."""
    query = check_token(run, "query", query)
    if run.is_image_run or not run.is_causal:
        raise QkvizError(f"run {run.path}: {purpose} split a causal language model's next-token logit; this run's "
                         "model is an encoder (no unembedding: nothing it writes is a logit)")
    target = _target_id(run, query, target, tokenizer)
    language_model = run_language_model(run, model, device, purpose)
    if getattr(language_model, "get_output_embeddings", lambda: None)() is None:
        raise QkvizError(f"run {run.path}: its model has no language-model head (no unembedding), so no token's "
                         "logit can be split; pass the model with its head as model=")
    vocabulary = int(language_model.get_output_embeddings().weight.shape[0])
    if not 0 <= target < vocabulary:
        raise QkvizError(f"target {target} is not a token id of the model's vocabulary (0..{vocabulary - 1})")
    sentence, position = int(run.tokens.sentence.iat[query]), int(run.tokens.position.iat[query])
    return query, target, language_model, sequence_ids(run, sentence, up_to=position)
