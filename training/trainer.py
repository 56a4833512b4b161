"""The trainer of every task: a thin :class:`transformers.Trainer` subclass.

transformers/accelerate do the heavy lifting (mixed precision, accumulation, checkpoints and
resume, distributed sampling, trackers, best-checkpoint selection); this module adds only what is
ours: relevance logits for every head, our losses, a head learning rate, seeded length-grouped
batches, and dev metrics from :mod:`inference.metrics`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler

from inference.metrics import evaluate_scores

from inference.modeling import DEFAULT_SIMILARITY_SCALE, relevance_logits

from .losses import compute_loss
from .modeling import head_module_names

logger = logging.getLogger(__name__)


class LaunchError(RuntimeError):
    """The processes that were started do not match what the launcher asked for."""


def check_launch(state=None) -> None:
    """Refuse inconsistent launches instead of silently training unsynced copies.

    ``torchrun``/``accelerate launch`` export ``WORLD_SIZE``; if the processes did not join one
    process group (``accelerate launch --multi_gpu`` on a machine without GPUs and without
    ``ACCELERATE_USE_CPU=true``), accelerate sees a world of 1 in each of them.
    """
    from accelerate import PartialState

    state = state or PartialState()
    expected = int(os.environ.get("WORLD_SIZE", "1"))
    requested = os.environ.get("ACCELERATE_NUM_PROCESSES")
    if state.num_processes != expected or (requested and int(requested) != state.num_processes):
        want = expected if expected != 1 else requested
        raise LaunchError(
            f"inconsistent launch: the launcher asked for {want} processes but this process sees a world of "
            f"{state.num_processes} (distributed type {state.distributed_type}); each process would train its own "
            "unsynced copy. On CPU run `ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N "
            "training/train_evaluator.py` (or use configs/accelerate/cpu-ddp.yaml); on GPUs check that every "
            "process can see a device."
        )


class SeededLengthGroupedSampler(LengthGroupedSampler):
    """Length-grouped order that depends only on (seed, epoch), so a resumed run sees the same batches."""

    def __init__(self, batch_size: int, lengths: list[int], seed: int):
        super().__init__(batch_size, lengths=lengths)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        self.generator = g
        return super().__iter__()


class PairTrainer(Trainer):
    """Logits for every head, our losses, a head learning rate, seeded length-grouped batches."""

    def __init__(self, *args: Any, head: str, loss_name: str, label_ids=None, pos_weight=None,
                 head_learning_rate: float | None = None, group_by_length: bool = True,
                 similarity_scale: float = DEFAULT_SIMILARITY_SCALE, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.similarity_scale = similarity_scale
        self.head = head
        self.loss_name = loss_name
        self.label_ids = label_ids
        self.pos_weight = pos_weight
        self.head_learning_rate = head_learning_rate
        self.group_by_length = group_by_length

    # --- data order -----------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset=None):
        ds = train_dataset if train_dataset is not None else self.train_dataset
        if self.group_by_length and hasattr(ds, "lengths"):
            bs = self.args.train_batch_size * self.args.gradient_accumulation_steps
            return SeededLengthGroupedSampler(bs, ds.lengths, self.args.seed)
        return super()._get_train_sampler(train_dataset)

    # --- optimiser: the new head may learn faster than the pretrained body -------------------
    def create_optimizer(self, model=None):
        if self.optimizer is None and self.head_learning_rate:
            opt_model = self.model if model is None else model
            heads = tuple(head_module_names(opt_model))
            decay = set(self.get_decay_parameter_names(opt_model))
            groups: dict[tuple[bool, bool], list] = {}
            for n, p in opt_model.named_parameters():
                if not p.requires_grad:
                    continue
                is_head = any(f".{h}." in f".{n}" for h in heads if h != "pooler")
                groups.setdefault((is_head, n in decay), []).append(p)
            params = [
                {"params": ps, "weight_decay": self.args.weight_decay if d else 0.0,
                 **({"lr": self.head_learning_rate} if h else {})}
                for (h, d), ps in groups.items()
            ]
            cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, opt_model)
            self.optimizer = cls(params, **kwargs)
            return self.optimizer
        return super().create_optimizer(model)

    # --- loss and predictions ------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        group_size = inputs.pop("group_size", None)
        z = relevance_logits(model, inputs, self.head, self.label_ids, self.similarity_scale)
        name = self.loss_name
        if group_size is None and name == "group-ce":
            name = "bce"  # dev pairs are pointwise
        loss = compute_loss(name, z, labels, group_size=group_size, pos_weight=self.pos_weight)
        return (loss, {"logits": z}) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        labels = inputs.get("labels")
        with torch.no_grad(), self.compute_loss_context_manager():
            loss, out = self.compute_loss(model, dict(inputs), return_outputs=True)
        return loss.detach(), out["logits"].detach(), labels


def make_compute_metrics(query_ids: list[str]):
    """Dev metrics from raw probabilities (before calibration) at the paper's 0.5 midpoint; the
    ranking metrics group pairs by ``query_ids`` (for the extractor: a query's sentences of one
    passage)."""

    def compute(eval_pred) -> dict[str, float]:
        logits = np.asarray(eval_pred.predictions, dtype=np.float64).reshape(-1)
        labels = np.asarray(eval_pred.label_ids, dtype=np.float64).reshape(-1)
        probs = 1.0 / (1.0 + np.exp(-logits))
        m = evaluate_scores(probs, labels, theta_high=0.5, query_ids=query_ids[: len(probs)])
        keep = ("accuracy", "precision", "recall", "f1", "auc", "ece", "score_std", "mrr@10", "ndcg@10", "p@1")
        return {k: float(m[k]) for k in keep if m.get(k) is not None}

    return compute


def setup_tracking(report_to: str) -> list[str]:
    """wandb must never prompt or hang: with no API key it runs offline."""
    if report_to == "wandb":
        if not os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") not in ("offline", "disabled"):
            logger.warning("wandb: no WANDB_API_KEY, logging offline (sync later with `wandb sync`)")
            os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_INIT_TIMEOUT", "30")
    return [] if report_to == "none" else [report_to]


def training_arguments(cfg, has_dev: bool = True) -> TrainingArguments:
    eval_steps = cfg.eval_steps if cfg.eval_steps > 0 else None
    use_cpu = not torch.cuda.is_available()
    metric = cfg.metric_for_best_model
    return TrainingArguments(
        output_dir=cfg.output_dir,
        run_name=cfg.run_name,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_ratio,
        lr_scheduler_type=cfg.lr_scheduler_type,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps if cfg.max_steps != 0 else -1,  # 0: no training (training.core)
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_grad_norm=cfg.max_grad_norm,
        bf16=cfg.bf16,
        activation_checkpointing=cfg.gradient_checkpointing,  # transformers 5 name of gradient_checkpointing
        seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        eval_strategy="steps" if (has_dev and eval_steps) else "no",
        eval_steps=eval_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        load_best_model_at_end=bool(has_dev and eval_steps),
        metric_for_best_model=f"eval_{metric}",
        greater_is_better=metric != "loss",
        report_to=setup_tracking(cfg.report_to),
        remove_unused_columns=False,
        dataloader_num_workers=cfg.dataloader_num_workers,
        use_cpu=use_cpu,
        ddp_find_unused_parameters=False,
        disable_tqdm=False,
    )
