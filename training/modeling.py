"""Model set-up that only training needs: attention dropout, the head modules, LoRA.

What a model *is* (spec, heads, backbone loading, logits) lives in :mod:`inference.modeling`,
shared with serving.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

#: config attributes that hold the attention-probability dropout, by model family
ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout")


def attention_dropout_kwargs(model_path: str, p: float | None) -> dict[str, float]:
    """``from_pretrained`` config overrides that set the attention dropout of ``model_path`` to
    ``p`` (nothing when ``p`` is None)."""
    if p is None:
        return {}
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    for key in ATTENTION_DROPOUT_KEYS:
        if hasattr(config, key):
            return {key: float(p)}
    raise ValueError(f"attention_dropout: {model_path} ({config.model_type}) has no separate attention dropout "
                     f"(none of {', '.join(ATTENTION_DROPOUT_KEYS)} in its config); leave attention_dropout unset")


def head_module_names(model) -> list[str]:
    """Names of the scoring-head modules that must stay trainable (and saved) under LoRA."""
    names = {n.split(".")[-1] for n, _ in model.named_modules()}
    return [n for n in ("classifier", "score", "classification_head", "pooler") if n in names]


def apply_lora(model, cfg, head: str):
    """Wrap ``model`` in LoRA adapters (peft); the scoring head stays fully trainable and saved."""
    from peft import LoraConfig, TaskType, get_peft_model

    task = {"seq2seq": TaskType.SEQ_2_SEQ_LM, "bi-encoder": TaskType.FEATURE_EXTRACTION}.get(head, TaskType.SEQ_CLS)
    heads = None if head == "bi-encoder" else head_module_names(model) or None  # mean pooling: no head module
    lcfg = LoraConfig(task_type=task, r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules, modules_to_save=heads)
    model = get_peft_model(model, lcfg)
    if int(os.environ.get("RANK", "0")) == 0:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        logger.info("LoRA: %d of %d parameters trainable (%.2f%%)", trainable, total, 100 * trainable / total)
    return model
