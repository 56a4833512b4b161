"""The manifest of an export: one typed definition, written by training and read by serving.

An export folder holds ``save_pretrained`` weights and tokenizer, a model card, plots, and one
manifest JSON named after its task (``evaluator.json``, ``answer_classifier.json``,
``extractor.json``; see :mod:`inference.tasks`). Its layout (schema version 1)::

    schema_version, task, name, created_at
    package      {name, version, git_commit}
    model        {backbone, head, weights: full | merged-lora | lora-adapter, architecture,
                  base_model (adapter exports), files_sha256: {file: sha256}}
    input        {template, label_tokens, max_length, max_query_length, passage_format,
                  sentence_max_chars (extractor)}
    score        "sigmoid(a * logit + b)", or with a lexical feature
                 "sigmoid(a * (logit + lexical.weight * lexical) + b)"
    lexical      (optional) {file: lexical.json, sha256, weight, k1, b, documents, avgdl, tokenizer}:
                 the BM25 term added to the model's logit (inference.lexical)
    corpus_norm  (optional, bi-encoder) {k, weight, lexical_weight, calibration, thresholds, fit}: how
                 the export scores against a reference corpus (inference.corpus_norm)
    calibration  {method, a, b, ...how it was fitted}
    thresholds   the task's decision (inference.decisions): Thresholds | Threshold | SentenceSelection
    metrics      {dev: {...}, ...}
    training     {config, data provenance, steps, ...}

:meth:`Manifest.read` checks every field it needs by type and names the file and the field in its
:class:`ExportError`; :meth:`Manifest.write` writes the JSON and fsyncs it. Exports written by
earlier versions of this package (evaluator manifests without a passage format or checksums) load
with the defaults they were trained with.
"""

from __future__ import annotations

import hashlib
import json
import os
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .calibration import Calibration
from .corpus_norm import CorpusNorm
from .modeling import DEFAULT_PASSAGE_FORMAT, DEFAULT_SIMILARITY_SCALE, ModelSpec
from .tasks import TASKS, TaskSpec

SCHEMA_VERSION = 1
WEIGHTS = ("full", "merged-lora", "lora-adapter")
SCORE_FORMULA = "sigmoid(a * logit + b)"
LEXICAL_SCORE_FORMULA = "sigmoid(a * (logit + lexical.weight * lexical) + b)"


class ExportError(ValueError):
    """An export this version cannot (or will not) load; the message names the path and the fix."""


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class ModelInfo:
    backbone: str
    head: str
    weights: str = "full"
    architecture: str | None = None
    base_model: str | None = None
    files_sha256: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.weights not in WEIGHTS:
            raise ValueError(f"unknown model.weights {self.weights!r} ({', '.join(WEIGHTS)})")


@dataclass
class Manifest:
    """Everything :func:`inference.load` needs to serve an export, plus its provenance."""

    task: str
    model: ModelInfo
    spec: ModelSpec
    calibration: Calibration
    thresholds: Any  # the task's decision class (inference.decisions)
    calibration_info: dict[str, Any] = field(default_factory=dict)  # how the calibration was fitted
    metrics: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    package: dict[str, Any] = field(default_factory=dict)
    sentence_max_chars: int | None = None  # extractor: the splitter's cut for over-long sentences
    lexical: dict[str, Any] | None = None  # the lexical feature's section (inference.lexical)
    corpus_norm: CorpusNorm | None = None  # scoring against a reference corpus (inference.corpus_norm)
    name: str | None = None
    created_at: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def task_spec(self) -> TaskSpec:
        return TASKS[self.task]

    @property
    def file_name(self) -> str:
        return TASKS[self.task].manifest

    # -- writing --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        inp: dict[str, Any] = {"template": s.input_template, "label_tokens": list(s.label_tokens),
                               "max_length": s.max_length, "max_query_length": s.max_query_length,
                               "passage_format": s.passage_format}
        if s.head == "bi-encoder":
            inp["similarity_scale"] = s.similarity_scale
        if self.sentence_max_chars is not None:
            inp["sentence_max_chars"] = self.sentence_max_chars
        model = {k: v for k, v in asdict(self.model).items() if v is not None}
        return {
            "schema_version": self.schema_version,
            "task": self.task,
            "name": self.name,
            "created_at": self.created_at,
            "package": self.package,
            "model": model,
            "input": inp,
            "score": LEXICAL_SCORE_FORMULA if self.lexical else SCORE_FORMULA,
            **({"lexical": self.lexical} if self.lexical else {}),
            **({"corpus_norm": self.corpus_norm.to_dict()} if self.corpus_norm else {}),
            "calibration": {**self.calibration_info, **self.calibration.to_dict()},
            "thresholds": self.thresholds.to_dict(),
            "metrics": self.metrics,
            "training": self.training,
        }

    def write(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/<task manifest>`` and fsync it (the last file of an export)."""
        path = Path(folder) / self.file_name
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        return path

    # -- reading --------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Any, where: str | os.PathLike = "manifest") -> "Manifest":
        if not isinstance(d, dict):
            raise ExportError(f"{where}: the manifest must be a JSON object, got {type(d).__name__}")
        task = d.get("task")
        if task not in TASKS:
            raise ExportError(f"{where}: unknown task {task!r}; this version of inference loads: {', '.join(TASKS)}")
        spec_t = TASKS[task]
        version = d.get("schema_version")
        if isinstance(version, bool) or version not in spec_t.schema_versions:
            known = ", ".join(map(str, spec_t.schema_versions))
            raise ExportError(f"{where}: schema_version {version!r} is not supported for task {task!r} (this version "
                              f"reads {known}); upgrade crag-evaluators or re-export the model")
        model_d = _section(d, "model", where)
        inp = _section(d, "input", where)
        model = _typed(ModelInfo, model_d, f"{where}: model")
        try:
            spec = ModelSpec(
                head=model.head,
                max_length=_get(inp, "max_length", int, where, "input"),
                max_query_length=_get(inp, "max_query_length", int, where, "input"),
                input_template=_get(inp, "template", (str, type(None)), where, "input", None),
                label_tokens=tuple(_get(inp, "label_tokens", list, where, "input", ["true", "false"])),
                passage_format=_get(inp, "passage_format", str, where, "input", DEFAULT_PASSAGE_FORMAT),
                similarity_scale=_get(inp, "similarity_scale", (int, float), where, "input", DEFAULT_SIMILARITY_SCALE),
            )
        except ValueError as e:
            raise ExportError(f"{where}: {e}") from None
        cal_d = _section(d, "calibration", where)
        try:
            calibration = Calibration(method=_get(cal_d, "method", str, where, "calibration"),
                                      a=_get(cal_d, "a", (int, float), where, "calibration"),
                                      b=_get(cal_d, "b", (int, float), where, "calibration"))
        except ValueError as e:
            raise ExportError(f"{where}: bad calibration ({e})") from None
        thresholds = _typed(spec_t.decision, _section(d, "thresholds", where), f"{where}: thresholds")
        max_chars = _get(inp, "sentence_max_chars", (int, type(None)), where, "input", None)
        return cls(
            task=task, model=model, spec=spec, calibration=calibration, thresholds=thresholds,
            calibration_info={k: v for k, v in cal_d.items() if k not in ("method", "a", "b", "temperature")},
            metrics=_get(d, "metrics", dict, where, "", {}), training=_get(d, "training", dict, where, "", {}),
            package=_get(d, "package", dict, where, "", {}), sentence_max_chars=max_chars,
            lexical=_lexical(d, where),
            corpus_norm=_corpus_norm(d, where, spec_t, model.head),
            name=_get(d, "name", (str, type(None)), where, "", None),
            created_at=_get(d, "created_at", (str, type(None)), where, "", None), schema_version=version,
        )

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Manifest":
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ExportError(f"{p}: the manifest is not valid JSON ({e})") from None
        except OSError as e:
            raise ExportError(f"{p}: cannot read the manifest ({e})") from None
        m = cls.from_dict(data, p)
        if p.name != m.file_name:
            raise ExportError(f"{p}: task {m.task!r} exports keep their manifest in {m.file_name}, not {p.name}")
        return m


def _lexical(d: dict, where) -> dict[str, Any] | None:
    lex = _get(d, "lexical", (dict, type(None)), where, "", None)
    if lex is not None:
        _get(lex, "weight", (int, float), where, "lexical")
        _get(lex, "file", str, where, "lexical")
    return lex


def _corpus_norm(d: dict, where, spec_t: TaskSpec, head: str) -> CorpusNorm | None:
    cn = _get(d, "corpus_norm", (dict, type(None)), where, "", None)
    if cn is None:
        return None
    if head != "bi-encoder":
        raise ExportError(f"{where}: 'corpus_norm' needs the bi-encoder head (query vectors), not {head!r}")
    cal = _section(cn, "calibration", f"{where}: corpus_norm")
    try:
        calibration = Calibration(method=_get(cal, "method", str, where, "corpus_norm.calibration"),
                                  a=_get(cal, "a", (int, float), where, "corpus_norm.calibration"),
                                  b=_get(cal, "b", (int, float), where, "corpus_norm.calibration"))
        return CorpusNorm(k=_get(cn, "k", int, where, "corpus_norm"), weight=_get(cn, "weight", (int, float), where, "corpus_norm"),
                          lexical_weight=_get(cn, "lexical_weight", (int, float), where, "corpus_norm", 0.0),
                          calibration=calibration,
                          thresholds=_typed(spec_t.decision, _section(cn, "thresholds", f"{where}: corpus_norm"),
                                            f"{where}: corpus_norm.thresholds"),
                          info=_get(cn, "fit", dict, where, "corpus_norm", {}))
    except ExportError:
        raise
    except ValueError as e:
        raise ExportError(f"{where}: bad corpus_norm ({e})") from None


# --------------------------------------------------------------------------------------------
# typed field access


def _section(d: dict, key: str, where) -> dict:
    if key not in d:
        raise ExportError(f"{where}: missing '{key}' (the manifest is incomplete)")
    if not isinstance(d[key], dict):
        raise ExportError(f"{where}: '{key}' must be an object, got {type(d[key]).__name__}")
    return d[key]


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        return False
    return isinstance(value, kinds)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def _get(d: dict, key: str, kind, where, section: str, default: Any = MISSING) -> Any:
    dotted = f"{section}.{key}" if section else key
    if key not in d:
        if default is not MISSING:
            return default
        raise ExportError(f"{where}: missing '{dotted}' (the manifest is incomplete)")
    v = d[key]
    if not _is(v, kind):
        raise ExportError(f"{where}: '{dotted}' must be {_kind_name(kind)}, got {type(v).__name__}")
    return v


def _runtime_kinds(hint: Any) -> tuple[type, ...]:
    """``float | None`` -> ``(float, int, NoneType)``; ``list[str]`` -> ``(list,)``; ..."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(k for a in typing.get_args(hint) for k in _runtime_kinds(a))
    if hint is type(None):
        return (type(None),)
    if hint is float:
        return (float, int)
    if hint is Any:
        return (object,)
    base = origin or hint
    return (list,) if base is tuple else (base,)


def _typed(cls: type, d: dict, where: str):
    """``cls(**d)`` for a dataclass, every known field type-checked (unknown keys are ignored)."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if f.name not in d:
            if f.default is MISSING and f.default_factory is MISSING:  # type: ignore[misc]
                raise ExportError(f"{where}: missing '{f.name}' (the manifest is incomplete)")
            continue
        kinds = _runtime_kinds(hints[f.name])
        if not _is(d[f.name], kinds):
            raise ExportError(f"{where}: '{f.name}' must be {_kind_name(kinds)}, got {type(d[f.name]).__name__}")
        kwargs[f.name] = d[f.name]
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ExportError(f"{where}: {e}") from None
