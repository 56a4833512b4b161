"""Training and dev data for every task: read the built JSONL once, tokenise once, pad per batch.

* Pointwise losses read :class:`~data_prep.records.LabelledPair` JSONL.
* ``group-ce`` reads :class:`~data_prep.records.QueryExample` groups (1 positive + k negatives).
Each example carries a ``length`` so batches can be grouped by length (less padding).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from data_prep.io import read_records, require_path
from data_prep.records import LabelledPair, QueryExample

from inference.inputs import EncodeStats, PairEncoder, pad_batch, passage_text

logger = logging.getLogger(__name__)


class DataProblem(ValueError):
    """Training or dev data that cannot train or evaluate a model (the message says why)."""


def resolve_data_files(cfg) -> tuple[str, str]:
    """train/dev files from the config: explicit files, or the task's folder of a built dataset
    (``evaluator/``, ``answer/`` or ``extractor/``)."""
    if cfg.train_file:
        train = cfg.train_file
        dev = cfg.dev_file
    else:
        base = Path(cfg.dataset_dir) / cfg.task.build_dir
        kind = "groups" if cfg.loss == "group-ce" else "pairs"
        train = str(base / f"train.{kind}.jsonl")
        dev = cfg.dev_file or str(base / "dev.pairs.jsonl")
    if not dev:
        raise DataProblem("no dev file: set dev_file (needed for evaluation, calibration and thresholds)")
    require_path(train, "training file")
    require_path(dev, "dev file")
    return train, dev


def load_pairs(path: str, limit: int | None = None, seed: int = 0, whole_queries: bool = False) -> list[LabelledPair]:
    pairs = list(read_records(path, LabelledPair))
    if not pairs:
        raise DataProblem(f"{path}: no pairs")
    if limit is not None and len(pairs) > limit:
        rng = random.Random(seed)
        if whole_queries:
            qids = sorted({p.query_id for p in pairs})
            rng.shuffle(qids)
            keep, n = set(), 0
            counts: dict[str, int] = {}
            for p in pairs:
                counts[p.query_id] = counts.get(p.query_id, 0) + 1
            for q in qids:
                if n >= limit:
                    break
                keep.add(q)
                n += counts[q]
            pairs = [p for p in pairs if p.query_id in keep]
        else:
            rng.shuffle(pairs)
            pairs = pairs[:limit]
    return pairs


def load_groups(path: str, group_size: int, limit: int | None = None, seed: int = 0) -> list[QueryExample]:
    groups = []
    for g in read_records(path, QueryExample):
        if len(g.positives) != 1 or len(g.negatives) < group_size - 1:
            raise DataProblem(
                f"{path}: group {g.id!r} has {len(g.positives)} positives and {len(g.negatives)} negatives; "
                f"group-ce with group_size={group_size} needs exactly 1 positive and {group_size - 1} negatives"
            )
        g.negatives = g.negatives[: group_size - 1]
        groups.append(g)
    if not groups:
        raise DataProblem(f"{path}: no groups")
    if limit is not None and len(groups) > limit:
        random.Random(seed).shuffle(groups)
        groups = groups[:limit]
    return groups


def check_labels(labels: Sequence[float], what: str, path: str) -> tuple[int, int]:
    pos = sum(1 for y in labels if y >= 0.5)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        cls = "negative" if pos == 0 else "positive"
        raise DataProblem(f"{path}: {what} has only {cls} pairs ({len(labels)} pairs); a relevance model needs both")
    return pos, neg


class EncodedPairs(torch.utils.data.Dataset):
    """Pre-tokenised pointwise pairs: ``input_ids`` (+ ``token_type_ids``), ``labels``, ``length``."""

    def __init__(self, pairs: Sequence[LabelledPair], encoder: PairEncoder, batch: int = 2048):
        fmt = encoder.spec.passage_format
        self.labels = [float(p.label) for p in pairs]
        self.query_ids = [p.query_id for p in pairs]
        # ranking groups: a query's passages; for sentence pairs (extractor), a query's sentences of one passage
        self.group_ids = [p.query_id + "\x00" + str(p.passage.metadata.get("parent_id", "")) for p in pairs]
        self.sentence_index = [int(p.passage.metadata.get("sentence_index", i)) for i, p in enumerate(pairs)]
        self.features: list[dict[str, list[int]]] = []
        self.stats = EncodeStats()
        for i in range(0, len(pairs), batch):
            chunk = pairs[i : i + batch]
            enc, st = encoder.encode([p.query for p in chunk], [passage_text(p.passage, fmt) for p in chunk])
            self.stats.add(st)
            keys = list(enc)
            self.features.extend({k: enc[k][j] for k in keys} for j in range(len(chunk)))
        self.lengths = [len(f["input_ids"]) for f in self.features]

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.features[i], "labels": self.labels[i], "length": self.lengths[i]}


class EncodedGroups(torch.utils.data.Dataset):
    """Pre-tokenised groups: passage 0 is the positive."""

    def __init__(self, groups: Sequence[QueryExample], encoder: PairEncoder):
        self.items: list[list[dict[str, list[int]]]] = []
        self.stats = EncodeStats()
        for g in groups:
            passages = g.positives + g.negatives
            enc, st = encoder.encode([g.query] * len(passages), [passage_text(p, encoder.spec.passage_format) for p in passages])
            self.stats.add(st)
            keys = list(enc)
            self.items.append([{k: enc[k][j] for k in keys} for j in range(len(passages))])
        self.lengths = [max(len(f["input_ids"]) for f in item) for item in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"group": self.items[i], "length": self.lengths[i]}


@dataclass
class Collator:
    """Dynamic padding; groups are flattened (group-major) and ``group_size`` is passed along."""

    pad_id: int

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if "group" in batch[0]:
            flat = [f for b in batch for f in b["group"]]
            out = pad_batch(flat, self.pad_id)
            size = len(batch[0]["group"])
            out["group_size"] = torch.tensor(size)
            labels = torch.zeros(len(batch), size)
            labels[:, 0] = 1.0
            out["labels"] = labels.reshape(-1)
            return out
        out = pad_batch(batch, self.pad_id)
        out["labels"] = torch.tensor([b["labels"] for b in batch], dtype=torch.float32)
        return out
