"""``python -m data_prep mine``: BM25 hard-negative mining, sharded, resumable and deterministic.

For each query of a :class:`~data_prep.readers.Source`, retrieve the top ``depth`` passages of the
corpus with BM25 (:mod:`data_prep.bm25`), and pick ``negatives`` of them from the rank window
``START:END`` (a Python slice over the ranked hits: ``3:100`` skips the three best hits and keeps
ranks 4 to 100), either the best ones (``top``) or at random (``random``). A hit is never a
negative when it is one of the query's positives (same id or same text) or contains a gold answer
string (SQuAD normalisation, :func:`data_prep.text.contains_answer`): both are likely false
negatives and are counted. An optional dense filter drops a candidate whose similarity to the
query (a local sentence-embedding model) is within ``dense_margin`` of the best positive's. A share
``easy_ratio`` of the negatives are random corpus passages outside the retrieved list.

================  ====================================================================
module            what it does
================  ====================================================================
``config``        :class:`MiningConfig` (what to mine and how; the run fingerprint), the
                  ``--window`` and ``--shard`` specs, why the default window is 3:100
``select``        one query's negatives, a batch of queries at a time (:func:`mine_batch`):
                  window, sampling, the positive, answer and dense filters, easy negatives
``run``           a whole run (:func:`run_mining`): the query spool, shards, resume checks
                  and locks, the Lucene backend, the merge into ``examples.jsonl`` and
                  ``meta.json``
``ray``           ``--ray``: each shard a Ray task, written by the driver
``command``       the command line (``python -m data_prep mine``)
================  ====================================================================
"""

from .config import MiningConfig, parse_shard, parse_window
from .run import lock_target, run_mining, shard_paths
from .select import mine_batch

__all__ = ["MiningConfig", "lock_target", "mine_batch", "parse_shard", "parse_window", "run_mining", "shard_paths"]
