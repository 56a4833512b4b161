"""Losses over relevance logits, named after the data they take.

* ``bce`` - pointwise binary cross-entropy on 0/1 labels, optional ``pos_weight``.
* ``group-ce`` - cross-entropy over a group (1 positive + k negatives), positive first.
* ``soft-bce`` / ``mse`` - soft labels in [0, 1] (LLM labels, distillation): BCE, or MSE on the
  probability.
* ``crag-mse`` - MSE of the raw output against -1/+1, the official CRAG regression loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def compute_loss(name: str, logits: torch.Tensor, labels: torch.Tensor, group_size: int | None = None,
                 pos_weight: float | None = None) -> torch.Tensor:
    labels = labels.to(logits.dtype)
    if name == "group-ce":
        if group_size is None:
            raise ValueError("group-ce needs grouped batches")
        scores = logits.view(-1, int(group_size))
        target = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
        return F.cross_entropy(scores, target)
    if name in ("bce", "soft-bce"):
        pw = torch.tensor(pos_weight, device=logits.device, dtype=logits.dtype) if pos_weight else None
        return F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pw)
    if name == "mse":
        return F.mse_loss(torch.sigmoid(logits), labels)
    if name == "crag-mse":
        return F.mse_loss(logits, labels * 2.0 - 1.0)
    raise ValueError(f"unknown loss {name!r}")
