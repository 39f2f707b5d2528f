"""The run as a user holds it, and extraction returning one: what ``qkviz.Run``, ``qkviz.open_run`` and
``qkviz.extract`` are.

:class:`Run` is the stored run (:class:`qkviz.store.StoredRun`: tables, vectors, attention, cached
layouts) with the results of the later steps one attribute away: the head atlas, related heads, the
stored correlations, corpus-wide partners and the status of the run.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

from qkviz.analysis import HeadAtlas, HeadSimilarity, load_atlas, load_head_similarity, stored_correlations
from qkviz.core import QkvizError
from qkviz.projection import has_layout, layout_counts, layout_failures, layout_file, layout_on_demand
from qkviz.report import COLOURS, describe_run
from qkviz.report.head_figure import head_figure
from qkviz.search import EXACT_LIMIT, PartnerIndexes, Partners
from qkviz.store import StoredRun


class Run(StoredRun):
    """A complete run: every head's queries and keys over a corpus, and what was computed from them.

    Shapes are ``[layer, head, token, d_head]``; vectors are memory-mapped and returned as float32.
    Open one with :func:`qkviz.open_run` or get it from :func:`qkviz.extract`.

    Examples
    --------
    >>> run = qkviz.open_run("runs/minilm")                       # doctest: +SKIP
    >>> run.queries(3, 4).shape, run.attention(3, 4, sentence=0)   # doctest: +SKIP
    >>> run.projection(3, 4); run.atlas.table                      # doctest: +SKIP
    >>> run.partners(3, 4, point=17, k=10).tokens                  # doctest: +SKIP
    """

    @property
    def atlas(self) -> HeadAtlas | None:
        """The head atlas that :func:`qkviz.compute_stats` stored, or ``None`` before it ran."""
        return load_atlas(self)

    @property
    def related(self) -> HeadSimilarity | None:
        """The head comparison that :func:`qkviz.relate_heads` stored, or ``None`` before it ran."""
        return load_head_similarity(self)

    @property
    def correlations(self) -> pd.DataFrame | None:
        """The correlation table that :func:`qkviz.correlation_report` stored, or ``None`` before it ran."""
        return stored_correlations(self)

    def projection(self, layer: int, head: int, method: str | None = None, dim: int = 2, *,
                   translate_keys: bool = True, scale_norms: bool = True, seed: int = 0, make: bool = True,
                   progress: bool = True, **params) -> np.ndarray:
        """``[2 * n_tokens, dim]`` float32 layout of the head's queries (first) and keys.

        Read from the run's cache, or, where it is not there yet, made now for this head (seconds, with a progress
        bar unless ``progress`` is False) and cached exactly as ``qkviz project`` caches it, so the app and later
        calls read it (:func:`qkviz.projection.layout_on_demand`). ``method`` None takes the most faithful layout the
        head has cached (in default settings), else the run's default layout method (``attn-tsne``); ``params``
        override the method's defaults (``qkviz project --help``). With ``make=False`` (what the app reads: it
        never computes inside a request), on a run opened read-only, for a layout too costly to make in one call
        or a run whose directory cannot be written, a layout not cached is a :class:`QkvizError` naming the
        command that makes it."""
        return layout_on_demand(self, layer, head, method, dim, translate_keys=translate_keys,
                                scale_norms=scale_norms, seed=seed, make=make, progress=progress, **params)[1]

    def has_projection(self, layer: int, head: int, method: str, dim: int = 2) -> bool:
        """Whether the head's ``method`` layout in default settings is cached (cheap; reading it checks it)."""
        return has_layout(self, layer, head, method, dim)

    def projection_counts(self) -> dict[tuple[str, int], int]:
        """``{(method, dim): number of heads}`` whose default-settings layout is cached, for every method and
        dimension of the catalogue (one listing of the cache, not a look per head)."""
        return layout_counts(self)

    def projection_file(self, layer: int, head: int, method: str, dim: int = 2) -> tuple[str, Path]:
        """The default-settings layout's cache key and ``.npy`` file (which may not exist yet)."""
        return layout_file(self, layer, head, method, dim)

    def projection_failures(self) -> dict[tuple[int, int, str, int], str]:
        """``{(layer, head, method, dim): error}`` of the default-settings layouts whose last attempt failed."""
        return layout_failures(self)

    def partners(self, layer: int, head: int, point: int, k: int = 10, *, exclude: np.ndarray | None = None,
                 exact_limit: int = EXACT_LIMIT) -> Partners:
        """The ``k`` strongest attention partners of one point anywhere in the corpus, by ``scale * q . k``.

        Parameters
        ----------
        layer, head
            The head.
        point
            A point of the head's joint layout: query ``t`` is ``t``, key ``t`` is ``n_tokens + t``.
            A query's partners are keys, a key's partners are queries.
        k
            How many partners.
        exclude
            Boolean ``[n_tokens]``: tokens never returned as partners (e.g. special tokens).
        exact_limit
            Exact search up to this many tokens; past it, the approximate index ``qkviz index`` built.
        """
        if exact_limit != EXACT_LIMIT:
            return PartnerIndexes(self, exact_limit=exact_limit).partners(layer, head, point, k, exclude)
        return self.partner_indexes.partners(layer, head, point, k, exclude)

    @cached_property
    def partner_indexes(self) -> PartnerIndexes:
        """The run's partner indexes, one set per opened run: an index read or built once serves every later
        search (what :meth:`partners` asks)."""
        return PartnerIndexes(self)

    def token_rows(self, sentence: int) -> pd.DataFrame:
        """One sentence's tokens with their indices in :attr:`tokens` -- the ``query`` and ``key`` that
        :meth:`explain` takes (``qkviz tokens`` prints this table).

        Columns ``token_index`` (the row of :attr:`tokens`, of ``queries`` / ``keys``), ``position`` (in the
        sentence, from 0), ``token`` and ``is_special``; ``attrs`` holds ``sentence`` and its ``text``. A sentence
        that is not one of the run's is a one-line :class:`QkvizError`."""
        if isinstance(sentence, (bool, np.bool_)) or not isinstance(sentence, (int, np.integer)):
            raise QkvizError(f"sentence must be a sentence number of the run (0..{self.n_sentences - 1}), "
                             f"got {sentence!r}")
        rows = self.sentence_tokens(int(sentence))
        frame = self.tokens.iloc[rows][["position", "token", "is_special"]].reset_index(drop=True)
        frame.insert(0, "token_index", np.arange(rows.start, rows.stop))
        frame.attrs.update(sentence=int(sentence), text=str(self.sentences.text.iat[int(sentence)]))
        return frame

    def explain(self, layer: int, head: int, query: int, key: int, by: str = "pair", *, model=None,
                device: str = "cpu") -> pd.DataFrame:
        """Why token ``query`` meets token ``key`` in head ``(layer, head)``: its pre-softmax logit split exactly by
        the parts of the residual stream that wrote the query and the key (embeddings, each earlier head and MLP,
        the biases; :mod:`qkviz.explain`).

        ``query`` and ``key`` are token indices (rows of :attr:`tokens`, of ``queries`` / ``keys``; a sentence's are
        :meth:`token_rows`), in one sequence or two; a pair the head's mask forbids (a key after the query in a
        causal model, outside its sliding window or chunk) is refused in one line. ``by="pair"`` gives columns
        ``query_part``, ``key_part``, ``contribution``; ``"query"`` and ``"key"`` one row per part of that side
        (``part``, ``contribution``); ``"dimension"`` the split over dimensions or rotary frequency bands. Rows add
        up to ``frame.attrs["logit"]``. The run's model is loaded on first use (once per process); a notebook run
        passes its model as ``model=``."""
        from qkviz.explain import explain_pair

        return explain_pair(self, layer, head, query, key, by, model=model, device=device)

    def direct_effects(self, query: int, target=None, *, model=None, device: str = "cpu",
                       tokenizer=None) -> pd.DataFrame:
        """What the model writes at token ``query``: the logit of ``target`` (the query's next token when None, a
        token id, or a string that is exactly one token of the vocabulary) split exactly by the parts of the final
        residual stream -- embeddings, each head ``L{l}H{h}``, each MLP, the biases -- each through the final norm
        with its divisor fixed and then the unembedding (:mod:`qkviz.explain.direct_effects`). Columns ``part`` and
        ``contribution``; the rows add up to ``frame.attrs["logit"]``, the model's own logit (before the cap where
        the model caps its final logits; ``attrs["capped_logit"]`` after it). An encoder, or a model without its
        language-model head, is refused in one line. The run's model is loaded with its head on first use."""
        from qkviz.explain import direct_effects

        return direct_effects(self, query, target, model=model, device=device, tokenizer=tokenizer)

    def head_output(self, layer: int, head: int, query: int, target=None, by: str = "source", *, model=None,
                    device: str = "cpu", tokenizer=None) -> pd.DataFrame:
        """What head ``(layer, head)`` writes at token ``query``: its row of :meth:`direct_effects` (on ``target``,
        the next token by default) split exactly, ``by="source"`` by the token each piece was read from (``source``,
        a row of :attr:`tokens`, its ``attention`` weight, its ``contribution``), ``by="part"`` by the parts of the
        residual stream that wrote the values it moves (V-composition; ``part``, ``contribution``). Both add up
        to ``frame.attrs["row"]`` (:mod:`qkviz.explain.head_writes`). Not :meth:`explain`'s ``by="key"``, which
        splits a key's logit by its own parts."""
        from qkviz.explain import head_output

        return head_output(self, layer, head, query, target, by, model=model, device=device, tokenizer=tokenizer)

    def head_writes(self, layer: int, head: int, query: int, top: int = 10, *, model=None, device: str = "cpu",
                    tokenizer=None) -> pd.DataFrame:
        """The ``top`` tokens head ``(layer, head)``'s output promotes most at token ``query``, and the ``top`` it
        suppresses most (its direct effect on each token's logit): ``direction``, ``token_id``, ``token``,
        ``effect``."""
        from qkviz.explain import head_writes

        return head_writes(self, layer, head, query, top, model=model, device=device, tokenizer=tokenizer)

    def ablate(self, layer: int, head: int, mode: str = "zero", *, model=None, device: str = "cpu",
               sentences=None, progress: bool = False) -> pd.DataFrame:
        """Whether head ``(layer, head)`` matters: the run's model over the run's own sequences, clean and with the
        head's output removed (its slice of the output projection's input set to zero, ``mode="zero"``, or to its
        mean over the sequences, ``"mean"``; :mod:`qkviz.probes.ablation`).

        One row per token (of ``sentences`` when given): ``token_index``, ``sentence``, ``position``, ``token``,
        ``loss``, ``ablated_loss`` and ``change`` (ablated minus clean next-token loss, nats; NaN where there is no
        next token). For an encoder (no language-model head) ``change`` is the relative change of the last hidden
        state and the losses are NaN; the ``measure`` column says which. ``attrs["mean_change"]``: the mean over
        the tokens. The run's model is loaded on first use (once per process); a notebook run passes it as
        ``model=``."""
        from qkviz.probes import ablate

        return ablate(self, layer, head, mode, model=model, device=device, sentences=sentences, progress=progress)

    @property
    def circuits(self) -> pd.DataFrame | None:
        """Every head's stored circuit (``qkviz stats --circuits``, :func:`qkviz.explain.compute_circuits`): one row
        per head, side and part; ``attrs["sample"]`` says what it was measured on. ``None`` until computed."""
        from qkviz.explain import load_circuits

        return load_circuits(self)

    def circuit(self, layer: int, head: int, *, budget: int = 5000, seed: int = 0, model=None, device: str = "cpu",
                progress: bool = False):
        """Head ``(layer, head)``'s circuit (:class:`qkviz.explain.HeadCircuit`): for every part of the residual
        stream entering its layer (embeddings, each earlier head and MLP, biases), its attention-weighted mean
        contribution to the logits of each query and its strongest partners, on the query side and the key side,
        and its ``lift`` over the other keys; over whole sequences in a seeded random order up to ``budget``
        tokens (``circuit.sample`` records which). ``circuit.summary`` says it in a line."""
        from qkviz.explain import head_circuit

        return head_circuit(self, layer, head, budget=budget, seed=seed, model=model, device=device,
                            progress=progress)

    def plot(self, layer: int, head: int, colour: str = "position", method: str | None = None, dim: int = 2, *,
             progress: bool = True, **options) -> "go.Figure":
        """One head's joint query+key layout as a Plotly figure: queries circles, keys diamonds, coloured by
        ``colour`` (one of :data:`qkviz.report.COLOURS`: ``"type"``, ``"position"``, ``"punctuation"``,
        ``"norm"``, ...), the token on hover.

        ``method`` None takes the most faithful layout the run has cached for the head (the catalogue's order,
        :func:`qkviz.projection.method_names`), else the run's default layout method; a layout not cached yet is made
        now, as :meth:`projection` makes it (``progress``: its progress bar). ``options``: ``marker_size``, ``width``,
        ``height``, ``title``. ``fig.write_image("head.svg")`` needs the ``kaleido`` package (see
        :mod:`qkviz.report.head_figure`).
        """
        if colour not in COLOURS:     # refused before a layout is made for a figure that cannot be drawn
            raise QkvizError(f"unknown colour {colour!r}; choose one of {', '.join(COLOURS)}")
        method, _ = layout_on_demand(self, layer, head, method, dim, progress=progress)
        return head_figure(self, layer, head, colour=colour, method=method, dim=dim, **options)

    def show(self, mode: str = "inline", port: int | None = None, height: int = 900, **options) -> None:
        """The whole app over this run, in the notebook (``mode="inline"``), as a link (``"external"``) or in a
        new browser tab (``"tab"``), served from this process on 127.0.0.1 (the app's ``notebook`` entry point, ``dash_app.notebook``:
        every head's PCA first, the attention t-SNE layouts in the background). Outside Jupyter the server
        runs in a background thread and :attr:`app_url` says where; inside JupyterHub it is served at the hub's
        proxied address. ``options``: ``width``, ``background`` (the method made in the background, or None),
        ``jobs``, ``progress``, ``allow_hosts`` (host names the app answers besides the loopback ones: the hub's). Needs the app's extra
        (``pip install 'qkviz[app]'``)."""
        show = app_entry_point("notebook", "run.show()")
        self._shown = show(self, mode=mode, port=port, height=height, **options)

    @property
    def app_url(self) -> str | None:
        """Where the app :meth:`show` started answers (``http://127.0.0.1:PORT/``), or ``None`` before."""
        shown = getattr(self, "_shown", None)
        return None if shown is None else shown.url

    @property
    def selection(self) -> pd.DataFrame | None:
        """The last lasso / box selection made in the single-head view of the app :meth:`show` showed (one
        row per selected point), or ``None`` before one is made."""
        shown = getattr(self, "_shown", None)
        return None if shown is None else shown.selection

    def status(self) -> str:
        """What the run holds: extraction, cached projections, indexes (what ``qkviz status`` prints)."""
        return "\n".join(describe_run(self))


#: the entry-point group under which an app registers what ``Run.show()`` calls (pyproject.toml: the web app's
#: ``notebook = "dash_app.notebook:show"``): the library finds the app without importing it
APP_ENTRY_POINTS = "qkviz.apps"


def app_entry_point(name: str, user: str = "the app"):
    """The app's function registered as ``name`` (its module imported now), or a one-line error naming the extra
    and what needs it (``user``)."""
    from importlib.metadata import entry_points

    found = entry_points(group=APP_ENTRY_POINTS, name=name)
    try:
        return next(iter(found)).load()
    except StopIteration:
        raise QkvizError(f"{user} needs the web app, which is not installed: pip install 'qkviz[app]'") from None
    except ImportError as error:
        raise QkvizError(f"{user} needs the app's optional dependencies ({error.name} is missing): "
                         "pip install 'qkviz[app]'") from None


def open_run(path: str | Path, *, read_only: bool = False) -> Run:
    """Open the complete run directory ``path`` (an interrupted or damaged one is a :class:`qkviz.QkvizError`).

    A run whose manifest lacks its files' checksums (made by an older qkviz) gets them now, with a logged warning.

    Parameters
    ----------
    path
        The run directory (``qkviz extract --out``).
    read_only
        Write nothing into the run: not by opening it (a run without checksums is then refused, in one line) nor by
        :meth:`Run.projection` / :meth:`Run.plot`, which then only read the layouts cached.
    """
    return Run(path, read_only=read_only)


def extract(model: str | Path | object, corpus: str | Path | Iterable, out: str | Path, *,
            tokenizer: object | None = None, processor: object | None = None, max_tokens: int | None = None,
            max_sentences: int | None = None, seed: int = 0, dtype: str = "float32", batch_size: int = 16,
            max_length: int | None = None, chunk: int | None = None, chunk_overlap: int | None = None,
            device: str | None = None, text_column: str = "text", overwrite: bool = False,
            head_update: bool = False, progress: bool = True) -> Run:
    """Extract every head's queries, keys and value norms over a corpus into the run directory ``out``.

    The same inputs reuse a finished run, an interrupted run with the same inputs resumes, and
    different inputs into an existing run are refused unless ``overwrite``.

    Parameters
    ----------
    model
        A bundled name (``"minilm"``, ``"smollm2"``, ``"gemma3"``; see ``qkviz models``), a local Hugging Face model
        directory, a hub id, or a transformers model object already in memory (a base model or one with a
        head; of a supported family). An object is borrowed: its training mode, attention implementation
        and device are as they were afterwards, its weights and dtype untouched.
    corpus
        A text file (one sentence per line), JSONL / CSV / Parquet (see ``text_column``), a Hugging Face
        dataset name[:split], or in memory: any iterable of strings (list, generator, pandas Series, a
        ``datasets`` column), or a DataFrame / ``datasets.Dataset`` with ``text_column``. The same
        sentences from a file or a list give the same run. For an image model, images: a folder, a list
        file, ``"imagefolder:DIR"``, ``"skimage-samples"``, or PIL images / ``H x W x 3`` uint8 arrays in
        memory (:func:`qkviz.extraction.load_images`); each image is one sequence of its special tokens
        and patches.
    out
        The run directory to write.
    tokenizer
        With a model object: its fast tokenizer (default: the one saved in the model's ``name_or_path``
        directory). The model's manifest records its class, ``name_or_path``, config and weights hashes.
    processor
        With an image model object: its image processor (default: the one saved in its ``name_or_path``
        directory); a named image model brings its own.
    max_tokens, max_sentences
        Stop before this many tokens (special tokens included) / take at most this many sentences.
    seed
        Seed of the sentence sampling.
    dtype
        Stored precision: ``"float32"`` or ``"float16"``.
    batch_size
        Sentences per forward pass.
    max_length
        Truncate sentences to this many tokens (at most the model's context). Without it or ``chunk``, a
        sentence (document) longer than the model's context is refused with its count.
    chunk, chunk_overlap
        Split each document longer than ``chunk`` tokens into windows of ``chunk`` tokens (the tokenizer's
        special tokens included) whose text overlaps the previous window's by ``chunk_overlap`` tokens
        (default ``chunk // 8``). Each window is one sequence of the run, positions from 0; ``run.sentences``
        gives its document (``corpus_index``) and where it starts in it (``token_offset``, ``char_offset``).
    device
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; default ``"cpu"`` for a named model, and where a model object is.
    text_column
        The column holding the text in tabular corpora.
    overwrite
        Replace a run made with other settings.
    head_update
        Also keep each head's update relative to the hidden state per token (for the head atlas).
    progress
        Show progress bars.

    Returns
    -------
    Run
        The finished run.

    Examples
    --------
    >>> model = AutoModel.from_pretrained(path); tok = AutoTokenizer.from_pretrained(path)   # doctest: +SKIP
    >>> run = qkviz.extract(model, ["The cat sat.", "It rained."], "runs/mine", tokenizer=tok)   # doctest: +SKIP
    """
    from qkviz.extraction import extract_run   # torch and transformers are imported here, not by 'import qkviz'

    result = extract_run(model, corpus, out, tokenizer=tokenizer, processor=processor, max_tokens=max_tokens,
                         max_sentences=max_sentences, seed=seed, dtype=dtype, batch_size=batch_size,
                         max_length=max_length, chunk=chunk, chunk_overlap=chunk_overlap, device=device,
                         text_column=text_column, overwrite=overwrite, head_update=head_update, progress=progress)
    return Run(result.run.path)
