"""Exports: ``save_pretrained`` weights and tokenizer, the task's manifest
(:class:`inference.manifest.Manifest`), a model card and plots, written into a temporary folder
and renamed into place only when complete.

The manifest is written last and the folder renamed after it, so a kill or a full disk during
export never leaves a directory that ``inference.load`` would take for a complete export.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
import subprocess
from pathlib import Path
from string import Template
from typing import Any, Callable

from inference.decisions import SentenceSelection, Threshold, Thresholds
from inference.manifest import Manifest, file_sha256

logger = logging.getLogger(__name__)

CARD_TEMPLATE = Path(__file__).with_name("model_card_template.md")
#: dev metrics shown in the model card, in this order (the ones present)
CARD_METRICS = ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10", "p@1",
                "r@3", "mrr")


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("crag-evaluators")
    except Exception:  # pragma: no cover - running from a source tree without install
        return "0+unknown"


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def decision_text(d: Thresholds | Threshold | SentenceSelection) -> tuple[str, str]:
    """(how the decision reads in the card, at which point the dev metrics are taken)."""
    if isinstance(d, Thresholds):
        return (f"**Correct** at score >= {d.theta_high:.4f}, **Ambiguous** at >= {d.theta_low:.4f}, else **Incorrect** "
                f"({d.method}; precision target {d.precision_target}, NPV target {d.npv_target}, {d.dev_pairs} dev pairs)",
                "decision at theta_high")
    if isinstance(d, Threshold):
        how = d.rule if d.rule == "f1" else f"{d.rule} target {d.target}"
        return (f"holds the answer at probability >= {d.threshold:.4f} ({d.method}, {how}, {d.dev_pairs} dev pairs)",
                "decision at the threshold")
    ms = "no minimum score" if d.min_score is None else f"scoring at least {d.min_score:.4f}"
    tgt = f", recall target {d.recall_target}" if d.recall_target is not None else ""
    return (f"the top {d.top_k} sentences of a passage, {ms} ({d.method}{tgt}, {d.dev_sentences} dev sentences)",
            "sentence pairs at min_score; p@1, r@3 and mrr per passage")


def model_card(m: Manifest) -> str:
    """The model card (``README.md`` of an export) from ``model_card_template.md``."""
    spec = m.task_spec
    dev = m.metrics.get("dev", {})
    rows = "\n".join(f"| {k} | {_fmt(dev[k])} |" for k in CARD_METRICS if dev.get(k) is not None)
    extra = ""
    by_source = m.metrics.get("dev_by_source") or {}
    if by_source:
        keys = [k for k in ("n", "positives", "auc", "precision", "recall", "f1", "mrr@10") if any(k in v for v in by_source.values())]
        lines = ["", "## Dev metrics by training source", "| source | " + " | ".join(keys) + " |",
                 "|---" * (len(keys) + 1) + "|"]
        lines += [f"| {name} | " + " | ".join(_fmt(v.get(k)) for k in keys) + " |" for name, v in by_source.items()]
        extra += "\n".join(lines) + "\n"
    if m.corpus_norm is not None:
        cn, cdev = m.corpus_norm, m.metrics.get("dev_corpus_mode") or {}
        cn_decision, _ = decision_text(cn.thresholds)
        extra += "\n".join([
            "", "## Corpus mode", "",
            "Given a reference corpus (`evaluator.use_corpus(passages)` or `use_corpus(vectors=...)` with its passage vectors; "
            "`python -m inference evaluate --reference self|FILE`; `python -m pipeline ask --corpus-mode`), the export scores "
            f"logit = model logit + {_fmt(cn.lexical_weight)} x lexical - {_fmt(cn.weight)} x r(q), where r(q) is the mean "
            f"of the query's {cn.k} largest cosines to the corpus, with its own calibration ({cn.calibration.method}, "
            f"a {_fmt(cn.calibration.a)}, b {_fmt(cn.calibration.b)}) and decision: {cn_decision}. Fitted on the dev pairs with the "
            f"{cn.info.get('reference_passages')} training and dev passages as the corpus.", "",
            "| metric (dev, corpus mode) | value |", "|---|---|",
            *(f"| {k} | {_fmt(cdev[k])} |" for k in CARD_METRICS if cdev.get(k) is not None)]) + "\n"
    held_out = m.metrics.get("held_out") or {}
    if held_out:
        sets = held_out.get("sets") or {}
        keys = list(dict.fromkeys(k for vals in sets.values() for k, v in vals.items()
                                  if isinstance(v, (int, float, str)) and not isinstance(v, bool)))
        lines = ["", "## Held-out figures", "", held_out.get("about", ""), "", "| set | " + " | ".join(keys) + " |",
                 "|---" * (len(keys) + 1) + "|"]
        lines += [f"| {name} | " + " | ".join(_fmt(vals.get(k, "")) for k in keys) + " |" for name, vals in sets.items()]
        extra += "\n".join(lines) + "\n"
    decision, point = decision_text(m.thresholds)
    cal = m.calibration_info
    data = m.training.get("data", {})
    sources = data.get("sources") or {}
    if sources:  # a train_mix: each source's training file
        data = {**data, "train_file": ", ".join(f"{n}: {v.get('train_file')}" for n, v in sources.items()),
                "dev_file": "each source's dev split"}
    if m.spec.head == "bi-encoder":
        template = (f"query and passage encoded separately, mean-pooled, unit length; logit = "
                    f"{m.spec.similarity_scale:g} x cosine")
        tags = ", ".join("bi-encoder" if t == "cross-encoder" else t for t in spec.tags if t != "reranker")
    else:
        template, tags = m.spec.input_template or "tokenizer pair encoding", ", ".join(spec.tags)
    if m.lexical:
        lex = m.lexical
        template += (f"; plus a lexical term: logit += {_fmt(lex.get('weight'))} x BM25(query, passage) / the query's "
                     f"largest BM25 (`{lex.get('file')}`: document frequencies of {lex.get('documents')} training "
                     f"passages, stemmed words)")
    fields = {
        "tags": tags, "title": spec.title[0].upper() + spec.title[1:], "head": m.spec.head,
        "architecture": m.model.architecture, "description": spec.card, "name": m.name or ".", "usage": spec.usage,
        "task": m.task, "backbone": m.model.backbone, "weights": m.model.weights,
        "template": template, "max_length": m.spec.max_length,
        "passage_format": m.spec.passage_format.replace("\n", "\\n"),
        "calibration": f"{m.calibration.method} (ECE on dev {_fmt(cal.get('ece_before'))} -> {_fmt(cal.get('ece_after'))})",
        "decision": decision, "decision_point": point, "metrics_rows": rows, "extra_sections": extra,
        "train_file": data.get("train_file"), "train_examples": data.get("train_examples"),
        "dev_file": data.get("dev_file"), "dev_pairs": data.get("dev_pairs"),
        "loss": m.training.get("config", {}).get("loss"), "steps": m.training.get("global_step"),
        "version": m.package.get("version"), "commit": m.package.get("git_commit"),
    }
    return Template(CARD_TEMPLATE.read_text(encoding="utf-8")).substitute(fields)


def record_held_out(export_dir: str | os.PathLike, held_out: dict[str, Any]) -> Path:
    """Write ``held_out`` (``{"about": str, "sets": {set: {figure: number or text}}, ...}``, a
    benchmark's figures on data the export did not train on) as ``metrics.held_out`` of the export's
    manifest and the ``Held-out figures`` of its model card. Each file is written whole, then renamed
    over the old one; the weights are not touched. Returns the manifest's path."""
    import tempfile

    from inference.loading import read_export

    ex = read_export(export_dir)
    m = ex.manifest
    m.metrics["held_out"] = held_out
    with tempfile.TemporaryDirectory(dir=ex.path) as tmp:
        m.write(tmp)
        (Path(tmp) / "README.md").write_text(model_card(m), encoding="utf-8")
        os.replace(Path(tmp) / m.file_name, ex.manifest_path)
        os.replace(Path(tmp) / "README.md", ex.path / "README.md")
    return ex.manifest_path


def save_model_weights(model, tokenizer, out: Path, merge_lora: bool = True) -> dict[str, Any]:
    """Write weights (safetensors) and tokenizer; LoRA merged by default, adapter-only on request."""
    info: dict[str, Any] = {}
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover
        PeftModel = ()  # type: ignore[assignment]
    if isinstance(model, PeftModel):
        if merge_lora:
            model = model.merge_and_unload()
            info["weights"] = "merged-lora"
        else:
            info["weights"] = "lora-adapter"
            info["base_model"] = model.peft_config["default"].base_model_name_or_path
    else:
        info["weights"] = "full"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    cfg = model.get_base_model().config if info["weights"] == "lora-adapter" else model.config
    info["architecture"] = (cfg.architectures or [type(model).__name__])[0]
    # checksums of the weight files: inference refuses a file that changed after export
    info["files_sha256"] = {f.name: file_sha256(f) for f in sorted(out.iterdir())
                            if f.is_file() and (f.suffix in (".safetensors", ".bin", ".pt") or f.name.endswith(".index.json"))}
    return info


def write_export(out_dir: str | os.PathLike, write_contents: Callable[[Path], dict[str, Any] | None],
                 manifest: Manifest) -> Path:
    """Create ``out_dir`` atomically: ``write_contents(tmp_dir)`` fills it and returns the weight
    information for ``manifest.model``; the model card and the manifest go last."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        for k, v in (write_contents(tmp) or {}).items():
            setattr(manifest.model, k, v)
        if manifest.name is None:
            manifest.name = out.name
        manifest.created_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        (tmp / "README.md").write_text(model_card(manifest), encoding="utf-8")
        manifest.write(tmp)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
