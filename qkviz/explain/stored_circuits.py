"""Every head's circuit, computed once over one sample of the run and kept in ``<run>/circuits/`` (what
``qkviz stats --circuits`` adds), and the composition graph read from it.

The table has one row per head, side and part (columns ``layer``, ``head``, ``side``, ``part``, ``contribution``,
``lift``, ``mean_logit``); the marker records the sample (sequences, tokens, budget, seed), so the app and a report
say what the circuits were measured on. :func:`composition_edges` turns it into the edges of the composition view:
from each earlier head or MLP to the heads whose queries (Q-composition) or keys (K-composition) it builds, weighted
by its contribution.
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

CIRCUITS_SCHEMA_VERSION = 1
COLUMNS = ("layer", "head", "side", "part", "contribution", "lift", "mean_logit")


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
        frames.append(circuit.table.assign(layer=layer, head=head, mean_logit=circuit.mean_logit))
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
                      kinds: tuple[str, ...] = ("head", "mlp")) -> pd.DataFrame:
    """The composition graph: one edge per (source part, target head, side) with columns ``source``,
    ``source_layer``, ``source_head`` (-1 for an MLP), ``target_layer``, ``target_head``, ``side`` (``query``:
    Q-composition, ``key``: K-composition) and ``weight`` (the circuit's ``by`` column), keeping the sources of
    ``kinds`` whose ``|weight|`` is at least ``minimum``; largest first."""
    if by not in ("contribution", "lift"):
        raise ValueError(f"by must be 'contribution' or 'lift', got {by!r}")
    kind = circuits.part.map(part_kind)
    rows = circuits[kind.isin(kinds) & (circuits[by].abs() >= minimum)]
    source = rows.part.str.extract(r"^L(?P<layer>\d+)(?:H(?P<head>\d+)|\.mlp)$")
    edges = pd.DataFrame({
        "source": rows.part.to_numpy(),
        "source_layer": source["layer"].astype(int).to_numpy(),
        "source_head": pd.to_numeric(source["head"]).fillna(-1).astype(int).to_numpy(),
        "target_layer": rows.layer.to_numpy(), "target_head": rows["head"].to_numpy(),
        "side": rows.side.to_numpy(), "weight": rows[by].to_numpy(dtype=np.float64)})
    order = np.argsort(-edges.weight.abs().to_numpy(), kind="stable")
    return edges.iloc[order].reset_index(drop=True)
