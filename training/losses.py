"""Losses over logits, named after the data they take (the registry a config is checked against).

* ``bce`` - pointwise binary cross-entropy on 0/1 labels, optional ``pos_weight``.
* ``group-ce`` - cross-entropy over a group (1 positive + k negatives), positive first.
* ``soft-bce`` / ``mse`` - soft labels in [0, 1] (LLM labels, distillation): BCE, or MSE on the
  probability.
* ``crag-mse`` - MSE of the raw output against -1/+1, the official CRAG regression loss.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F


def _group_ce(logits, labels, group_size=None, pos_weight=None):
    if group_size is None:
        raise ValueError("group-ce needs grouped batches")
    scores = logits.view(-1, int(group_size))
    target = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
    return F.cross_entropy(scores, target)


def _bce(logits, labels, group_size=None, pos_weight=None):
    pw = torch.tensor(pos_weight, device=logits.device, dtype=logits.dtype) if pos_weight else None
    return F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pw)


def _mse(logits, labels, group_size=None, pos_weight=None):
    return F.mse_loss(torch.sigmoid(logits), labels)


def _crag_mse(logits, labels, group_size=None, pos_weight=None):
    return F.mse_loss(logits, labels * 2.0 - 1.0)


#: loss name -> fn(logits, labels, group_size=None, pos_weight=None)
LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "bce": _bce,
    "group-ce": _group_ce,
    "soft-bce": _bce,
    "mse": _mse,
    "crag-mse": _crag_mse,
}


def compute_loss(name: str, logits: torch.Tensor, labels: torch.Tensor, group_size: int | None = None,
                 pos_weight: float | None = None) -> torch.Tensor:
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}")
    return LOSSES[name](logits, labels.to(logits.dtype), group_size=group_size, pos_weight=pos_weight)
