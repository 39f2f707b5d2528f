"""One head's layout made when it is asked for and not cached yet: what ``run.projection`` and ``run.plot`` do, so
that a notebook needs no ``qkviz project`` first.

The layout is made by :func:`qkviz.project` for that one head, in this process, so it lands in the run's cache
exactly as ``qkviz project`` writes it (the same key, under the same per-head lock: a ``qkviz project`` or a
background worker busy with the head is waited for, not repeated) and is read from there by every later call, the
app and the report. A layout too costly for one call (a fit on more than :data:`ON_DEMAND_FIT_TOKENS` tokens, or a
head of more than :data:`ON_DEMAND_HEAD_TOKENS`) is refused with the ``qkviz project`` command that makes it.
"""

from __future__ import annotations

import logging
import shlex

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.projection.catalogue import layout_spec, projection_method
from qkviz.projection.layouts import default_method
from qkviz.projection.project_run import project
from qkviz.projection.sampling import DEFAULT_SAMPLE
from qkviz.store.projections import ProjectionCache, ProjectionSpec
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: tokens a layout made on demand may be fitted on (a sampled method's default sample is within it)
ON_DEMAND_FIT_TOKENS = DEFAULT_SAMPLE
#: tokens a head made on demand may have: past it, placing and polishing the rest on the sampled fit takes minutes
#: (about 50 s a head of attn-tsne at 100,000 tokens, docs/scale.md)
ON_DEMAND_HEAD_TOKENS = 200_000


def layout_on_demand(run: StoredRun, layer: int, head: int, method: str | None = None, dim: int = 2, *,
                     translate_keys: bool = True, scale_norms: bool = True, seed: int = 0, make: bool = True,
                     progress: bool = True, **params) -> tuple[str, np.ndarray]:
    """``(method, [2 * n_tokens, dim] float32 layout)`` of the head's queries (first) and keys: read from the run's
    cache, or made now for this head and cached (a progress bar while it is made, with ``progress``). Without
    ``make``, or on a run opened ``read_only``, nothing is made: a layout not cached is a one-line
    :class:`QkvizError` naming the command that makes it (what the app, which never computes a layout inside a
    request, reads).

    ``method`` None is :func:`~qkviz.projection.layouts.default_method`: the most faithful layout the head has
    cached, else the run's default layout method. A layout that cannot be made here (too costly for one call, a run
    whose directory cannot be written, a failed fit) is a one-line :class:`QkvizError`; the first two name the
    ``qkviz project`` command that makes it."""
    run.check_head(layer, head)
    method = default_method(run, layer, head, dim) if method is None else method
    spec = layout_spec(layer, head, method, dim, translate_keys=translate_keys, scale_norms=scale_norms, seed=seed,
                       params=params)     # the method, the dimension and every parameter checked here
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    coordinates = cache.load(spec)
    if coordinates is not None:
        return method, coordinates
    command = project_command(run, spec)
    if not make or run.read_only:
        opened = " (the run is opened read-only)" if make else ""
        raise QkvizError(f"no {method} {dim}D projection of layer {layer} head {head} with these settings{opened}; "
                         f"make it with '{command}'")
    _check_cost(run, spec, command)
    logger.info("layer %d head %d has no %s %dD layout with these settings: making it now", layer, head, method, dim)
    try:
        summary = project(run, [method], [dim], layers=[layer], heads=[head], seed=seed, translate_keys=translate_keys,
                          scale_norms=scale_norms, params={method: params}, progress=progress)
    except OSError as error:
        raise QkvizError(f"cannot cache a layout in {cache.directory} ({error.strerror or error}); make it where the "
                         f"run can be written: '{command}'") from None
    if summary.failed:
        raise QkvizError(f"the {method} {dim}D layout of layer {layer} head {head} failed: {summary.failed[0][-1]}")
    coordinates = cache.load(spec)
    if coordinates is None:      # removed between its making and this read (another process cleared the cache)
        raise QkvizError(f"the {method} {dim}D layout of layer {layer} head {head} was made but is no longer in "
                         f"{cache.directory}; make it again with '{command}'")
    return method, coordinates


def _check_cost(run: StoredRun, spec: ProjectionSpec, command: str) -> None:
    """A one-line refusal, with ``command``, of a layout too costly to make in one call for one head."""
    if projection_method(spec.method).instant:
        return
    sample = int(dict(spec.params).get("sample", 0))
    fitted = sample if 0 < sample < run.n_tokens else run.n_tokens
    if fitted > ON_DEMAND_FIT_TOKENS or run.n_tokens > ON_DEMAND_HEAD_TOKENS:
        raise QkvizError(f"no {spec.method} {spec.dim}D layout of layer {spec.layer} head {spec.head} is cached, and "
                         f"making one here ({fitted:,} tokens fitted of the head's {run.n_tokens:,}) would take "
                         f"minutes; make it with '{command}'")


def project_command(run: StoredRun, spec: ProjectionSpec) -> str:
    """The ``qkviz project`` command that caches ``spec``'s layout: its settings that are not the defaults as flags."""
    method = projection_method(spec.method)
    words = ["qkviz project --run", shlex.quote(str(run.path)), "--method", spec.method, "--dim", str(spec.dim),
             "--layers", str(spec.layer), "--heads", str(spec.head)]
    params = dict(spec.params)
    seed = params.pop("seed")
    words += ["--seed", str(seed)] if seed != 0 else []
    words += [] if spec.translate_keys else ["--no-translate"]
    words += [] if spec.scale_norms else ["--no-scale"]
    for name, value in params.items():
        parameter = method.parameter(name)
        if parameter is None or value == parameter.default:
            continue
        if parameter.kind == "flag":
            words.append(parameter.flag if value else "--no-" + parameter.flag[2:])
        else:
            words += [parameter.flag, _flag_value(parameter.kind, value)]
    return " ".join(words)


def _flag_value(kind: str, value: object) -> str:
    if kind == "whole":
        return str(int(value))
    if kind == "real":
        return repr(float(value))
    return str(value)
