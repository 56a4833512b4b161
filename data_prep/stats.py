"""Dataset statistics: counts, label balance and length percentiles, in one streaming pass.

:class:`DatasetStats` accumulates :class:`~data_prep.records.LabelledPair` records (pointwise
data) and :class:`~data_prep.records.QueryExample` records (groups: each positive counts as a
label-1 pair, each negative as a label-0 pair). Lengths are kept as histograms, so memory does not
grow with the number of records, and the percentiles are exact (nearest rank).

:func:`dataset_stats` is the one-call form; :func:`format_report` renders the per-task, per-split
statistics that ``python -m data_prep build`` writes to ``stats.json`` as a plain-text table.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

from .records import LabelledPair, Passage, QueryExample

PERCENTILES = (50, 90, 99)
POSITIVE_THRESHOLD = 0.5


def word_count(text: str) -> int:
    """Whitespace-separated words (what the length percentiles count)."""
    return len(text.split())


def passage_words(passage: Passage) -> int:
    """Words of the passage as models see it: title and text."""
    return word_count(passage.full_text(" "))


class LengthHistogram:
    """Exact nearest-rank percentiles of integer lengths, in memory proportional to distinct lengths."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.n = 0
        self.total = 0

    def add(self, length: int) -> None:
        self.counts[length] += 1
        self.n += 1
        self.total += length

    def percentile(self, p: float) -> int:
        """The smallest length with at least ``p`` percent of the values at or below it."""
        if self.n == 0:
            raise ValueError("percentile of an empty histogram")
        rank = max(1, math.ceil(p / 100 * self.n))
        seen = 0
        for length in sorted(self.counts):
            seen += self.counts[length]
            if seen >= rank:
                return length
        return max(self.counts)  # unreachable: seen reaches n

    def summary(self) -> dict[str, Any]:
        if self.n == 0:
            return {"count": 0}
        out: dict[str, Any] = {"count": self.n, "mean": round(self.total / self.n, 2), "min": min(self.counts)}
        out.update({f"p{p}": self.percentile(p) for p in PERCENTILES})
        out["max"] = max(self.counts)
        return out


class DatasetStats:
    """Streaming statistics of pairs and/or groups; call :meth:`add` per record, then :meth:`result`."""

    def __init__(self) -> None:
        self.records = 0
        self.groups = 0
        self.pairs = 0
        self.positives = 0
        self.label_sum = 0.0
        self.label_sources: Counter[str] = Counter()
        self.group_sizes: Counter[int] = Counter()
        self._queries: set[str] = set()
        self.query_words = LengthHistogram()
        self.passage_words = LengthHistogram()

    def add(self, record: LabelledPair | QueryExample) -> None:
        if isinstance(record, LabelledPair):
            self.add_pair(record)
        elif isinstance(record, QueryExample):
            self.add_group(record)
        else:
            raise TypeError(f"expected a LabelledPair or QueryExample, got {type(record).__name__}")

    def _add_query(self, key: str, query: str) -> None:
        if key not in self._queries:
            self._queries.add(key)
            self.query_words.add(word_count(query))

    def _add_label(self, passage: Passage, label: float, source: str) -> None:
        self.pairs += 1
        self.label_sum += label
        self.positives += label >= POSITIVE_THRESHOLD
        self.label_sources[source] += 1
        self.passage_words.add(passage_words(passage))

    def add_pair(self, pair: LabelledPair) -> None:
        self.records += 1
        self._add_query(pair.query_id, pair.query)
        self._add_label(pair.passage, pair.label, pair.label_source)

    def add_group(self, group: QueryExample) -> None:
        """A group: its positives count as label 1, its negatives as label 0."""
        self.records += 1
        self.groups += 1
        self.group_sizes[len(group.positives) + len(group.negatives)] += 1
        self._add_query(str(group.metadata.get("query_id", group.id)), group.query)
        source = str(group.metadata.get("label_source", "human"))
        for p in group.positives:
            self._add_label(p, 1.0, source)
        for p in group.negatives:
            self._add_label(p, 0.0, source)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "queries": len(self._queries)}
        if self.groups:
            out["groups"] = self.groups
            out["group_sizes"] = {str(k): v for k, v in sorted(self.group_sizes.items())}
        out.update(
            {
                "pairs": self.pairs,
                "positives": self.positives,
                "negatives": self.pairs - self.positives,
                "positive_rate": round(self.positives / self.pairs, 4) if self.pairs else None,
                "mean_label": round(self.label_sum / self.pairs, 4) if self.pairs else None,
                "label_sources": dict(sorted(self.label_sources.items())),
                "query_words": self.query_words.summary(),
                "passage_words": self.passage_words.summary(),
            }
        )
        return out


def dataset_stats(pairs: Iterable[LabelledPair | QueryExample]) -> dict[str, Any]:
    """Counts, label balance and word-length percentiles (p50/p90/p99) of queries and passages.

    Queries are counted once per distinct query id (for groups, ``metadata["query_id"]``);
    passages once per pair. A label counts as positive at >= 0.5.
    """
    acc = DatasetStats()
    for r in pairs:
        acc.add(r)
    return acc.result()


def _pcts(s: dict[str, Any]) -> str:
    if not s.get("count"):
        return "-"
    return "/".join(str(s[f"p{p}"]) for p in PERCENTILES)


def format_report(stats: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> str:
    """A plain-text table of ``{task: {kind: {split: dataset_stats(...)}}}``."""
    header = ("task", "file", "split", "records", "queries", "pos", "neg", "pos%", "query p50/90/99", "passage p50/90/99")
    rows = [header]
    for task, kinds in stats.items():
        for kind, splits in kinds.items():
            for split, s in splits.items():
                rate = s.get("positive_rate")
                rows.append(
                    (
                        task,
                        kind,
                        split,
                        str(s["records"]),
                        str(s["queries"]),
                        str(s["positives"]),
                        str(s["negatives"]),
                        "-" if rate is None else f"{100 * rate:.1f}",
                        _pcts(s["query_words"]),
                        _pcts(s["passage_words"]),
                    )
                )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("(lengths in words; passages include their title; pos = label >= 0.5)")
    return "\n".join(lines)
