"""A model object already in memory (a notebook's), with its tokenizer or image processor, borrowed for an
extraction and given back as it was; :func:`model_for_extraction` gives the model to extract from, borrowed
or loaded by name.

``qkviz.extract(model, corpus, out, tokenizer=tok)`` takes a transformers model object of a supported family
(a base model or one with a head: its base model is what runs) and a fast tokenizer. The model is borrowed:
for the extraction it is put in eval mode, moved to ``device`` if one is asked for, and its attention calls
go through qkviz's capturing implementation (:func:`qkviz.extraction.capture.recorder.capturing`, which restores the
implementation it found); afterwards every module's training flag and the device are what they were. Its
weights and dtype are not changed: a float16 model is extracted in float16.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Iterator

from qkviz.core.errors import QkvizError
from qkviz.extraction.models.loading import (BUNDLED_MODELS, TOKENIZER_FILES, LoadedModel, check_modality, image_processor,
                                    load_model, model_directory)

logger = logging.getLogger(__name__)


def is_model_name(model) -> bool:
    """A bundled name, a directory or a hub id (loaded by qkviz), rather than a model object."""
    return isinstance(model, (str, os.PathLike))


@contextlib.contextmanager
def model_for_extraction(model, tokenizer=None, device: str | None = None, progress: bool = False, *,
                         processor=None, modality: str | None = None) -> Iterator[LoadedModel]:
    """The model to extract from: ``model`` loaded by name, or the in-memory ``model`` borrowed (see the module);
    ``modality`` (``"text"`` or ``"image"``) is what the corpus holds, refused in one line if the model reads
    the other."""
    if is_model_name(model):
        for name, given in (("tokenizer", tokenizer), ("processor", processor)):
            if given is not None:
                raise QkvizError(f"{name}= goes with a model object; a model name or directory brings its own "
                                 f"{name} (leave {name}= out)")
        yield load_model(str(model), device=device or "cpu", progress=progress, modality=modality)
        return
    with borrowed_model(model, tokenizer, device, progress, processor=processor, modality=modality) as loaded:
        yield loaded


@contextlib.contextmanager
def borrowed_model(model, tokenizer=None, device: str | None = None, progress: bool = False, *, processor=None,
                   modality: str | None = None) -> Iterator[LoadedModel]:
    """``model`` (a transformers ``PreTrainedModel``) in eval mode on ``device`` (default: where it is) for the
    extraction, with its training flags and device restored afterwards; the tokenizer checked against it (an
    image model: its image processor, ``processor=`` or the one saved in its ``name_or_path``)."""
    from qkviz.extraction.adapters import declared_adapter, vision_tower

    _check_model_object(model)
    try:
        adapter = declared_adapter(model.config)     # a refused family is refused before anything changes
    except QkvizError as error:
        raise QkvizError(f"model object {type(model).__name__}: {error}") from None
    check_modality(f"model object {type(model).__name__}", adapter, modality, model.config)
    base = vision_tower(getattr(model, "base_model", model))   # no head: its outputs are not needed
    if adapter is not None and adapter.modality == "image":
        if tokenizer is not None:
            raise QkvizError("tokenizer= goes with a text model; give an image model its image processor with processor=")
        processor = processor if processor is not None else _processor_of(model)
    else:
        if processor is not None:
            raise QkvizError("processor= goes with an image model; give a text model its tokenizer with tokenizer=")
        tokenizer = tokenizer if tokenizer is not None else _tokenizer_of(model)
        check_tokenizer(tokenizer)
    parameter = next(base.parameters(), None)
    if parameter is None:
        raise QkvizError(f"model object {type(model).__name__} has no parameters; give a loaded model")
    original = parameter.device
    target = _device(device, original)
    training = {module: module.training for module in model.modules()}
    name_or_path = str(getattr(model, "name_or_path", "") or "")
    try:
        if target != original:
            logger.info("moving %s to %s for the extraction (it goes back to %s after)", type(model).__name__,
                        target, original)
            model.to(target)
        model.eval()
        reader, kind = (tokenizer, "tokenizer") if processor is None else (processor, "processor")
        yield LoadedModel(model=base, tokenizer=tokenizer, processor=processor,
                          model_id=name_or_path or type(model).__name__, source=f"in-memory {type(model).__name__}",
                          origin={"in_memory": True, "class": type(model).__name__, "name_or_path": name_or_path,
                                  "dtype": str(parameter.dtype).removeprefix("torch."),
                                  kind: type(reader).__name__,
                                  f"{kind}_name_or_path": str(getattr(reader, "name_or_path", "") or "")})
    finally:
        if target != original:
            model.to(original)
        for module, flag in training.items():
            module.training = flag


def check_tokenizer(tokenizer) -> None:
    """A fast transformers tokenizer (whether its ids fit the model is :func:`check_token_ids`, on the sentences)."""
    from transformers import PreTrainedTokenizerBase

    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise QkvizError(f"tokenizer= is a {type(tokenizer).__name__}, not a transformers tokenizer; give the "
                         "model's tokenizer (AutoTokenizer.from_pretrained(...))")
    if not getattr(tokenizer, "is_fast", False):
        raise QkvizError(f"tokenizer {type(tokenizer).__name__} is a slow tokenizer; qkviz needs a fast one for "
                         "character offsets: AutoTokenizer.from_pretrained(..., use_fast=True)")


def check_token_ids(sentences, model) -> None:
    """Every token id of the tokenized ``sentences`` has a row in ``model``'s input embedding (a tokenizer of
    another model gives ids past it; a few unused added tokens past it are harmless)."""
    rows = getattr(model.get_input_embeddings(), "num_embeddings", None)
    largest = max((max(sentence.token_ids) for sentence in sentences if len(sentence.token_ids)), default=-1)
    if rows is not None and largest >= rows:
        raise QkvizError(f"the tokenizer does not match the model: it gives token id {largest} but the model's "
                         f"embedding has {rows} rows; give this model's own tokenizer")


def _check_model_object(model) -> None:
    try:
        from transformers import PreTrainedModel
    except ImportError:   # pragma: no cover -- transformers is a dependency
        PreTrainedModel = ()
    if not isinstance(model, PreTrainedModel):
        raise QkvizError(f"model is a {type(model).__name__}, not a transformers model: give a bundled name "
                         f"({', '.join(BUNDLED_MODELS)}), a model directory, a hub id, or a model object from "
                         "transformers (AutoModel.from_pretrained(...))")


def _tokenizer_of(model):
    """The tokenizer saved beside the model's weights (its ``name_or_path`` a local directory or a bundled
    name); anything else is a one-line error asking for ``tokenizer=``."""
    from transformers import AutoTokenizer

    name = str(getattr(model, "name_or_path", "") or "")
    directory = model_directory(name)[0] if name in BUNDLED_MODELS else Path(name).expanduser()
    if name and directory.is_dir() and any((directory / file).exists() for file in TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(directory)
    where = f"its name_or_path {name!r} is not a local directory with a tokenizer" if name else "it has no name_or_path"
    raise QkvizError(f"give the model's tokenizer: qkviz.extract(model, corpus, out, tokenizer=tok) ({where})")


def _processor_of(model):
    """The image processor saved beside the model's weights (its ``name_or_path`` a local directory); anything
    else is a one-line error asking for ``processor=``."""
    name = str(getattr(model, "name_or_path", "") or "")
    directory = Path(name).expanduser()
    if name and (directory / "preprocessor_config.json").exists():
        return image_processor(directory, name)
    where = f"its name_or_path {name!r} is not a local directory with one" if name else "it has no name_or_path"
    raise QkvizError("give the model's image processor: qkviz.extract(model, images, out, processor=proc) "
                     f"({where})")


def _device(requested: str | None, current):
    """The device to extract on: ``requested`` (``"cuda"`` meaning the current CUDA device), else ``current``."""
    import torch

    if requested is None:
        return current
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise QkvizError(f"device {requested} was asked for but no CUDA device is available; use device='cpu'")
    try:
        target = torch.device(requested)
    except RuntimeError:
        raise QkvizError(f"device {requested!r} is not a torch device (cpu, cuda, cuda:N, mps)") from None
    if target.type == current.type and target.index is None:
        return current
    if target.type == "cuda" and target.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return target
