"""The files of a run directory -- every name in one place -- and the low-level ways they are written.

A run directory holds what ``qkviz extract`` writes::

    manifest.json        written last; its presence means the run is complete
    tokens.parquet       one row per token (see qkviz.store.run.TOKEN_COLUMNS)
    sentences.parquet    one row per sentence
    queries.npy          [layer, head, token, d_head]      stored dtype (float16 or float32)
    keys.npy             [layer, kv_head, token, d_head]   stored dtype
    query_offsets.npy    [layer, head, offset_row, d_head]     float32
    key_offsets.npy      [layer, kv_head, offset_row, d_head]  float32
    value_norms.npy      [layer, kv_head, token]               float32
    query_bias.npy, key_bias.npy, rotary_cos.npy, rotary_sin.npy   optional: the model's query / key
                         biases and the rotary tables its layers apply (for the logit decomposition)
    head_updates.npy     [layer, head, token, 2] float32, optional (--head-update): each head's
                         update relative to the hidden state (norm ratio, cosine)
    output_norms.npy     [layer, head, token]                  float32, where the family allows (the manifest's
                         ``output_norms`` says why not): |W_O^h v_j|, each token's value after query head h's
                         slice of the attention's output projection (qkviz.extraction.streaming.output_norms)

A vector is ``stored + offsets[min(position, n_offset_rows - 1)]`` of its head. With float32
storage there is one offset row of zeros. With float16 the rows are the head's mean vector at
each position (up to 512) over the first batch: rotary models carry a large component common to
all tokens at a position (it turns with the position), and rounding it to float16 would cost
precision in every logit, so float16 rounds only what varies between tokens.

While extraction runs, the arrays are ``*.npy.partial`` and ``progress.json`` records how many
tokens are safely on disk, so an interrupted run resumes instead of being mistaken for a
complete one. Everything is plain ``.npy`` / Parquet / JSON; nothing is pickled.

and what later commands derive from it, each in its own directory finished by a marker file written
last (see :mod:`qkviz.store.artifacts`) or as entries with a JSON sidecar written last::

    projections/<key>.npy, <key>.json      qkviz project: one layout per entry (qkviz.store.projections)
    correlation.parquet                    qkviz report: every head's correlations, for the app
    stats/     atlas.json (marker), head_stats.parquet, relative_position.npy, exemplars.parquet,
               term_profiles.npy, update_histograms.npy, embedding_profiles.npy,
               labels.parquet, probes.parquet, offset_support.npy                  qkviz stats
    related/   related.json (marker), js_distance.npy, geometry_similarity.npy, order.npy, map_xy.npy,
               sentences.npy                                                        qkviz related
    indexes/   tokens.parquet; <side>-l<L>-h<H>.ivf.npz with <side>-l<L>-h<H>.json  qkviz index
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from pathlib import Path

import numpy as np

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
PROGRESS = "progress.json"
TOKENS = "tokens.parquet"
SENTENCES = "sentences.parquet"
QUERIES = "queries.npy"
KEYS = "keys.npy"
VALUE_NORMS = "value_norms.npy"
QUERY_OFFSETS = "query_offsets.npy"
KEY_OFFSETS = "key_offsets.npy"
#: Optional, for the logit decomposition (see qkviz.extraction.streaming.logit_parts_capture): present when the model has them.
QUERY_BIAS = "query_bias.npy"     # [layer, head, d_head] float32
KEY_BIAS = "key_bias.npy"         # [layer, kv_head, d_head] float32
ROTARY_COS = "rotary_cos.npy"     # [layer, position, rotary_dim] float32
ROTARY_SIN = "rotary_sin.npy"     # [layer, position, rotary_dim] float32
#: present (int8 [1]) where the model rotates queries and keys in a way qkviz does not invert: no rotary or bias split
POSITION_UNSPLIT = "position_unsplit.npy"
#: Optional, absolute-position models: what splits the first layer's q / k into token and position parts.
EMBED_TOKEN_IDS = "embed_token_ids.npy"        # [used token] int64, sorted
EMBED_TOKENS = "embed_tokens.npy"              # [used token, d_model] float32: their token embeddings
EMBED_POSITIONS = "embed_positions.npy"        # [position, d_model] float32: position embeddings as added
EMBED_NORM = "embed_norm.npy"                  # [4, d_model] float32: token-type row, norm weight, norm bias, eps
EMBED_QUERY_WEIGHT = "embed_query_weight.npy"  # [head, d_head, d_model] float32: first layer's query projection
EMBED_KEY_WEIGHT = "embed_key_weight.npy"      # [kv_head, d_head, d_model] float32
EMBED_FILES = (EMBED_TOKEN_IDS, EMBED_TOKENS, EMBED_POSITIONS, EMBED_NORM, EMBED_QUERY_WEIGHT, EMBED_KEY_WEIGHT)
LOGIT_PART_FILES = (QUERY_BIAS, KEY_BIAS, ROTARY_COS, ROTARY_SIN, POSITION_UNSPLIT, *EMBED_FILES)
#: Optional, with ``qkviz extract --head-update`` (see qkviz.extraction.streaming.head_update_capture), streamed like the vectors.
#: image runs: every token's patch thumbnail (zeros for special tokens), see qkviz.extraction.streaming.image_capture
PATCHES = "patches.npy"            # [token, t, t, 3] uint8
HEAD_UPDATES = "head_updates.npy"  # [layer, head, token, 2] float32: |update| / |hidden|, cos(update, hidden)
#: streamed like the vectors where the family allows (see qkviz.extraction.streaming.output_norms); absent from older runs
OUTPUT_NORMS = "output_norms.npy"  # [layer, head, token] float32: |W_O^h v_j|
STREAMED_FILES = (QUERIES, KEYS, VALUE_NORMS)
ARRAY_FILES = (*STREAMED_FILES, QUERY_OFFSETS, KEY_OFFSETS)
PARTIAL_SUFFIX = ".partial"
RUN_MARKERS = (MANIFEST, PROGRESS)

# -- derived results ----------------------------------------------------------------------------
CACHE_DIRECTORY = "projections"              # qkviz.store.projections
CORRELATION_TABLE = "correlation.parquet"    # qkviz.analysis.statistics.correlation
ATLAS_DIRECTORY = "stats"                    # qkviz.analysis.atlas.head_atlas
ATLAS_MARKER = "atlas.json"
ATLAS_TABLE = "head_stats.parquet"
ATLAS_PROFILES = "relative_position.npy"
ATLAS_EXEMPLARS = "exemplars.parquet"
ATLAS_TERM_PROFILES = "term_profiles.npy"
ATLAS_UPDATE_HISTOGRAMS = "update_histograms.npy"
ATLAS_EMBEDDING_PROFILES = "embedding_profiles.npy"
ATLAS_LABELS = "labels.parquet"              # every label each head earns (qkviz.analysis.labels.label_table)
ATLAS_PROBES = "probes.parquet"              # the repeated-token probe's scores (qkviz.probes.head_probes)
ATLAS_OFFSET_SUPPORT = "offset_support.npy"  # per head and offset: what a positional label rests on (head_stats)
RELATED_DIRECTORY = "related"                # qkviz.analysis.atlas.head_similarity
RELATED_MARKER = "related.json"
RELATED_JS_DISTANCE = "js_distance.npy"
RELATED_GEOMETRY = "geometry_similarity.npy"
RELATED_ORDER = "order.npy"
RELATED_MAP_XY = "map_xy.npy"
RELATED_SENTENCES = "sentences.npy"
INDEX_DIRECTORY = "indexes"                  # qkviz.search
CIRCUITS_DIRECTORY = "circuits"              # qkviz.explain.stored_circuits
CIRCUITS_MARKER = "circuits.json"
CIRCUITS_TABLE = "circuits.parquet"
TOKEN_INDEX_FILE = "tokens.parquet"


#: Every name qkviz writes directly in a run directory (files, and the directories of derived results);
#: ``--overwrite`` removes these and nothing else.
RUN_FILES = (MANIFEST, PROGRESS, TOKENS, SENTENCES, *ARRAY_FILES, HEAD_UPDATES, OUTPUT_NORMS, PATCHES, *LOGIT_PART_FILES,
             CORRELATION_TABLE)
RUN_DIRECTORIES = (CACHE_DIRECTORY, ATLAS_DIRECTORY, RELATED_DIRECTORY, INDEX_DIRECTORY, CIRCUITS_DIRECTORY)


def is_run_entry(name: str) -> bool:
    """Whether ``name``, an entry of a run directory, is one qkviz writes (a temporary file included)."""
    if name.startswith(".") and name.endswith(".tmp"):        # see temporary_name: .<name>.<pid>.<hex>.tmp
        parts = name[1:-len(".tmp")].rsplit(".", 2)
        name = parts[0] if len(parts) == 3 else name
    elif name.startswith(".") and name.endswith(".lock"):    # a result directory's writer lock: .<directory>.lock
        name = name[1:-len(".lock")]
    return name in RUN_FILES or name.removesuffix(PARTIAL_SUFFIX) in RUN_FILES or name in RUN_DIRECTORIES


def is_run_marker(path: Path) -> bool:
    """Whether ``path`` (a manifest or progress file) is a qkviz run's: JSON naming this schema and a fingerprint."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(content, dict) and content.get("schema_version") == SCHEMA_VERSION
            and isinstance(content.get("fingerprint"), str) and len(content["fingerprint"]) > 0)


#: The file written last of each derived result, whose change says the result was made again.
RESULT_MARKERS = {"atlas": f"{ATLAS_DIRECTORY}/{ATLAS_MARKER}", "related": f"{RELATED_DIRECTORY}/{RELATED_MARKER}",
                  "correlations": CORRELATION_TABLE, "circuits": f"{CIRCUITS_DIRECTORY}/{CIRCUITS_MARKER}"}


def partner_index_files(stem: str) -> tuple[str, str]:
    """The index file and its JSON sidecar (written last) of one partner index, e.g. ``keys-l3-h1``."""
    return f"{stem}.ivf.npz", f"{stem}.json"


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 4 MB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(4 << 20):
            digest.update(block)
    return digest.hexdigest()


#: ``(path, size, mtime_ns, expected sha256)`` of every file found intact in this process
_VERIFIED: set[tuple[str, int, int, str]] = set()


def matches_checksum(path: Path, expected: str) -> bool:
    """Whether ``path`` has the sha256 ``expected``; each file is hashed once per process (again only when
    its size or modification time changes)."""
    status = Path(path).stat()
    key = (str(Path(path).resolve()), status.st_size, status.st_mtime_ns, expected)
    if key in _VERIFIED:
        return True
    if file_sha256(path) != expected:
        return False
    _VERIFIED.add(key)
    return True


def sha256_of_intact(path: Path) -> str:
    """The sha256 of a file taken as intact now (what a manifest without checksums records): hashed, and
    remembered as verified in this process like a file :func:`matches_checksum` found intact."""
    digest = file_sha256(path)
    status = Path(path).stat()
    _VERIFIED.add((str(Path(path).resolve()), status.st_size, status.st_mtime_ns, digest))
    return digest


def temporary_name(path: Path) -> Path:
    """A temporary file beside ``path``, unique to this process and call (two writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write JSON to ``path`` through a temporary file, fsync and rename: ``path`` is the old file or the whole new
    one, never part of it (a write that fails removes its temporary file)."""
    temporary = temporary_name(path)
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    temporary = temporary_name(path)
    with open(temporary, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def write_parquet_atomic(frame, path: Path) -> None:
    temporary = temporary_name(path)
    frame.to_parquet(temporary, index=False)
    os.replace(temporary, path)


class NpyStreamWriter:
    """A ``.npy`` file of known shape, preallocated and filled block by block with ``pwrite``.

    The leading axes index blocks (``[layer, head]``); the axis after them is the token axis,
    which is filled in contiguous ranges. Writing through the file descriptor instead of a
    memory map keeps the written pages out of the process's resident memory.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype, token_axis: int, create: bool):
        self.path = Path(path)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.token_axis = token_axis
        if create:
            with open(self.path, "wb") as handle:
                np.lib.format.write_array_header_1_0(handle, {
                    "descr": np.lib.format.dtype_to_descr(self.dtype),
                    "fortran_order": False,
                    "shape": self.shape,
                })
                self.header_bytes = handle.tell()
                handle.truncate(self.header_bytes + int(np.prod(self.shape)) * self.dtype.itemsize)
        else:
            with open(self.path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape_on_disk, _, dtype_on_disk = read_header(handle)
                self.header_bytes = handle.tell()
            if tuple(shape_on_disk) != self.shape or np.dtype(dtype_on_disk) != self.dtype:
                raise ValueError(f"{self.path} has shape {shape_on_disk} {dtype_on_disk}, expected {self.shape} {self.dtype}")
        self._fd = os.open(self.path, os.O_WRONLY)

    def write_rows(self, lead_index: tuple[int, ...], token_start: int, rows: np.ndarray) -> None:
        """Write ``rows`` (``[token, ...]``) of block ``lead_index`` (e.g. ``(layer, head)``) at ``token_start``."""
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        lead_shape = self.shape[:self.token_axis]
        tokens_total = self.shape[self.token_axis]
        if token_start + len(rows) > tokens_total or rows.shape[1:] != self.shape[self.token_axis + 1:]:
            raise ValueError(f"rows {rows.shape} at {token_start} do not fit {self.path.name} {self.shape}")
        row_bytes = int(np.prod(self.shape[self.token_axis + 1:], dtype=np.int64)) * self.dtype.itemsize
        flat_lead = int(np.ravel_multi_index(lead_index, lead_shape))
        os.pwrite(self._fd, rows, self.header_bytes + (flat_lead * tokens_total + token_start) * row_bytes)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        """Flush to disk and close (idempotent)."""
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
