"""Exports: ``save_pretrained`` weights and tokenizer, the ``evaluator.json`` manifest, a model card
and plots, written into a temporary folder and renamed into place only when complete.

The manifest is written last and the folder renamed after it, so a kill or a full disk during
export never leaves a directory that ``inference.load`` would take for a complete export.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MANIFEST = "evaluator.json"
SCHEMA_VERSION = 1


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


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def model_card(manifest: dict[str, Any]) -> str:
    m, t, d = manifest["model"], manifest["thresholds"], manifest["metrics"].get("dev", {})
    rows = "\n".join(f"| {k} | {_fmt(d[k])} |" for k in ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10") if k in d)
    data = manifest["training"]["data"]
    return f"""---
library_name: transformers
tags: [crag, retrieval-evaluator, cross-encoder, reranker]
---
# CRAG retrieval evaluator ({m['head']}, {m['architecture']})

Scores a (query, passage) pair with a calibrated probability in [0, 1] that the passage is
relevant, and routes it to **Correct** (score >= {t['theta_high']:.4f}), **Ambiguous**
(>= {t['theta_low']:.4f}) or **Incorrect** as in Corrective RAG.

```python
import inference
model = inference.load("{manifest.get('name', '.')}")
model.grade("who got the first nobel prize in physics", ["The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen ..."])
```

## Model
- backbone: `{m['backbone']}`; head: `{m['head']}`; weights: {m['weights']}
- input: `{manifest['input']['template'] or 'tokenizer pair encoding'}`, max length {manifest['input']['max_length']} tokens (the passage is truncated, never the query)
- calibration: {manifest['calibration']['method']} (ECE on dev {_fmt(manifest['calibration'].get('ece_before'))} -> {_fmt(manifest['calibration'].get('ece_after'))})
- thresholds: theta_high {t['theta_high']:.4f}, theta_low {t['theta_low']:.4f} ({t['method']}; precision target {t['precision_target']}, NPV target {t['npv_target']}, {t['dev_pairs']} dev pairs)

## Dev metrics (calibrated scores, decision at theta_high)
| metric | value |
|---|---|
{rows}

## Training data
- train: `{data.get('train_file')}` ({data.get('train_examples')} examples), dev: `{data.get('dev_file')}` ({data.get('dev_pairs')} pairs)
- loss: {manifest['training']['config']['loss']}, steps: {manifest['training'].get('global_step')}

Plots: `plots/reliability.png`, `plots/score_histogram.png`, `plots/thresholds.png`.
Produced by crag-evaluators {manifest['package']['version']} (commit {manifest['package'].get('git_commit')}).
"""


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


def write_export(out_dir: str | os.PathLike, write_contents, manifest: dict[str, Any]) -> Path:
    """Create ``out_dir`` atomically: ``write_contents(tmp_dir)`` fills it, the manifest goes last."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        extra = write_contents(tmp) or {}
        manifest.update(extra)
        manifest.setdefault("name", out.name)
        manifest["created_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        (tmp / "README.md").write_text(model_card(manifest), encoding="utf-8")
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
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
