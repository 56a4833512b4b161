"""Evaluator records: relevance pairs (positives 1, negatives 0) and groups (1 positive +
``group_size - 1`` negatives) for listwise losses."""

from __future__ import annotations

from collections import Counter

from ..records import LabelledPair, QueryExample
from . import label_source, seeded_rng


def evaluator_pairs(example: QueryExample) -> list[LabelledPair]:
    """Pointwise relevance pairs: every positive labelled 1, every negative 0.

    The label source is the passage's ``metadata["label_source"]``, else the example's, else
    ``human`` (gold passages and qrels).
    """
    out = []
    for role, passages, label in (("positive", example.positives, 1.0), ("negative", example.negatives, 0.0)):
        for p in passages:
            out.append(
                LabelledPair(
                    query_id=example.id,
                    query=example.query,
                    passage=p,
                    label=label,
                    label_source=label_source(p, example),
                    metadata={"role": role, "source": example.source},
                )
            )
    return out


def evaluator_groups(
    example: QueryExample, group_size: int, seed: int, short_groups: str = "pad"
) -> tuple[list[QueryExample], Counter[str]]:
    """One group per positive: that positive plus ``group_size - 1`` negatives sampled with a
    generator seeded by (seed, query id, positive index).

    With fewer negatives than needed, ``pad`` uses every negative once and fills the rest by
    sampling with replacement (as FlagEmbedding does); ``drop`` drops the query's groups. A query
    without negatives has no groups either way. Returns the groups and counts of what happened
    (``padded``: groups; ``dropped:<reason>``: queries).
    """
    k = group_size - 1
    notes: Counter[str] = Counter()
    pool = example.negatives
    if not example.positives:
        notes["dropped:no-positives"] += 1
        return [], notes
    if not pool:
        notes["dropped:no-negatives"] += 1
        return [], notes
    if len(pool) < k and short_groups == "drop":
        notes["dropped:too-few-negatives"] += 1
        return [], notes
    groups = []
    for i, pos in enumerate(example.positives):
        rng = seeded_rng(seed, example.id, f"group:{i}")
        if len(pool) >= k:
            negs = rng.sample(pool, k)
            padded = False
        else:
            negs = rng.sample(pool, len(pool)) + rng.choices(pool, k=k - len(pool))
            padded = True
            notes["padded"] += 1
        groups.append(
            QueryExample(
                id=f"{example.id}#g{i}",
                query=example.query,
                positives=[pos],
                negatives=negs,
                answers=list(example.answers),
                source=example.source,
                metadata={
                    "query_id": example.id,
                    "positive_index": i,
                    "padded": padded,
                    "label_source": label_source(pos, example),
                },
            )
        )
    return groups, notes
