"""Small evaluator training sets made from the bundled NQ-open sample (real text, random negatives)."""

from __future__ import annotations

import random
from pathlib import Path

from conftest import nq_rows
from data_prep.io import write_jsonl
from data_prep.records import LabelledPair, Passage, QueryExample


def make_evaluator_data(d: Path, n_queries: int = 60, n_dev: int = 20, negatives: int = 3, seed: int = 0) -> dict[str, Path]:
    rows = nq_rows(n_queries + n_dev)
    rng = random.Random(seed)
    passages = [Passage(id=f"p{i}", title=r["ctxs"][0]["title"], text=r["ctxs"][0]["text"]) for i, r in enumerate(rows)]
    out = {}
    for split, idx in (("train", range(n_queries)), ("dev", range(n_queries, n_queries + n_dev))):
        pairs, groups = [], []
        for i in idx:
            q = rows[i]["question"]
            negs = rng.sample([p for j, p in enumerate(passages) if j != i], negatives)
            pairs.append(LabelledPair(f"q{i}", q, passages[i], 1.0))
            pairs.extend(LabelledPair(f"q{i}", q, n, 0.0) for n in negs)
            groups.append(QueryExample(id=f"q{i}", query=q, positives=[passages[i]], negatives=negs, answers=rows[i]["answers"]))
        out[f"{split}_pairs"] = d / f"{split}.pairs.jsonl"
        out[f"{split}_groups"] = d / f"{split}.groups.jsonl"
        write_jsonl(out[f"{split}_pairs"], pairs)
        write_jsonl(out[f"{split}_groups"], groups)
    return out
