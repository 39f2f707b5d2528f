"""What a run directory holds, as the lines ``qkviz status`` prints: the extraction, the cached
projections per method and dimension, the layouts that failed, and the search indexes."""

from __future__ import annotations

from qkviz.search.mips_index import EXACT_LIMIT
from qkviz.search.partner_index import PartnerIndexes
from qkviz.store.projections import ProjectionCache
from qkviz.store.run import StoredRun
from qkviz.search.token_index import load_token_index


def describe_run(run: StoredRun) -> list[str]:
    """One line per fact, each starting with a ten-character label."""
    manifest = run.manifest
    counts = manifest["counts"]
    lines = [
        f"run        {run.path}",
        f"model      {run.model_id} ({manifest['model']['source']}), family {run.family}, "
        f"{'causal' if run.is_causal else 'bidirectional'}",
        f"heads      {run.n_layers} layers x {run.n_heads} heads, {run.n_kv_heads} key-value heads, d_head {run.head_dim}",
        f"extracted  {counts['n_tokens']} tokens, {counts['n_sentences']} sentences "
        f"({counts['n_truncated_sentences']} truncated), stored as {run.dtype}, {manifest['created_at']}",
        f"corpus     {manifest['corpus']['source']} (sha256 {manifest['corpus']['sha256'][:12]})",
    ]
    cache = ProjectionCache(run.path, manifest["fingerprint"])
    projections = cache.summary()
    all_heads = run.n_layers * run.n_heads
    if not projections:
        lines.append(f"projected  nothing yet: 'qkviz project --run {run.path}'")
    for (method, dim, settings), count in sorted(projections.items()):
        lines.append(f"projected  {method} {dim}D: {count}/{all_heads} heads ({settings})")
    lines += failure_lines(cache.failures())
    lines.append(index_status(run))
    return lines


def failure_lines(failures: list, shown: int = 5) -> list[str]:
    """One line per failed layout (the first ``shown``), then how many more."""
    lines = [f"failed     layer {spec.layer} head {spec.head} {spec.method} {spec.dim}D: {error}"
             for spec, error in failures[:shown]]
    if len(failures) > shown:
        lines.append(f"failed     ... and {len(failures) - shown} more layouts")
    return lines


def index_status(run: StoredRun) -> str:
    """The status line of the run's search indexes."""
    approximate = PartnerIndexes(run).summary().get("ivf", 0)
    token_index = load_token_index(run) is not None
    exact = run.n_tokens <= EXACT_LIMIT
    if not approximate and not token_index:
        return (f"indexed    nothing yet (partner search is exact without: {run.n_tokens:,} tokens <= {EXACT_LIMIT:,}): "
                f"'qkviz index --run {run.path}'" if exact else
                f"indexed    nothing yet ({run.n_tokens:,} tokens need approximate partner indexes): "
                f"'qkviz index --run {run.path}'")
    needed = run.n_layers * (run.n_heads + run.n_kv_heads)
    partners = (f"{approximate}/{needed} approximate partner indexes" if approximate or not exact else
                "partner search exact on the stored vectors (no index needed)")
    return f"indexed    {partners}, token index {'stored' if token_index else 'not stored'}"
