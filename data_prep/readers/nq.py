"""Natural Questions in the two layouts retrieval work uses.

Formats
-------
``dpr``
    DPR's retriever training files (``nq-train.json``, ``nq-dev.json``): one JSON *array* of
    ``{question, answers, positive_ctxs, negative_ctxs, hard_negative_ctxs}`` (a context is
    ``{title, text, [passage_id | psg_id], [score]}``), or the same objects one per line (JSONL).
    The array is parsed element by element (``nq-train.json`` is 7 GB) and a bad element is
    reported at the line where it starts. Negatives are the hard negatives first, then the
    others; ``metadata["num_hard_negatives"]`` says where the hard ones end.
``nq-open``
    NQ-open questions with a passage pool, as in lost-in-the-middle's ``nq-open-*.jsonl.gz``:
    ``{question, answers, ctxs: [{title, text, hasanswer, isgold}]}``. Positives are the
    ``isgold`` contexts, or - in a file whose contexts have no ``isgold`` - the ``hasanswer``
    ones (label source ``answer-match``). Negatives are contexts that are neither gold nor contain
    an answer (a non-gold context that contains an answer is left out of both: likely relevant,
    not annotated). The corpus is every distinct context of the file.

A question with no positive is passed on (DPR's dev files have some; ``build`` counts them as
``no-positives``), but one with no positive and no negative passage - empty context lists, or in
NQ-open only answer-bearing contexts none of which is gold - is a bad row (kind ``no-passages``).

Neither layout gives query ids; they are :func:`~data_prep.readers.common.text_query_id` of the
question (an ``id`` field is used when present). Contexts without ids get
:func:`~data_prep.readers.common.stable_id` ids.
"""

from __future__ import annotations

import logging
import os
from typing import Iterator

from ..io import DataError, Rejects, iter_json_lines, parse_rows, require_path
from ..records import Passage, QueryExample
from . import Source, register_format
from .common import (
    check_passages,
    check_text,
    ctx_list,
    ctx_passage,
    dedupe,
    id_str,
    once,
    str_list,
    text_query_id,
)
from .files import iter_json_records

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


def _question(path: PathLike, n: int, obj: dict) -> tuple[str, str, list[str]]:
    if obj.get("question") is None:
        raise DataError(path, n, "missing field 'question'", "missing-field")
    q = check_text(path, n, obj["question"], "query")
    if obj.get("answers") is None:
        raise DataError(path, n, "missing field 'answers'", "missing-field")
    answers = str_list(path, n, obj["answers"], "answers")
    qid = id_str(path, n, obj["id"], "id") if obj.get("id") is not None else text_query_id(q)
    return qid, q, answers


# --------------------------------------------------------------------------------------------
# DPR


def _dpr_row(path: PathLike, n: int, obj: dict) -> QueryExample:
    qid, q, answers = _question(path, n, obj)
    pos = [ctx_passage(path, n, c, f"positive_ctxs[{i}]") for i, c in enumerate(ctx_list(path, n, obj, "positive_ctxs", True))]
    hard = [ctx_passage(path, n, c, f"hard_negative_ctxs[{i}]") for i, c in enumerate(ctx_list(path, n, obj, "hard_negative_ctxs"))]
    other = [ctx_passage(path, n, c, f"negative_ctxs[{i}]") for i, c in enumerate(ctx_list(path, n, obj, "negative_ctxs"))]
    meta = {"num_hard_negatives": len(hard)}
    if obj.get("dataset"):
        meta["dataset"] = obj["dataset"]
    ex = QueryExample(qid, q, pos, hard + other, answers, source="dpr", metadata=meta)
    return check_passages(path, n, ex, "positive_ctxs, hard_negative_ctxs and negative_ctxs are all empty")


def read_dpr(path: PathLike, rejects: Rejects | None = None) -> Iterator[QueryExample]:
    """Stream a DPR ``.json`` array (incrementally) or ``.jsonl`` file as query examples."""
    yield from parse_rows(path, iter_json_records(path, rejects), lambda n, obj: _dpr_row(path, n, obj), rejects)


def _all_ctxs(examples: Iterator[QueryExample]) -> Iterator[Passage]:
    return dedupe(p for ex in examples for p in (*ex.positives, *ex.negatives))


@register_format("dpr", "DPR retriever data: a JSON array (streamed) or JSONL of question/answers/positive_ctxs/... (input=file)")
def open_dpr(input: PathLike, rejects: Rejects | None = None) -> Source:
    """The corpus is every distinct context of the file (an id set is kept to dedupe)."""
    path = require_path(input)
    rj = once(rejects)
    return Source(
        name="dpr",
        corpus=lambda: _all_ctxs(read_dpr(path, rj)),
        queries=lambda: read_dpr(path, rj),
        files=[str(path)],
        info={"label_source": "human"},
    )


# --------------------------------------------------------------------------------------------
# NQ-open with a passage pool


def _nq_open_ctxs(path: PathLike, n: int, obj: dict) -> tuple[list, list[Passage]]:
    ctxs = ctx_list(path, n, obj, "ctxs", True)
    return ctxs, [ctx_passage(path, n, c, f"ctxs[{i}]") for i, c in enumerate(ctxs)]


def _nq_open_row(path: PathLike, n: int, obj: dict) -> QueryExample:
    qid, q, answers = _question(path, n, obj)
    ctxs, passages = _nq_open_ctxs(path, n, obj)
    has_gold = any(isinstance(c, dict) and "isgold" in c for c in ctxs)
    key = "isgold" if has_gold else "hasanswer"
    pos, neg = [], []
    for c, p in zip(ctxs, passages):
        if c.get(key):
            pos.append(p)
        elif not c.get("hasanswer"):
            neg.append(p)
    label_source = "human" if has_gold else "answer-match"
    ex = QueryExample(qid, q, pos, neg, answers, source="nq-open", metadata={"label_source": label_source})
    why = "ctxs is empty" if not ctxs else (
        f"none of its {len(ctxs)} contexts is gold and all contain an answer, so none is a negative either")
    return check_passages(path, n, ex, why)


def read_nq_open(path: PathLike, rejects: Rejects | None = None) -> Iterator[QueryExample]:
    """Stream NQ-open JSONL (``.gz`` allowed) as query examples (see the module docstring)."""
    yield from parse_rows(path, iter_json_lines(path, rejects), lambda n, obj: _nq_open_row(path, n, obj), rejects)


def read_nq_open_passages(path: PathLike, rejects: Rejects | None = None) -> Iterator[Passage]:
    """Every distinct context of an NQ-open file (rows that fail :func:`read_nq_open` are skipped
    the same way)."""

    def parse(n: int, obj: dict) -> list[Passage]:
        _nq_open_row(path, n, obj)  # same validation as the queries
        return _nq_open_ctxs(path, n, obj)[1]

    yield from dedupe(parse_rows(path, iter_json_lines(path, rejects), parse, rejects))


@register_format("nq-open", "NQ-open JSONL(.gz) with ctxs [{title,text,hasanswer,isgold}] (input=file)")
def open_nq_open(input: PathLike, rejects: Rejects | None = None) -> Source:
    path = require_path(input)
    rj = once(rejects)
    return Source(
        name="nq-open",
        corpus=lambda: read_nq_open_passages(path, rj),
        queries=lambda: read_nq_open(path, rj),
        files=[str(path)],
        info={"label_source": "human"},
    )
