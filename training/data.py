"""Training and dev data for every task: read the built JSONL once, tokenise once, pad per batch.

* Pointwise losses read :class:`~data_prep.records.LabelledPair` JSONL.
* ``group-ce`` reads :class:`~data_prep.records.QueryExample` groups (1 positive + k negatives).
Each example carries a ``length`` so batches can be grouped by length (less padding).
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from data_prep.io import read_records, require_path
from data_prep.records import LabelledPair, QueryExample

from inference.inputs import EncodeStats, PairEncoder, pad_batch, passage_text

logger = logging.getLogger(__name__)

#: ``LabelledPair.metadata`` key that names the train_mix source of a dev pair
MIX_TAG = "mix_source"


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
    return sample_pairs(pairs, limit, seed, whole_queries)


def sample_pairs(pairs: list[LabelledPair], limit: int | None, seed: int = 0, whole_queries: bool = False,
                 key: Callable[[LabelledPair], Any] = lambda p: p.query_id) -> list[LabelledPair]:
    """At most about ``limit`` pairs, a seeded choice: single pairs, or whole queries (``key`` of a
    pair names its query) until ``limit`` is reached."""
    if limit is not None and len(pairs) > limit:
        rng = random.Random(seed)
        if whole_queries:
            qids = sorted({key(p) for p in pairs})
            rng.shuffle(qids)
            keep, n = set(), 0
            counts: dict[Any, int] = {}
            for p in pairs:
                counts[key(p)] = counts.get(key(p), 0) + 1
            for q in qids:
                if n >= limit:
                    break
                keep.add(q)
                n += counts[q]
            pairs = [p for p in pairs if key(p) in keep]
        else:
            pairs = list(pairs)
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


# --------------------------------------------------------------------------------------------
# a weighted mix of sources (TrainConfig.train_mix)


@dataclass
class MixSource:
    """One train_mix source as loaded: its training examples (pairs, or groups for group-ce) after
    the dev hold-out and its cap, and its dev pairs (tagged with :data:`MIX_TAG`)."""

    name: str
    weight: float
    train_file: str
    dev_file: str | None
    dev_ratio: float | None
    examples: list[Any]
    dev_pairs: list[LabelledPair]
    examples_read: int
    dataset_dir: str | None = None
    held_out_queries: int = 0
    taken: int = 0  # set by mix_examples

    @property
    def repeats(self) -> float:
        """Times each example is used on average (> 1: upsampled)."""
        return self.taken / len(self.examples) if self.examples else 0.0


@dataclass
class Mix:
    sources: list[MixSource]
    examples: list[Any]  # the mixed, shuffled training set
    dev_pairs: list[LabelledPair]  # every source's dev pairs, in source order

    @property
    def total_weight(self) -> float:
        return sum(s.weight for s in self.sources)


def held_out(query_id: str, dev_ratio: float) -> bool:
    """Whether a query goes to dev under ``dev_ratio``: a sha256 of the query id (the build's
    :func:`data_prep.build.split_of` with seed 0), so it does not depend on the training seed or on
    file order, and all of a query's pairs or groups go the same way."""
    from data_prep.build import split_of

    return split_of(query_id, 0, dev_ratio) == "dev"


def group_query_id(g: QueryExample) -> str:
    """A group's query id (``build`` names groups ``<query id>#g<i>`` and keeps the id in metadata)."""
    return str(g.metadata.get("query_id") or g.id)


def group_pairs(groups: Sequence[QueryExample]) -> list[LabelledPair]:
    """Dev pairs from held-out groups: positives 1, negatives 0, each (query, passage) once."""
    from data_prep.tasks import label_source

    out, seen = [], set()
    for g in groups:
        qid = group_query_id(g)
        for role, passages, label in (("positive", g.positives, 1.0), ("negative", g.negatives, 0.0)):
            for p in passages:
                if (qid, p.id) in seen:
                    continue
                seen.add((qid, p.id))
                out.append(LabelledPair(qid, g.query, p, label, label_source(p, g),
                                        metadata={"role": role, "source": g.source}))
    return out


def mix_counts(sizes: Sequence[int], weights: Sequence[float], mix_size: int | None = None) -> list[int]:
    """Examples taken from each source: ``round(mix_size * w_i / sum(w))`` (halves up), where
    ``mix_size`` defaults to ``sum(sizes)``. The total may differ from ``mix_size`` by the rounding."""
    total = sum(sizes) if mix_size is None else mix_size
    w = float(sum(weights))
    return [int(math.floor(total * wi / w + 0.5)) for wi in weights]


def _rng(seed: int, *parts: str) -> random.Random:
    return random.Random("\x00".join([str(seed), *parts]))  # str seeds hash with sha512: stable across runs


def take(items: Sequence[Any], k: int, rng: random.Random) -> list[Any]:
    """``k`` of ``items``: a sample without replacement when there are enough, else every item
    ``k // n`` times plus a sample of ``k % n`` of them (upsampling)."""
    n = len(items)
    reps, rest = divmod(k, n) if n else (0, 0)
    idx = [i for _ in range(reps) for i in range(n)] + rng.sample(range(n), rest)
    return [items[i] for i in idx]


def mix_examples(sources: Sequence[MixSource], mix_size: int | None, seed: int) -> list[Any]:
    """The training set of a mix (the rule of ``TrainConfig.train_mix``): :func:`mix_counts`
    examples from each source by :func:`take` (each source with its own generator seeded by
    ``seed`` and its name), then shuffled with ``seed``. Sets each source's ``taken``."""
    counts = mix_counts([len(s.examples) for s in sources], [s.weight for s in sources], mix_size)
    out: list[Any] = []
    for src, k in zip(sources, counts):
        src.taken = k
        out.extend(take(src.examples, k, _rng(seed, "mix", src.name)))
    random.Random(seed).shuffle(out)
    return out


def mix_table(mix: Mix) -> str:
    """The log table of a mix: source, examples available, taken, share, repeats."""
    total = sum(s.taken for s in mix.sources) or 1
    rows = [("source", "available", "taken", "share", "repeats", "dev pairs")]
    rows += [(s.name, str(len(s.examples)), str(s.taken), f"{100 * s.taken / total:.1f}%", f"{s.repeats:.2f}",
              str(len(s.dev_pairs))) for s in mix.sources]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


def load_mix_source(entry: dict[str, Any], cfg) -> MixSource:
    """Read one train_mix entry: its training file (pairs, or groups for group-ce), its dev pairs
    (dev_file, the dataset's dev split, or the held-out ``dev_ratio`` of its queries), its cap."""
    name = entry["name"]
    groups = cfg.loss == "group-ce"
    dataset_dir = entry.get("dataset_dir")
    if dataset_dir:
        base = Path(dataset_dir) / cfg.task.build_dir
        train = str(base / f"train.{'groups' if groups else 'pairs'}.jsonl")
        dev = entry.get("dev_file") or str(base / "dev.pairs.jsonl")
    else:
        train, dev = entry["file"], entry.get("dev_file")
    require_path(train, f"training file of train_mix source {name!r}")
    if dev:
        require_path(dev, f"dev file of train_mix source {name!r}")
    examples = load_groups(train, cfg.group_size) if groups else load_pairs(train)
    n_read = len(examples)
    ratio = entry.get("dev_ratio")
    dev_pairs: list[LabelledPair] = []
    held_queries = 0
    if ratio:
        qid = group_query_id if groups else (lambda p: p.query_id)
        dev_q = {q for q in {qid(e) for e in examples} if held_out(q, ratio)}
        dev_part = [e for e in examples if qid(e) in dev_q]
        examples = [e for e in examples if qid(e) not in dev_q]
        held_queries = len(dev_q)
        dev_pairs = group_pairs(dev_part) if groups else dev_part
        if not examples:
            raise DataProblem(f"{train}: train_mix source {name!r} has no training examples left after holding out "
                              f"dev_ratio {ratio} of its queries")
    elif dev:
        dev_pairs = list(read_records(dev, LabelledPair))
    cap = entry.get("max_examples")
    if cap is not None and len(examples) > cap:
        examples = list(examples)
        _rng(cfg.seed, "cap", name).shuffle(examples)
        examples = examples[:cap]
    for p in dev_pairs:
        p.metadata[MIX_TAG] = name
    return MixSource(name=name, weight=float(entry.get("weight", 1.0)), train_file=train,
                     dev_file=None if ratio else dev, dev_ratio=ratio, examples=examples, dev_pairs=dev_pairs,
                     examples_read=n_read, dataset_dir=dataset_dir, held_out_queries=held_queries)


def load_mix(cfg) -> Mix:
    """The sources of ``cfg.train_mix`` read, checked and mixed (deterministic for ``cfg.seed``)."""
    sources = [load_mix_source(e, cfg) for e in cfg.train_mix]
    mix = Mix(sources, mix_examples(sources, cfg.mix_size, cfg.seed), [p for s in sources for p in s.dev_pairs])
    for s in sources:
        if s.taken == 0:
            logger.warning("train_mix source %r contributes no examples (weight %s of %s, mix_size %s)", s.name,
                           s.weight, mix.total_weight, cfg.mix_size)
    if not mix.examples:
        raise DataProblem(f"train_mix: mix_size {cfg.mix_size} rounds every source's share to 0 examples")
    if not mix.dev_pairs:
        raise DataProblem("train_mix: no source has dev pairs (their dev files are empty)")
    if cfg.loss != "group-ce":
        check_labels([p.label for p in mix.examples], "the mixed training set", "train_mix")
    # a query in one source's training data and another source's dev pairs inflates the dev metrics
    dev_q = {s.name: {p.query_id for p in s.dev_pairs} for s in sources}
    for s in sources:
        qid = group_query_id if cfg.loss == "group-ce" else (lambda p: p.query_id)
        train_q = {qid(e) for e in s.examples}
        for other, qs in dev_q.items():
            shared = len(train_q & qs) if other != s.name else 0
            if shared:
                logger.warning("train_mix: %d query ids of %r's training data are in %r's dev pairs", shared, s.name,
                               other)
    logger.info("train_mix: %d training examples from %d sources (seed %d):\n%s", len(mix.examples), len(sources),
                cfg.seed, mix_table(mix))
    return mix


def feature_length(f: dict[str, list[int]]) -> int:
    """The longest sequence of an encoded pair (a bi-encoder pair has two: query and passage)."""
    return max(len(f["input_ids"]), len(f.get("p_input_ids", ())))


class EncodedPairs(torch.utils.data.Dataset):
    """Pre-tokenised pointwise pairs: ``input_ids`` (+ ``token_type_ids``), ``labels``, ``length``.
    ``sources``: each pair's :data:`MIX_TAG` (the train_mix source of a dev pair), else ``None``."""

    def __init__(self, pairs: Sequence[LabelledPair], encoder: PairEncoder, batch: int = 2048):
        fmt = encoder.spec.passage_format
        self.labels = [float(p.label) for p in pairs]
        self.query_ids = [p.query_id for p in pairs]
        self.sources: list[str | None] = [p.metadata.get(MIX_TAG) for p in pairs]
        # ranking groups: a query's passages; for sentence pairs (extractor), a query's sentences of one passage;
        # in a mix, per source (two sources may use the same query ids)
        self.group_ids = [("" if s is None else s + "\x00") + p.query_id + "\x00" + str(p.passage.metadata.get("parent_id", ""))
                          for s, p in zip(self.sources, pairs)]
        self.sentence_index = [int(p.passage.metadata.get("sentence_index", i)) for i, p in enumerate(pairs)]
        self.features: list[dict[str, list[int]]] = []
        self.stats = EncodeStats()
        for i in range(0, len(pairs), batch):
            chunk = pairs[i : i + batch]
            enc, st = encoder.encode([p.query for p in chunk], [passage_text(p.passage, fmt) for p in chunk])
            self.stats.add(st)
            keys = list(enc)
            self.features.extend({k: enc[k][j] for k in keys} for j in range(len(chunk)))
        self.lengths = [feature_length(f) for f in self.features]

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
        self.lengths = [max(feature_length(f) for f in item) for item in self.items]

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
