"""Scoring on a Ray cluster (``inference score --ray``, ``training.distill --ray``): Ray Data with
an actor pool, each actor loading the export once.

The driver reads and checks the rows as a one-process run does (the same errors, ``file:line``,
and the same rejects), splits the checked texts into blocks (Arrow tables in Ray's object store)
and reads the results back in input order. Each actor is a :class:`BlockScorer`: it loads the
export through :func:`inference.load` (on its GPU with ``--ray-gpus-per-worker``) and scores a
block with the same call a one-process run makes (``score_texts``, ``extract_many``), so the
scores are the same numbers. An actor whose process dies is restarted and its block scored again.
Corpus mode (``--reference``) needs the whole reference in one process: it is refused with --ray.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from data_prep.cluster import RayOptions, connect, map_batches_ordered, n_workers
from data_prep.records import Passage

from .inputs import EncodeStats

@dataclass(frozen=True)
class LoadOptions:
    """How every actor loads the export (the driver's command-line options)."""

    model: str
    device: str | None = None
    dtype: str | None = None
    trust_pickle: bool = False
    batch_tokens: int | None = None
    top_k: int | None = None  # extractor
    min_score: float | None = None


class BlockScorer:
    """The Ray Data actor: the export loaded once; one block of pairs in, its results out (one row
    of list columns: ``score``, ``raw_score`` and the truncation counts, or the extractor's
    ``sentences`` as JSON)."""

    def __init__(self, opts: LoadOptions):
        from .loading import load

        self.opts = opts
        self.model = load(opts.model, device=opts.device, dtype=opts.dtype, trust_pickle=opts.trust_pickle,
                          batch_tokens=opts.batch_tokens)

    def __call__(self, block):
        import pyarrow as pa

        queries = block.column("query").to_pylist()
        passages = block.column("passage").to_pylist()
        if self.model.task == "extractor":
            items = [(q, _passage(p)) for q, p in zip(queries, passages)]
            full = [i for i, (_, p) in enumerate(items) if p != ""]  # an empty passage has no sentences
            got = self.model.extract_many([items[i] for i in full], self.opts.top_k, self.opts.min_score)
            sentences = [[] for _ in items]
            for i, ks in zip(full, got):
                sentences[i] = [k.to_dict() for k in ks]
            return pa.table({"sentences": [json.dumps(sentences, ensure_ascii=False)]})
        probs, raw, stats = self.model.score_texts(queries, passages)
        return pa.table({"score": [probs.tolist()], "raw_score": [raw.tolist()],
                         "passages_truncated": [stats.passages_truncated],
                         "queries_truncated": [stats.queries_truncated]})


def _passage(p: str) -> str | Passage:
    """Extractor blocks carry a passage as its text, or a titled passage as JSON (``{"..."``)."""
    return Passage.from_dict(json.loads(p[1:])) if p.startswith("\x00") else p


def encode_passage(p: str | Passage) -> str:
    return p if isinstance(p, str) else "\x00" + json.dumps(p.to_dict(), ensure_ascii=False)


def score_blocks(opts: RayOptions, load_opts: LoadOptions, queries: Sequence[str], passages: Sequence[str],
                 chunk_size: int) -> Iterator[tuple[int, int, Any]]:
    """Score the checked texts on the cluster in blocks of ``chunk_size`` pairs (the chunks a
    one-process run scores, so the batches and the numbers are its own); yields ``(lo, hi, result)``
    per block in input order: ``result`` is ``(probs, raw, EncodeStats)``, or the extractor's lists of sentence dicts."""
    import numpy as np
    import pyarrow as pa

    ray = connect(opts)
    workers = n_workers(ray, opts)
    size = chunk_size  # the one-process run's chunks: the same length-sorted batches, so the same numbers
    bounds = [(lo, min(lo + size, len(queries))) for lo in range(0, len(queries), size)]
    blocks = [ray.put(pa.table({"query": list(queries[lo:hi]), "passage": list(passages[lo:hi])})) for lo, hi in bounds]
    if not blocks:
        return
    results = map_batches_ordered(ray, blocks, BlockScorer, workers, opts, fn_constructor_args=(load_opts,))
    got = 0
    for (lo, hi), out in zip(bounds, results):
        got += 1
        if out.num_rows != 1:
            raise RuntimeError(f"Ray Data returned {out.num_rows} rows for block {lo}:{hi} (expected one)")
        if "sentences" in out.column_names:
            yield lo, hi, json.loads(out.column("sentences")[0].as_py())
        else:
            stats = EncodeStats(hi - lo, int(out.column("passages_truncated")[0].as_py()),
                                int(out.column("queries_truncated")[0].as_py()))
            yield lo, hi, (np.asarray(out.column("score")[0].as_py()), np.asarray(out.column("raw_score")[0].as_py()),
                           stats)
    if got != len(bounds):
        raise RuntimeError(f"Ray Data returned {got} blocks of {len(bounds)}: the output would miss rows")
