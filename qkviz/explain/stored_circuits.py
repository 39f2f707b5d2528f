"""Every head's circuit, computed once over one sample of the run and kept in ``<run>/circuits/`` (what
``qkviz stats --circuits`` adds), and the composition graph read from it.

The table has one row per head, side (``query``, ``key``, ``value``) and part (columns ``layer``, ``head``,
``side``, ``part``, ``contribution``, ``lift``, ``mean_logit``, ``mean_moved``: the query and key sides add up to
``mean_logit``, the value side to ``mean_moved``, and the value side's ``lift`` is NaN,
:mod:`qkviz.explain.head_circuit`); the marker records the sample (sequences, tokens, budget, seed), so the app and a
report say what the circuits were measured on. Circuits stored by an older qkviz (schema 1: no value side) are not
read: loading them logs one line that says to run ``qkviz stats --circuits`` again. :func:`composition_edges` turns
the table into the edges of the composition view: from each earlier head or MLP to the heads whose queries
(Q-composition), keys (K-composition) or values (V-composition) it builds, weighted by its contribution.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from qkviz.explain.head_circuit import (DEFAULT_BUDGET, DEFAULT_SEED, circuit_from_sums, circuit_sums, part_kind,
                                        sample_sequences)
from qkviz.probes.model_on_demand import run_model
from qkviz.store import files as run_files
from qkviz.store.artifacts import ArtifactDirectory
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: 2: the value side (``side == "value"`` rows and the ``mean_moved`` column)
CIRCUITS_SCHEMA_VERSION = 2
COLUMNS = ("layer", "head", "side", "part", "contribution", "lift", "mean_logit", "mean_moved")
SIDES = ("query", "key", "value")


def _directory(run: StoredRun) -> ArtifactDirectory:
    return ArtifactDirectory(run, run_files.CIRCUITS_DIRECTORY, run_files.CIRCUITS_MARKER, CIRCUITS_SCHEMA_VERSION,
                             "qkviz stats --circuits")


def compute_circuits(run: StoredRun, *, budget: int = DEFAULT_BUDGET, seed: int = DEFAULT_SEED, model=None,
                     device: str = "cpu", progress: bool = True) -> pd.DataFrame:
    """Every head's circuit over one sample of ``run`` (one model pass per chunk of each sampled sequence, every
    layer split from it), stored in ``<run>/circuits/``; returns the table."""
    model = run_model(run, model, device, "head circuits")
    sample = sample_sequences(run, budget, seed)
    heads = [(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)]
    sums = circuit_sums(run, model, heads, sample, progress)
    frames = []
    for (layer, head), value in sums.items():
        circuit = circuit_from_sums(layer, head, value, sample)
        frames.append(circuit.table.assign(layer=layer, head=head, mean_logit=circuit.mean_logit,
                                           mean_moved=circuit.mean_moved))
    table = pd.concat(frames, ignore_index=True)[list(COLUMNS)]
    directory = _directory(run).write(arrays={}, tables={run_files.CIRCUITS_TABLE: table},
                                      marker={"sample": sample.as_dict()})
    logger.info("%s: the circuits of %d heads over %d sequences (%d tokens)", directory, len(heads),
                len(sample.sentences), sample.n_tokens)
    return table


def load_circuits(run: StoredRun) -> pd.DataFrame | None:
    """The stored circuits (``attrs["sample"]``: what they were measured on), or ``None`` where there are none."""
    stored = _directory(run)
    marker = stored.read_marker()
    if marker is None:
        return None
    table = stored.table(run_files.CIRCUITS_TABLE)
    table.attrs["sample"] = marker.get("sample", {})
    return table


def composition_edges(circuits: pd.DataFrame, *, by: str = "contribution", minimum: float = 0.0,
                      kinds: tuple[str, ...] = ("head", "mlp"), sides: tuple[str, ...] = SIDES) -> pd.DataFrame:
    """The composition graph: one edge per (source part, target head, side) with columns ``source``,
    ``source_layer``, ``source_head`` (-1 for an MLP), ``target_layer``, ``target_head``, ``side`` (``query``:
    Q-composition, ``key``: K-composition, ``value``: V-composition) and ``weight`` (the circuit's ``by`` column),
    keeping the sources of ``kinds`` and the ``sides`` asked for whose ``|weight|`` is at least ``minimum``; largest
    first.

    The weights of the query and key sides are shares of a logit, those of the value side shares of the length of
    what the head moves (another unit: one ``minimum`` means another thing on each, so filter the value side apart,
    ``sides=("value",)``, to give it its own). The value side has no ``lift`` (NaN): ``by="lift"`` gives no
    V-edges."""
    if by not in ("contribution", "lift"):
        raise ValueError(f"by must be 'contribution' or 'lift', got {by!r}")
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        raise ValueError(f"sides must be among {', '.join(SIDES)}, got {', '.join(map(str, unknown))}")
    # the parts are a few hundred names repeated over every head: each is parsed once (a 1,024-head table has
    # ~1.6 million rows and ~1,100 names)
    codes, names = pd.factorize(circuits.part)
    names = np.asarray(names, dtype=object)
    kept_kind = np.array([part_kind(name) in kinds for name in names], dtype=bool)
    weights = circuits[by].to_numpy(dtype=np.float64)
    side_codes, side_names = pd.factorize(circuits.side)
    keep = (kept_kind[codes] & np.isin(np.asarray(side_names, dtype=object), list(sides))[side_codes]
            & (np.abs(weights) >= minimum))
    source = pd.Series(names).str.extract(r"^L(?P<layer>\d+)(?:H(?P<head>\d+)|\.mlp)$")
    source_layer = pd.to_numeric(source["layer"]).fillna(-1).astype(int).to_numpy()[codes[keep]]
    source_head = pd.to_numeric(source["head"]).fillna(-1).astype(int).to_numpy()[codes[keep]]
    edges = pd.DataFrame({
        "source": names[codes[keep]], "source_layer": source_layer, "source_head": source_head,
        "target_layer": circuits.layer.to_numpy()[keep], "target_head": circuits["head"].to_numpy()[keep],
        "side": np.asarray(side_names, dtype=object)[side_codes[keep]], "weight": weights[keep]})
    order = np.argsort(-np.abs(edges.weight.to_numpy()), kind="stable")
    return edges.iloc[order].reset_index(drop=True)
