"""The labelling rules of the three task datasets that ``python -m data_prep build`` writes, one
module per task. Each is a set of pure functions of one :class:`~data_prep.records.QueryExample`
(tests call them directly); new label sources (an LLM judge, user feedback) plug in here.

=============  =====================================  ======================================
build folder   module                                 records
=============  =====================================  ======================================
``evaluator``  :mod:`data_prep.tasks.evaluator`       relevance pairs and groups
``answer``     :mod:`data_prep.tasks.answer`          "does this passage hold the answer?"
``extractor``  :mod:`data_prep.tasks.extractor`       (query, sentence) pairs: key sentence or not
=============  =====================================  ======================================
"""

from __future__ import annotations

import random
from typing import Iterable

from ..records import Passage, QueryExample

#: MS MARCO's placeholder answer for queries whose passages do not answer them
MSMARCO_NO_ANSWER = "No Answer Present."
HF_MSMARCO = "hf-msmarco"

#: build folder -> the kinds of file it writes, each as ``{split}.{kind}.jsonl``
TASK_FILES = {"evaluator": ("pairs", "groups"), "answer": ("pairs", "groups"), "extractor": ("pairs",)}
TASKS = tuple(TASK_FILES)


def seeded_rng(seed: int, query_id: str, purpose: str) -> random.Random:
    # str seeds are hashed with SHA-512 by random.seed: stable across runs and PYTHONHASHSEED
    return random.Random(f"{seed}\x00{query_id}\x00{purpose}")


def label_source(passage: Passage, example: QueryExample) -> str:
    """The passage's ``metadata["label_source"]``, else the example's, else ``human``."""
    return str(passage.metadata.get("label_source") or example.metadata.get("label_source") or "human")


def real_answers(answers: Iterable[str]) -> tuple[list[str], int]:
    """The usable gold answers and how many were empty (ignored); MS MARCO's
    ``No Answer Present.`` is no answer."""
    out, empty = [], 0
    for a in answers:
        if not a.strip():
            empty += 1
        elif a.strip() != MSMARCO_NO_ANSWER:
            out.append(a)
    return out, empty
