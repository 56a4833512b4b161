"""Our own JSONL schema (``docs/data.md``): query examples, passages and labelled pairs.

Formats
-------
``queries``
    :class:`~data_prep.records.QueryExample` JSONL (``input=``), optionally with a
    :class:`~data_prep.records.Passage` JSONL corpus (``corpus=``). With a corpus, every positive
    and negative id must be one of its passages; without one, the corpus is the distinct
    positives and negatives of the examples.
``pairs``
    :class:`~data_prep.records.LabelledPair` JSONL. As a :class:`Source`, consecutive pairs of one
    query form one example (label >= 0.5 positive).

Ids must be unique within a file (passages, query examples); pairs may repeat a query id. A query
example without positives is passed on; one with no positive and no negative is a bad row (kind
``no-passages``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

from ..io import DataError, Rejects, iter_json_lines, parse_rows, require_path
from ..records import LabelledPair, Passage, QueryExample, RecordError
from . import Source, register_format, register_pairs
from .common import SeenIds, check_passages, dedupe, once
from .crag import pairs_to_examples

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


def _from_dict(path: PathLike, n: int, obj: dict, record_type: type):
    try:
        return record_type.from_dict(obj)
    except RecordError as e:
        msg = str(e)
        if "missing field" in msg:
            kind = "missing-field"
        elif "'query' is empty" in msg:
            kind = "empty-query"
        elif "'text' is empty" in msg:
            kind = "empty-passage"
        else:
            kind = "invalid-record"
        raise DataError(path, n, msg, kind) from None


def read_passages(path: PathLike, rejects: Rejects | None = None) -> Iterator[Passage]:
    """Stream a Passage JSONL file; duplicate ids are bad rows."""
    seen = SeenIds("passage")

    def parse(n: int, obj: dict) -> Passage:
        p = _from_dict(path, n, obj, Passage)
        seen.check(path, n, p.id)
        return p

    yield from parse_rows(path, iter_json_lines(path, rejects), parse, rejects)


def read_queries(
    path: PathLike, rejects: Rejects | None = None, corpus_ids: set[str] | None = None, corpus_name: str = "the corpus"
) -> Iterator[QueryExample]:
    """Stream a QueryExample JSONL file; duplicate ids are bad rows, and so are passages missing
    from ``corpus_ids`` when it is given."""
    seen = SeenIds("query")

    def parse(n: int, obj: dict) -> QueryExample:
        ex = check_passages(path, n, _from_dict(path, n, obj, QueryExample), "'positives' and 'negatives' are empty")
        if corpus_ids is not None:
            for what, group in (("positive", ex.positives), ("negative", ex.negatives)):
                for p in group:
                    if p.id not in corpus_ids:
                        raise DataError(path, n, f"{what} passage id {p.id!r} is not in {corpus_name}", "unknown-passage")
        seen.check(path, n, ex.id)
        return ex

    yield from parse_rows(path, iter_json_lines(path, rejects), parse, rejects)


def read_pairs(path: PathLike, rejects: Rejects | None = None) -> Iterator[LabelledPair]:
    """Stream a LabelledPair JSONL file."""
    yield from parse_rows(path, iter_json_lines(path, rejects), lambda n, obj: _from_dict(path, n, obj, LabelledPair), rejects)


@register_format("queries", "our QueryExample JSONL (input=file), optionally with a Passage JSONL corpus=")
def open_queries(input: PathLike, corpus: PathLike | None = None, rejects: Rejects | None = None) -> Source:
    path = require_path(input)
    cpath = require_path(corpus, "corpus") if corpus is not None else None
    rj = once(rejects)

    def queries() -> Iterator[QueryExample]:
        if cpath is None:
            return read_queries(path, rj)
        ids = {p.id for p in read_passages(cpath, rj)}
        return read_queries(path, rj, ids, Path(cpath).name)

    def corpus_() -> Iterator[Passage]:
        if cpath is not None:
            return read_passages(cpath, rj)
        return dedupe(p for ex in read_queries(path, rj) for p in (*ex.positives, *ex.negatives))

    return Source(
        name="queries",
        corpus=corpus_,
        queries=queries,
        files=[str(path)] + ([str(cpath)] if cpath else []),
        info={"label_source": "human"},
    )


@register_pairs("pairs")
def _pairs(input: PathLike, rejects: Rejects | None = None) -> Iterator[LabelledPair]:
    return read_pairs(require_path(input), rejects)


@register_format("pairs", "our LabelledPair JSONL (input=file)")
def open_pairs_source(input: PathLike, rejects: Rejects | None = None) -> Source:
    path = require_path(input)
    rj = once(rejects)
    return Source(
        name="pairs",
        corpus=lambda: dedupe(p.passage for p in read_pairs(path, rj)),
        queries=lambda: pairs_to_examples(read_pairs(path, rj), "pairs"),
        files=[str(path)],
        info={},
    )
