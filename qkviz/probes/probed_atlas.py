"""The head atlas with its built-in probes: what ``qkviz.compute_stats`` and ``qkviz stats`` run.

The atlas itself is measured on the run's corpus from the stored vectors (:func:`qkviz.analysis.compute_corpus_stats`); the
induction and duplicate-token labels also need the repeated-random-tokens probe, which runs the run's own model
(:func:`qkviz.probes.head_probes.probe_heads`, loaded on demand as explanations load it). Where the model cannot be
had (a run of a model in memory without ``model=``, a model directory since moved), the atlas is made without the
probe, with a warning, and says why in ``atlas.probe_note``.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from qkviz.analysis import HeadAtlas, LabelThresholds
from qkviz.analysis import compute_corpus_stats
from qkviz.core.errors import QkvizError
from qkviz.analysis.atlas.head_atlas import estimated_atlas_seconds, store_atlas
from qkviz.probes.writing_probe import copying_probe
from qkviz.probes.head_probes import ProbeSettings, probe_heads
from qkviz.probes.label_ablation import ablate_labels
from qkviz.probes.model_on_demand import run_language_model
from qkviz.store.run import StoredRun, as_run

if TYPE_CHECKING:
    from qkviz.cluster import DaskClient

logger = logging.getLogger(__name__)


def compute_stats(run: StoredRun | str | Path, *, max_offset: int = 64, argmax_share: float = 0.5,
                  broad_entropy: float = 0.8, thresholds: LabelThresholds | None = None, exemplars: int = 5,
                  syntax: bool = False, progress: bool = True, jobs: int | None = None, client: "DaskClient | None" = None,
                  probes: bool = True, model: object | None = None, device: str = "cpu",
                  probe_settings: ProbeSettings = ProbeSettings(), ablate: bool = False) -> HeadAtlas:
    """Compute the head atlas of a run, with every label each head earns, and store it in ``<run>/stats/``.

    Every head's attention is recomputed over the whole corpus from the stored vectors; the repeated-random-tokens
    probe runs the run's model.

    Parameters
    ----------
    run
        A run, or the path of one.
    max_offset, argmax_share, broad_entropy, thresholds, exemplars, syntax, progress, jobs, client
        As :func:`qkviz.analysis.compute_corpus_stats`: the relative positions kept, the label thresholds
        (:class:`qkviz.analysis.LabelThresholds`), exemplars per head, the syntax statistics, progress bars, local
        worker processes (default: the cores this process may use, where the heads' work is worth starting them;
        ``1``: every head here) or a Dask client for the heads.
    probes
        Run the repeated-random-tokens probe on the run's model (``model`` if given, else the bundled model or model
        directory the run was extracted from) for the induction and duplicate-token labels. False (``--no-probes``)
        labels from the corpus alone.
    model
        The run's model object, for runs extracted from a model in memory (checked to be the run's own).
    device
        Where the probe runs the model.
    probe_settings
        The probe's sequences: how many, of how many tokens, the seed.
    ablate
        Check each induction and previous-token label causally: the head removed on the label's own probe, its mean
        change of next-token loss in the label table's ``ablation_change`` (:mod:`qkviz.probes.label_ablation`).

    Returns
    -------
    HeadAtlas
        The atlas, as :attr:`qkviz.Run.atlas` reads it back; ``atlas.labels`` holds every label with its evidence.
    """
    from qkviz.cluster import BackgroundCall, check_jobs, check_workers_see_run, resolve_jobs

    run = as_run(run)
    check_jobs(jobs, client)        # bad jobs, or a cluster that cannot do the work, is said before the probes run
    if client is not None:
        check_workers_see_run(client, run)
    if ablate and probes and not run.is_image_run and model is None:
        try:        # loaded first with its language-model head, the model serves the probe too: one copy
            run_language_model(run, None, device, "the probe and its ablations")
        except QkvizError:
            pass    # the probe says why below
    measure = partial(_probe_scores, run, probes, probe_settings, model, device, progress)
    jobs = resolve_jobs(jobs, client, estimated_atlas_seconds(run))
    asked = dict(max_offset=max_offset, argmax_share=argmax_share, broad_entropy=broad_entropy, thresholds=thresholds,
                 exemplars=exemplars, syntax=syntax, progress=progress, jobs=jobs, client=client)
    if probes and not run.is_image_run and (jobs > 1 or client is not None):
        # the model's probes run on this process's threads while the heads' statistics run on the workers
        atlas = compute_corpus_stats(run, pending_probes=BackgroundCall(measure, "qkviz-probes").result, **asked)
    else:
        scores, note, writes_note = measure()
        atlas = compute_corpus_stats(run, probes=scores, probe_note=note, writes_note=writes_note, **asked)
    if ablate and not run.is_image_run:
        atlas.labels = ablate_labels(run, atlas.labels, model=model, device=device, settings=probe_settings,
                                     progress=progress)
        store_atlas(run, atlas)
    return atlas


def _probe_scores(run: StoredRun, probes: bool, settings: ProbeSettings, model, device: str, progress: bool):
    """The probe table (the repeated-random-tokens probe's rows, then the copying probe's), what the probe ran on and
    what the copying probe ran on: ``(scores or None, probe note, writes note)``; a probe that cannot run is a note
    and a warning, not an error."""
    scores, note = None, "not run (probes=False, --no-probes)"
    if probes and run.is_image_run:
        note = "not run: the repeated-token probe is for text models"
    elif probes:
        try:
            scores = probe_heads(run, settings, model=model, device=device)
            note = str(scores.source.iloc[0])
        except QkvizError as error:
            note = f"not run: {error}"
            logger.warning("%s: the induction and duplicate-token probe did not run (%s); labelling from the corpus "
                           "alone", run.path, error)
    writes_note = "not run (probes=False, --no-probes)" if not probes else f"not run: the probe did not ({note})"
    if scores is not None:
        scores, writes_note = _with_copying(run, scores, settings, model, device, progress)
    return scores, note, writes_note


def _with_copying(run: StoredRun, scores, settings: ProbeSettings, model, device: str, progress: bool):
    """The probe table with the copying probe's rows (:mod:`qkviz.probes.writing_probe`), and what they were measured
    on; where the model has no unembedding, the table as it is and ``"not computed: ..."``."""
    import pandas as pd

    try:
        copying = copying_probe(run, settings, model=model, device=device, progress=progress)
    except QkvizError as error:
        logger.info("%s: the copying and suppression labels are not computed (%s)", run.path, error)
        return scores, "not computed: no unembedding" if "unembedding" in str(error) else f"not computed: {error}"
    return pd.concat([scores, copying], ignore_index=True), str(copying.source.iloc[0])
