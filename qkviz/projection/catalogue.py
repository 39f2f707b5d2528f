"""The projection-method catalogue: every layout method, declared once, and everything derived from it.

A method is one module of :mod:`qkviz.projection.methods` that declares a :class:`ProjectionMethod` -- its
name, label, parameters (:class:`Parameter`: kind, range, default), dimensions and fit function -- and
calls :func:`register`. The command line's flags, the Python API's validation, the app's labels and order,
the report's choice of layout and ``serve``'s background method are all read from here, so a new method is
one new file (see ``docs/architecture.md``). A setting is checked once, where it enters
(:func:`resolve_params`: the API; :meth:`Parameter.parse`: the command line, with the same check); the fit
functions below trust what they are given.

Methods are ranked by :attr:`ProjectionMethod.rank`: the lower, the more faithful a picture of attention
(``bench/faithful.py``), so a view or a report that is not told which layout to show takes the best one
a head has.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.store.projections import DIMENSIONS, ProjectionSpec


@dataclass(frozen=True)
class Parameter:
    """One parameter of a method: its default, its kind and the values it may take.

    ``kind`` is ``"whole"`` (an integer), ``"real"`` (a finite number; ``inf`` too with ``infinite``),
    ``"flag"`` (true or false) or ``"choice"`` (one of ``choices``). Numbers may not fall below ``low``
    (nor reach it, with ``low_open``). Parameters of the same name in several methods share their kind and
    range (checked by :func:`register`), so the command line has one flag for each name."""

    name: str
    default: object
    kind: str
    help: str
    low: float | None = None
    low_open: bool = False
    infinite: bool = False
    choices: tuple[str, ...] = ()
    #: read only by a 3D layout (left out of 2D layouts' settings, so they do not split the cache)
    only_3d: bool = False

    def check(self, method: str, value: object) -> object:
        """``value`` as stored (a flag as a Python bool), or a one-line :class:`QkvizError` naming the method."""
        if self.kind == "flag":
            if not isinstance(value, (bool, np.bool_)):
                raise QkvizError(f"{method}'s {self.name} must be true or false, got {value!r}")
            return bool(value)
        if self.kind == "choice":
            if value not in self.choices:
                raise QkvizError(f"{method}'s {self.name} {value!r} is not one of {', '.join(self.choices)}")
            return value
        whole = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        number = whole or (isinstance(value, (float, np.floating))
                           and (np.isfinite(value) or (self.infinite and value == math.inf)))
        below = self.low is not None and number and (value < self.low or (self.low_open and value == self.low))
        if (self.kind == "whole" and not whole) or not number or below:
            raise QkvizError(f"{method}'s {self.name} must be {self.describe()}, got {value!r}")
        return value

    def describe(self) -> str:
        wanted = "a whole number" if self.kind == "whole" else "a finite number"
        bound = "" if self.low is None else (f" above {self.low:g}" if self.low_open else f" >= {self.low:g}")
        return wanted + bound + (" or inf" if self.infinite else "")

    def parse(self, text: str) -> object:
        """A command-line value: the text turned into the parameter's kind and checked like the API's
        (a :class:`ValueError` with the reason, which argparse shows as the option's one-line error)."""
        try:
            value = text if self.kind == "choice" else int(text) if self.kind == "whole" else float(text)
            return self.check("", value)
        except (ValueError, QkvizError):
            wanted = f"one of {', '.join(self.choices)}" if self.kind == "choice" else self.describe()
            raise ValueError(f"must be {wanted}, got {text}") from None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class FitInputs:
    """What a fit function receives: the aligned points ``[2n, d]`` (queries, then keys), the dimension, the
    seed, the method's full parameters, and what the per-head task computed once for several layouts:
    ``neighbours`` (a graph under the method's metric with at least :meth:`ProjectionMethod.neighbours_needed`
    neighbours, or ``None``), ``start_2d`` (for a method that ``refines_2d``: its 2D layout of the same points,
    or ``None``) and ``attention`` (for a method that ``uses_attention``: the head's attention graph)."""

    points: np.ndarray
    dim: int
    seed: int
    params: dict
    neighbours: object = None       # qkviz.projection.neighbors.NeighborGraph
    start_2d: np.ndarray | None = None
    attention: object = None        # qkviz.projection.attention_graph.AttentionGraph


@dataclass(frozen=True)
class Projection:
    """A fitted layout: float32 coordinates ``[n_points, dim]``, the parameters used (a perplexity or neighbour
    count too large for the points is reduced), ``adjusted`` ``{name: (asked, used)}`` for each reduction, and
    ``reference`` (t-SNE: openTSNE's embedding, which can place more points)."""

    coordinates: np.ndarray
    params: dict
    adjusted: dict
    reference: object = None


@dataclass(frozen=True)
class ProjectionMethod:
    """A layout method, as the catalogue holds it."""

    name: str
    #: its name in the app, the report and the command line's help
    label: str
    parameters: tuple[Parameter, ...]
    #: ``fit(FitInputs) -> Projection``
    fit: Callable[[FitInputs], Projection]
    #: the lower, the more faithful to attention: what a view takes when it is told no method
    rank: int
    #: the dimensions it can make, and those :func:`qkviz.project` makes when asked for none
    dims: tuple[int, ...] = DIMENSIONS
    default_dims: tuple[int, ...] = DIMENSIONS
    #: one line on what it is, for ``--help``
    summary: str = ""
    #: its neighbour graph is the head's attention (:mod:`qkviz.projection.attention_graph`, with its
    #: parameters among the method's)
    uses_attention: bool = False
    #: a 3D layout starts from the cached 2D one of the same settings (:attr:`FitInputs.start_2d`)
    refines_2d: bool = False
    #: nonzero: fitted on a sample, the 2D layout is spread over the whole head's attention graph and polished on it
    #: (:mod:`qkviz.projection.sampling`), and this is that placement's version, part of the cache key (entries
    #: of an older one are made again); zero: the other tokens are placed by their affinities to the sample
    polish_version: int = 0
    #: ``neighbours_needed(params, n_points) -> int``: neighbours (self included) read from the head's shared
    #: graph under ``params["metric"]``; ``None``: none
    neighbours_needed: Callable[[dict, int], int] | None = None
    #: run once in each worker process before its first head (e.g. compiling numba code)
    warm_up: Callable[[], None] | None = None
    #: the axes' titles where a view shows them
    axes: tuple[str, ...] = ("x", "y", "z")
    #: milliseconds a head: its layouts are made in the calling process, where worker processes would cost more
    instant: bool = False

    @property
    def defaults(self) -> dict:
        return {parameter.name: parameter.default for parameter in self.parameters}

    def parameter(self, name: str) -> Parameter | None:
        return next((parameter for parameter in self.parameters if parameter.name == name), None)


_CATALOGUE: dict[str, ProjectionMethod] = {}
_DISCOVERED = False


def register(method: ProjectionMethod) -> ProjectionMethod:
    """Add ``method`` to the catalogue (a method module calls this once, at import). Its parameters must agree
    in kind and range with those of the same name in other methods: the command line has one flag per name.

    A method whose module is in :mod:`qkviz.projection.methods` is known in every process; one registered from
    elsewhere is known where its module is imported, so its layouts are made in this process (``jobs=1``)."""
    for other in _CATALOGUE.values():
        for parameter in method.parameters:
            same = other.parameter(parameter.name)
            if same is not None and (same.kind, same.low, same.low_open, same.infinite, same.choices) != (
                    parameter.kind, parameter.low, parameter.low_open, parameter.infinite, parameter.choices):
                raise ValueError(f"{method.name}'s parameter {parameter.name} differs in kind or range from "
                                 f"{other.name}'s")
    if not set(method.default_dims) <= set(method.dims) <= set(DIMENSIONS):
        raise ValueError(f"{method.name}'s dimensions {method.dims} / {method.default_dims} are not of {DIMENSIONS}")
    _CATALOGUE[method.name] = method
    return method


def unregister(name: str) -> None:
    """Remove a method (what a test that registered one does afterwards)."""
    _CATALOGUE.pop(name, None)


def _discover() -> None:
    """Import every module of :mod:`qkviz.projection.methods` once: each registers its method (found by name: the
    catalogue knows no method, the methods know the catalogue)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    methods = importlib.import_module(f"{__package__}.methods")
    for module in pkgutil.iter_modules(methods.__path__):
        importlib.import_module(f"{methods.__name__}.{module.name}")


def projection_methods() -> tuple[ProjectionMethod, ...]:
    """Every method, most faithful first."""
    _discover()
    return tuple(sorted(_CATALOGUE.values(), key=lambda method: (method.rank, method.name)))


def method_names() -> tuple[str, ...]:
    """Every method's name, most faithful first."""
    return tuple(method.name for method in projection_methods())


def projection_method(name: str) -> ProjectionMethod:
    """The method called ``name``, or a one-line :class:`QkvizError` listing them."""
    _discover()
    if name not in _CATALOGUE:
        raise QkvizError(f"unknown projection method {name!r}; choose from {', '.join(method_names())}")
    return _CATALOGUE[name]


def method_list(methods: object) -> list[str]:
    """``methods`` as a list of known method names: one name, names separated by commas (``"pca,tsne"``, as on the
    command line), or a list or tuple of names; anything else, or an unknown name, is a one-line
    :class:`QkvizError`."""
    if isinstance(methods, str):
        names = [name.strip() for name in methods.split(",") if name.strip()]
    elif isinstance(methods, (list, tuple)) and all(isinstance(name, str) for name in methods):
        names = list(methods)
    else:
        names = []
    if not names:
        raise QkvizError(f"methods must be a list of method names (or one name, or names separated by commas), "
                         f"such as ['pca', 'tsne'], not {methods!r}; choose from {', '.join(method_names())}")
    return [projection_method(name).name for name in names]


def dim_list(dims: object) -> list[int] | None:
    """``dims`` as a list of dimensions: ``None`` (each method's defaults) stays ``None``, one dimension (``3``)
    becomes ``[3]``, a list or tuple of them is kept; anything else is a one-line :class:`QkvizError` (and a
    dimension other than 2 or 3 is refused where each method's are checked, :func:`check_dim`)."""
    if dims is None:
        return None
    chosen = [dims] if isinstance(dims, int) and not isinstance(dims, bool) else dims
    if not isinstance(chosen, (list, tuple)) or not chosen or not all(
            isinstance(dim, int) and not isinstance(dim, bool) for dim in chosen):
        raise QkvizError(f"dims must be 2, 3 or a list of them, such as [2, 3], not {dims!r}")
    return list(chosen)


def method_labels() -> dict[str, str]:
    """``{name: label}`` of every method, most faithful first."""
    return {method.name: method.label for method in projection_methods()}


def method_label(name: str) -> str:
    """The method's name in the app and the report."""
    return projection_method(name).label


def check_dim(method: ProjectionMethod, dim: int) -> None:
    if dim not in DIMENSIONS:
        raise QkvizError(f"unknown dimension {dim!r}; choose 2 or 3")
    if dim not in method.dims:
        raise QkvizError(f"{method.name} makes {' or '.join(f'{d}D' for d in method.dims)} layouts, not {dim!r}; "
                         f"choose {' or '.join(str(d) for d in method.dims)}")


def resolve_params(name: str, params: dict | None = None, dim: int = 3) -> dict:
    """The method's defaults overridden by ``params``, each checked: the one check of a setting. Unknown names
    are refused; parameters only a 3D layout reads are left out of 2D settings."""
    method = projection_method(name)
    check_dim(method, dim)
    params = dict(params or {})
    unknown = set(params) - set(method.defaults)
    if unknown:
        raise QkvizError(f"{name} has no parameter {', '.join(sorted(unknown))}; "
                         f"it takes {', '.join(method.defaults) or 'none'}")
    resolved = {}
    for parameter in method.parameters:
        if parameter.only_3d and dim == 2:
            continue
        value = params.get(parameter.name, parameter.default)
        resolved[parameter.name] = parameter.check(name, value) if parameter.name in params else value
    return resolved


def layout_spec(layer: int, head: int, name: str, dim: int, *, translate_keys: bool = True,
                scale_norms: bool = True, seed: int = 0, params: dict | None = None) -> ProjectionSpec:
    """The cache entry of one head's layout: the method's full parameters (checked), the seed, and the version of
    how a sampled layout places its other tokens where the method polishes (older entries are made again)."""
    method = projection_method(name)
    used = {**resolve_params(name, params, dim), "seed": seed}
    placement = method.polish_version if dim == 2 and used.get("sample", 0) > 0 else 0
    return ProjectionSpec.of(layer, head, name, dim, translate_keys, scale_norms, placement=placement, **used)


def two_d_spec(spec: ProjectionSpec) -> ProjectionSpec:
    """The 2D layout a 3D one of a method that ``refines_2d`` starts from (the same settings but the 3D ones)."""
    method = projection_method(spec.method)
    only_3d = {parameter.name for parameter in method.parameters if parameter.only_3d}
    params = {name: value for name, value in spec.params if name not in only_3d}
    seed = params.pop("seed")
    return layout_spec(spec.layer, spec.head, spec.method, 2, translate_keys=spec.translate_keys,
                       scale_norms=spec.scale_norms, seed=seed, params=params)


def project_points(points: np.ndarray, name: str, dim: int, seed: int = 0, *, neighbours=None, start_2d=None,
                   attention=None, **params) -> Projection:
    """Project ``points`` ``[n_points, d]`` with the method ``name`` into ``dim`` dimensions (its defaults
    overridden by ``params``). ``neighbours``, ``start_2d`` and ``attention`` are as in :class:`FitInputs`: a
    method that ``uses_attention`` needs ``attention``; the others compute what is not given."""
    method = projection_method(name)
    params = resolve_params(name, params, dim)
    points = np.ascontiguousarray(points, dtype=np.float32)
    if len(points) < 4:
        raise QkvizError(f"{len(points)} points are too few to project; extract more tokens")
    if method.uses_attention and (attention is None or attention.matrix.shape[0] != len(points)):
        raise ValueError(f"{name} needs the attention graph of these {len(points)} points")
    return method.fit(FitInputs(points, dim, seed, params, neighbours, start_2d, attention))


def warm_up(names) -> None:
    """Each named method's :attr:`~ProjectionMethod.warm_up` (a worker process's start); a method this process does
    not know is left to its task, which records why it failed."""
    _discover()
    for name in names:
        method = _CATALOGUE.get(name)
        if method is not None and method.warm_up is not None:
            method.warm_up()


@dataclass(frozen=True)
class CommandLineOption:
    """One ``qkviz project`` flag: a parameter name and the methods that take it (with their defaults)."""

    parameter: Parameter
    methods: dict[str, object] = field(default_factory=dict)   # {method: default}

    def help(self) -> str:
        names = ", ".join(self.methods)
        if len(set(map(_show, self.methods.values()))) == 1:
            return f"{self.parameter.help} ({names}; default {_show(next(iter(self.methods.values())))})"
        defaults = ", ".join(f"{_show(default)} for {name}" for name, default in self.methods.items())
        return f"{self.parameter.help} ({names}; default {defaults})"


def command_line_options() -> list[CommandLineOption]:
    """One option per parameter name over every method, in the order the catalogue declares them."""
    options: dict[str, CommandLineOption] = {}
    for method in projection_methods():
        for parameter in method.parameters:
            option = options.setdefault(parameter.name, CommandLineOption(parameter))
            option.methods[method.name] = parameter.default
    return list(options.values())


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value == math.inf else f"{value:g}" if isinstance(value, float) else str(value)
