"""Load an export through its manifest, and refuse what this version does not understand.

:func:`load` reads the manifest of an export folder (:mod:`inference.manifest`; its file is named
after the task: ``evaluator.json``, ``answer_classifier.json`` or ``extractor.json``), checks its
schema version and task, checks the weights *before* anything is deserialised, and hands the folder
to the loader its task registered (:mod:`inference.tasks`):

* a folder without a manifest (not an export, or one whose export was interrupted: exports are
  renamed into place only after the manifest is written) is refused;
* an unknown ``schema_version`` or ``task`` is refused, naming the versions and tasks known here;
  ``load(path, task="extractor")`` refuses an export of another task;
* missing weights, safetensors that do not parse (truncated, not safetensors), weights whose sha256
  differs from the manifest's, and weights that do not cover the model (a lost scoring head) are
  refused;
* pickle weights (``*.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``) can run arbitrary code when loaded and
  are refused unless ``trust_pickle=True``.

Nothing here imports the training code or a training-only package (accelerate, peft, datasets,
wandb, ...): serving installs without them. A LoRA adapter-only export needs ``peft`` to merge its
adapter; the message says so when it is missing.

Device: ``device=None`` picks CUDA, then Apple MPS, then the CPU. Precision: ``dtype=None`` /
``"fp32"`` runs in float32; ``"bf16"`` runs the forward pass under bfloat16 autocast where the
device supports it (weights stay float32; fp16 is refused - T5 overflows in fp16).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .manifest import ExportError, Manifest, file_sha256
from .modeling import label_token_ids, load_backbone, resolve_model_path
from .tasks import TASKS, load_all_tasks, task_spec

logger = logging.getLogger(__name__)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
DTYPES = ("fp32", "bf16")


@dataclass
class Export:
    """An export folder and its parsed, checked manifest."""

    path: Path
    manifest_path: Path
    manifest: Manifest

    @property
    def task(self) -> str:
        return self.manifest.task


@dataclass
class LoadOptions:
    """What the caller asked for, resolved: device, autocast dtype, pickle trust, batching."""

    device: torch.device
    autocast_dtype: torch.dtype | None
    trust_pickle: bool = False
    batch_tokens: int | None = None
    base_model: str | None = None
    cpu_fast_path: bool = False
    first_token_layer: bool = True
    unpadded: bool | None = None
    quantize: str | None = None


# --------------------------------------------------------------------------------------------
# manifest


def manifest_names() -> list[str]:
    return sorted(t.manifest for t in TASKS.values())


def read_export(path: str | os.PathLike) -> Export:
    """The export at ``path`` (a folder, or its manifest file) with its manifest checked."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ExportError(f"model folder not found: {p}")
    names = manifest_names()
    if p.is_file():
        if p.name not in names:
            raise ExportError(f"{p}: expected an export folder (or its manifest), got a file")
        p = p.parent
    found = [p / n for n in names if (p / n).is_file()]
    if not found:
        hint = ""
        if p.name.startswith(".") and ".partial-" in p.name:
            hint = " This is the temporary folder of an export that did not finish."
        elif any(p.glob("*.safetensors")) or (p / "config.json").exists():
            hint = " It holds weights but no manifest: an interrupted export, or a plain transformers checkpoint."
        raise ExportError(
            f"{p}: no manifest ({' or '.join(names)}); not an export of this package.{hint} "
            "Exports are written by training/train_evaluator.py, train_answer_classifier.py and train_extractor.py "
            "(export_dir)."
        )
    if len(found) > 1:
        raise ExportError(f"{p}: several manifests ({', '.join(f.name for f in found)}); one export per folder")
    return Export(p, found[0], Manifest.read(found[0]))


# --------------------------------------------------------------------------------------------
# device and precision


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"``: CUDA, then MPS, then CPU. A named device must be available."""
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise ValueError(f"device {device!r} requested but MPS is not available")
    return dev


def bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "mps":
        try:
            torch.ones(1, dtype=torch.bfloat16, device=device)
            return True
        except (RuntimeError, TypeError):
            return False
    return device.type == "cpu"  # supported everywhere; fast only with AVX512-BF16/AMX


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``dtype`` on ``device`` (``None``: plain float32)."""
    if dtype in (None, "fp32", "float32", torch.float32):
        return None
    if dtype in ("bf16", "bfloat16", torch.bfloat16):
        if not bf16_supported(device):
            logger.warning("bf16 requested but %s does not support it: running in fp32", device)
            return None
        return torch.bfloat16
    if dtype in ("fp16", "float16", torch.float16):
        raise ValueError("fp16 is not supported (T5 overflows to NaN in fp16); use dtype='bf16' or fp32")
    raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")


# --------------------------------------------------------------------------------------------
# weights


def _check_safetensors(files: list[Path]) -> None:
    from safetensors import safe_open

    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                st.keys()
        except Exception as e:  # safetensors raises its own error types
            raise ExportError(f"{f}: corrupt or truncated safetensors file ({e}); re-export the model") from None


def _pickle_files(folder: Path, stem: str) -> list[Path]:
    """``pytorch_model.bin``, ``model.pt``, ``adapter_model.bin``, shards of them, ..."""
    return sorted(f for f in folder.iterdir() if f.is_file() and stem in f.name and f.suffix in PICKLE_SUFFIXES)


def weight_files(folder: Path, stem: str, trust_pickle: bool) -> tuple[list[Path], bool]:
    """The weight files of ``folder`` named ``<stem>.safetensors`` (or sharded with an index),
    checked to parse; ``(files, is_pickle)``. Pickle-only folders need ``trust_pickle``."""
    single = folder / f"{stem}.safetensors"
    index = folder / f"{stem}.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as e:
            raise ExportError(f"{index}: not a valid safetensors index ({e})") from None
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise ExportError(f"{folder}: missing weight shards {', '.join(missing)} listed in {index.name}")
        files = [folder / s for s in shards]
    else:
        pickles = _pickle_files(folder, stem)
        if pickles:
            if not trust_pickle:
                raise ExportError(
                    f"{folder}: the weights are pickle files ({', '.join(p.name for p in pickles)}), which can run "
                    "arbitrary code when loaded; pass trust_pickle=True (CLI: --trust-pickle) only for a model you "
                    "trust, or re-save it as safetensors"
                )
            logger.warning("loading pickle weights %s (trust_pickle=True)", ", ".join(p.name for p in pickles))
            return pickles, True
        raise ExportError(f"{folder}: missing weights (expected {single.name}); the export is incomplete")
    _check_safetensors(files)
    return files, False


def verify_checksums(export: Export, files: list[Path]) -> None:
    """Each weight file must hash to the ``model.files_sha256`` the export recorded (exports made
    before checksums were recorded have none, and are loaded unchecked)."""
    recorded = export.manifest.model.files_sha256
    if not recorded:
        return
    for f in files:
        want = recorded.get(f.name)
        if want is None:
            raise ExportError(f"{f}: not among the weight files the manifest lists ({', '.join(sorted(recorded))})")
        if file_sha256(f) != want:
            raise ExportError(f"{f}: sha256 differs from the one recorded in {export.manifest_path.name}: the file "
                              "was changed or damaged after export; re-export the model or restore the file")


def _missing_keys_error(where: Path, missing: list[str], what: str) -> ExportError:
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return ExportError(f"{where}: the weights lack {len(missing)} tensors the {what} needs ({shown}); "
                       "the export is incomplete or belongs to another architecture")


def load_full_model(export: Export, options: LoadOptions):
    """``from_pretrained`` of a full (or merged-LoRA) export; every tensor must come from the file."""
    head = export.manifest.model.head
    files, is_pickle = weight_files(export.path, "model", options.trust_pickle)
    verify_checksums(export, files)
    try:
        model, info = load_backbone(str(export.path), head, dtype=torch.float32, use_safetensors=not is_pickle,
                                    output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise ExportError(f"{export.path}: cannot load the weights ({e})") from None
    problems = list(info.get("missing_keys") or [])
    if problems:
        raise _missing_keys_error(export.path, sorted(problems), "model")
    mism = info.get("mismatched_keys") or []
    if mism:
        raise ExportError(f"{export.path}: weight shapes do not match the config for {len(mism)} tensors "
                          f"(e.g. {list(mism)[0]}); the export is corrupt")
    return model


def _base_model_path(export: Export, options: LoadOptions) -> str:
    tried = []
    for cand in (options.base_model, export.manifest.model.base_model, export.manifest.model.backbone):
        if not cand:
            continue
        tried.append(cand)
        try:
            path = resolve_model_path(cand)
        except FileNotFoundError:
            continue
        if Path(path).exists():
            return path
    raise ExportError(f"{export.path}: a LoRA adapter export needs its base model, which was not found "
                      f"(tried {', '.join(map(repr, tried)) or 'nothing'}); pass base_model=PATH")


def load_adapter_model(export: Export, options: LoadOptions):
    """Base model + the export's LoRA adapter (whose ``modules_to_save`` must hold the scoring head),
    merged for inference. Needs ``peft``."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ExportError(f"{export.path}: a lora-adapter export needs the peft package to merge its adapter "
                          "(pip install peft, or crag-evaluators[train]); or export with merge_lora: true") from None
    head = export.manifest.model.head
    files, is_pickle = weight_files(export.path, "adapter_model", options.trust_pickle)
    verify_checksums(export, files)
    cfg_file = export.path / "adapter_config.json"
    if not cfg_file.is_file():
        raise ExportError(f"{export.path}: missing adapter_config.json (a lora-adapter export needs it)")
    try:
        adapter_cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ExportError(f"{cfg_file}: not valid JSON ({e})") from None
    base_path = _base_model_path(export, options)
    try:
        base, info = load_backbone(base_path, head, dtype=torch.float32, output_loading_info=True,
                                   use_safetensors=None if options.trust_pickle else True)
    except (OSError, ValueError, RuntimeError) as e:
        raise ExportError(f"{export.path}: cannot load the base model {base_path} ({e})") from None
    saved = set(adapter_cfg.get("modules_to_save") or [])
    uncovered = [k for k in info.get("missing_keys") or [] if not any(part in saved for part in k.split("."))]
    if uncovered:
        raise _missing_keys_error(export.path, sorted(uncovered), "model (base weights + adapter modules_to_save)")
    try:
        model = PeftModel.from_pretrained(base, str(export.path), is_trainable=False)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ExportError(f"{export.path}: cannot load the LoRA adapter ({e})") from None
    if is_pickle:
        logger.warning("adapter loaded from pickle weights (trust_pickle=True)")
    return model.merge_and_unload()


def load_tokenizer(export: Export):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(export.path))
    except (OSError, ValueError) as e:
        raise ExportError(f"{export.path}: cannot load the tokenizer ({e})") from None
    if not getattr(tok, "is_fast", False):
        logger.warning("%s: no fast tokenizer; tokenising will be slower", export.path)
    if tok.pad_token_id is None:
        raise ExportError(f"{export.path}: the tokenizer has no pad token")
    return tok


def build_engine(export: Export, options: LoadOptions):
    """The weights, tokenizer and :class:`~inference.engine.ScoringEngine` of an export (every task
    scores pairs the same way)."""
    from .engine import new_engine

    m = export.manifest
    if m.model.weights in ("full", "merged-lora"):
        model = load_full_model(export, options)
    else:
        model = load_adapter_model(export, options)
    if options.quantize is not None:
        model = quantize_model(model, options.quantize, options.device)
    tokenizer = load_tokenizer(export)
    label_ids = None
    if m.spec.head == "seq2seq":
        try:
            label_ids = label_token_ids(tokenizer, m.spec.label_tokens)
        except ValueError as e:
            raise ExportError(f"{export.path}: {e}") from None
    exact = options.quantize is None  # the exact shortcuts are checked against the model; int8 is not exact
    return new_engine(model, tokenizer, m.spec, options.device, label_ids, options.autocast_dtype,
                      options.batch_tokens, cpu_fast_path=options.cpu_fast_path and exact,
                      first_token_layer=options.first_token_layer and exact,
                      unpadded=options.unpadded if exact else False)


QUANTIZE = ("int8",)


def check_quantize(how: str, device: torch.device) -> None:
    if how not in QUANTIZE:
        raise ValueError(f"unknown quantize {how!r}; use one of {', '.join(QUANTIZE)} or None")
    if device.type != "cpu":
        raise ValueError(f"quantize={how!r} is a CPU mode (device is {device}); use dtype='bf16' on accelerators")


def quantize_model(model, how: str, device: torch.device):
    """Dynamic int8 quantization of every ``nn.Linear`` (weights int8, activations quantized per
    batch; CPU only), about 2x faster. Not exact: on the trained quickstart models the ranking
    metrics moved by about a point, but single calibrated scores by up to 0.4-0.6, so the export's
    thresholds do not hold for it (docs/benchmarks.md, "The opt-in int8 mode"): use it to rank, or
    re-fit the calibration on int8 scores."""
    check_quantize(how, device)
    import warnings

    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation notice of quantized tensors
        return quantize_dynamic(model.eval(), {torch.nn.Linear}, dtype=torch.qint8)


# --------------------------------------------------------------------------------------------
# entry point


def load(
    path: str | os.PathLike,
    task: str | None = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    trust_pickle: bool = False,
    batch_tokens: int | None = None,
    base_model: str | None = None,
    cpu_fast_path: bool = False,
    first_token_layer: bool = True,
    unpadded: bool | None = None,
    quantize: str | None = None,
):
    """Load the export at ``path`` as the object for its task: an
    :class:`~inference.evaluator.Evaluator`, :class:`~inference.answer.AnswerClassifier` or
    :class:`~inference.extractor.Extractor`.

    ``task``: ``None`` (whatever the export is) or the task the caller needs; an export of another
    task is refused. ``device``: ``None`` (CUDA, MPS, CPU in that order) or a torch device string.
    ``dtype``: ``None`` or ``"fp32"``, or ``"bf16"`` (autocast where supported). ``trust_pickle``:
    allow ``.bin``/``.pt`` weights. ``batch_tokens``: padded-token budget per forward pass (default
    per device). ``base_model``: base weights for a LoRA-adapter export, when the path in its
    manifest is gone. ``cpu_fast_path``: opt-in; on the CPU in fp32, run linear layers through
    oneDNN with pre-packed weights (checked against the plain model on a probe batch at load;
    measure it on your machine first, see :class:`~inference.engine.ScoringEngine`).
    ``first_token_layer``: for BERT-style cross-encoders, compute the last layer for the first
    position only, the one the classification head reads (checked the same way).
    ``unpadded``: for BERT cross-encoders, run each batch's sequences packed without padding
    (``None``: on the CPU; checked the same way; see :class:`~inference.kernels.UnpaddedBert`).
    ``quantize``: ``"int8"`` for dynamic int8 linear layers on the CPU (opt-in, about 2x faster, not
    exact: single calibrated scores move by up to 0.4-0.6, so not with the export's thresholds; see
    :func:`quantize_model`; the exact shortcuts are off with it).
    """
    if task is not None:
        task_spec(task)
    export = read_export(path)
    if task is not None and export.task != task:
        raise ExportError(f"{export.path}: this is a{'n' if export.task[0] in 'aeiou' else ''} {export.task} export "
                          f"({export.manifest_path.name}), not a{'n' if task[0] in 'aeiou' else ''} {task} export")
    dev = resolve_device(device)
    options = LoadOptions(dev, resolve_dtype(dtype, dev), trust_pickle, batch_tokens, base_model, cpu_fast_path,
                          first_token_layer, unpadded, quantize)
    if quantize is not None:
        check_quantize(quantize, dev)
    load_all_tasks()
    spec = TASKS[export.task]
    logger.info("loading %s export %s on %s%s", spec.name, export.path, dev,
                " (bf16 autocast)" if options.autocast_dtype is not None else "")
    return spec.loader(export, options)
