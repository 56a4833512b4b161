"""MS MARCO passage ranking: the TSV release files and the Hugging Face ``ms_marco`` rows.

Formats
-------
``msmarco``
    ``collection.tsv`` (``pid<TAB>passage``), ``queries.<split>.tsv`` (``qid<TAB>query``) and TREC
    qrels ``qrels.<split>.tsv`` (``qid 0 pid relevance``, whitespace separated). ``input`` is the
    folder holding them (the layout of ``collectionandqueries.tar.gz``); ``corpus=``, ``queries=``
    and ``qrels=`` name the files one by one. Relevance > 0 is a positive, 0 a judged negative.
``msmarco-triples``
    ``triples.train.small.tsv``: ``query<TAB>positive<TAB>negative``. The release has mojibake
    (UTF-8 decoded as Latin-1, ``donâ€™t``); it is kept by default so texts match other tools that
    read the file, and repaired with ``fix_mojibake=True``.
``hf-msmarco``
    Rows of the Hugging Face ``ms_marco`` dataset (v1.1 / v2.1) as JSONL, or parquet when the file
    name ends in ``.parquet``: ``query``, ``query_id``, ``query_type``, ``passages`` (``is_selected``,
    ``passage_text``, ``url``), ``answers``, ``wellFormedAnswers``. Positives are the selected
    passages, negatives the others; the literal answer ``No Answer Present.`` is dropped. A row with
    no passages at all is a bad row (kind ``no-passages``); one with none selected is passed on.

Queries and passages of the TSV files carry ids; triples and Hugging Face passages get
:func:`~data_prep.readers.common.stable_id` ids, triple queries :func:`text_query_id`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

from ..io import STRICT, DataError, Rejects, iter_json_lines, parse_rows, require_path
from ..records import Passage, QueryExample
from . import Source, register_format
from .common import (
    Qrel,
    SeenIds,
    check_passages,
    check_text,
    dedupe,
    group_consecutive,
    id_str,
    join_qrels,
    maybe_fix,
    once,
    parse_score,
    stable_id,
    str_list,
    text_query_id,
)
from .files import iter_parquet_rows, iter_tsv

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
NO_ANSWER = "No Answer Present."


# --------------------------------------------------------------------------------------------
# TSV release files


def read_collection(
    path: PathLike, rejects: Rejects | None = None, fix_mojibake: bool = False, pids: set[str] | None = None
) -> Iterator[Passage]:
    """Stream ``collection.tsv`` (``pid<TAB>passage``); duplicate pids and empty passages are bad rows.

    ``pids``: only the passages with those ids (the qrels' ones). The other rows are split at their
    first tab and passed over undecoded, so the query pass over the 8.8M-line collection for its
    ~500k judged passages holds no other passage and costs a fraction of a full read. Every row is
    checked by the corpus pass, which mining runs first (a bad judged row is rejected by both, and
    counted once through the source's shared rejects).
    """
    seen = SeenIds("passage")
    keep = None
    if pids is not None:
        keys = {pid.encode("utf-8") for pid in pids}

        def keep(raw: bytes) -> bool:
            tab = raw.find(b"\t")
            return tab >= 0 and raw[:tab].strip() in keys

    def parse(n: int, f: list[str]) -> Passage:
        pid = f[0].strip()
        if not pid:
            raise DataError(path, n, "empty passage id", "empty-id")
        text = maybe_fix(check_text(path, n, f[1], "passage"), fix_mojibake)
        seen.check(path, n, pid)
        return Passage(id=pid, text=text)

    yield from parse_rows(path, iter_tsv(path, ("pid", "passage"), rejects, keep=keep), parse, rejects)


def read_queries(path: PathLike, rejects: Rejects | None = None, fix_mojibake: bool = False) -> Iterator[tuple[str, str]]:
    """Stream ``queries.*.tsv`` as ``(qid, query)``; duplicate qids and empty queries are bad rows."""
    seen = SeenIds("query")

    def parse(n: int, f: list[str]) -> tuple[str, str]:
        qid = f[0].strip()
        if not qid:
            raise DataError(path, n, "empty query id", "empty-id")
        text = maybe_fix(check_text(path, n, f[1], "query"), fix_mojibake)
        seen.check(path, n, qid)
        return qid, text

    yield from parse_rows(path, iter_tsv(path, ("qid", "query"), rejects), parse, rejects)


def read_qrels(path: PathLike, rejects: Rejects | None = None) -> Iterator[Qrel]:
    """Stream TREC qrels (``qid iteration pid relevance``, whitespace separated)."""
    for n, f, raw in iter_tsv(path, ("qid", "iteration", "pid", "relevance"), rejects, sep=None):
        try:
            score = parse_score(path, n, f[3])
        except DataError as e:
            (rejects or STRICT).reject(e, raw)
            continue
        yield Qrel(qid=f[0], pid=f[2], score=score, line=n, raw=raw)


def _msmarco_examples(
    collection: Path, queries: Path, qrels: Path, rejects: Rejects | None, fix_mojibake: bool
) -> Iterator[QueryExample]:
    rows = list(read_qrels(qrels, rejects))
    qids = {r.qid for r in rows}
    pids = {r.pid for r in rows}
    texts = {qid: text for qid, text in read_queries(queries, rejects, fix_mojibake) if qid in qids}
    passages = {p.id: p for p in read_collection(collection, rejects, fix_mojibake, pids=pids)}
    yield from join_qrels(rows, qrels, texts, queries, passages, collection, rejects, "msmarco")


def _pick(input: PathLike | None, given: PathLike | None, name: str, what: str) -> Path:
    if given is not None:
        return require_path(given, what)
    if input is None:
        raise ValueError(f"msmarco: give --input (the folder holding {name}) or --{what}")
    return require_path(Path(require_path(input, "MS MARCO folder", is_dir=True)) / name, what)


@register_format("msmarco", "MS MARCO passage: collection.tsv + queries.<split>.tsv + qrels.<split>.tsv (input=folder)")
def open_msmarco(
    input: PathLike | None = None,
    corpus: PathLike | None = None,
    queries: PathLike | None = None,
    qrels: PathLike | None = None,
    split: str = "train",
    rejects: Rejects | None = None,
    fix_mojibake: bool = False,
) -> Source:
    coll = _pick(input, corpus, "collection.tsv", "corpus")
    qpath = _pick(input, queries, f"queries.{split}.tsv", "queries")
    rpath = _pick(input, qrels, f"qrels.{split}.tsv", "qrels")
    rj = once(rejects)
    return Source(
        name="msmarco",
        corpus=lambda: read_collection(coll, rj, fix_mojibake),
        queries=lambda: _msmarco_examples(coll, qpath, rpath, rj, fix_mojibake),
        files=[str(coll), str(qpath), str(rpath)],
        info={"split": split, "label_source": "human", "fix_mojibake": fix_mojibake},
    )


# --------------------------------------------------------------------------------------------
# triples


def read_triples(path: PathLike, rejects: Rejects | None = None, fix_mojibake: bool = False) -> Iterator[QueryExample]:
    """Stream ``query<TAB>positive<TAB>negative`` rows, one :class:`QueryExample` per row.

    The query id is :func:`text_query_id` of the query, so rows of one query share it.
    """

    def parse(n: int, f: list[str]) -> QueryExample:
        q = maybe_fix(check_text(path, n, f[0], "query"), fix_mojibake)
        pos = maybe_fix(check_text(path, n, f[1], "positive passage"), fix_mojibake)
        neg = maybe_fix(check_text(path, n, f[2], "negative passage"), fix_mojibake)
        return QueryExample(
            id=text_query_id(q),
            query=q,
            positives=[Passage(stable_id("", pos), pos)],
            negatives=[Passage(stable_id("", neg), neg)],
            source="msmarco-triples",
        )

    yield from parse_rows(path, iter_tsv(path, ("query", "positive", "negative"), rejects), parse, rejects)


@register_format("msmarco-triples", "MS MARCO triples.train.small.tsv: query<TAB>positive<TAB>negative (input=file)")
def open_msmarco_triples(input: PathLike, rejects: Rejects | None = None, fix_mojibake: bool = False) -> Source:
    """Consecutive rows of one query become one example; the corpus is every distinct passage."""
    path = require_path(input)
    rj = once(rejects)

    def corpus() -> Iterator[Passage]:
        return dedupe(p for ex in read_triples(path, rj, fix_mojibake) for p in (*ex.positives, *ex.negatives))

    return Source(
        name="msmarco-triples",
        corpus=corpus,
        queries=lambda: group_consecutive(read_triples(path, rj, fix_mojibake)),
        files=[str(path)],
        info={"label_source": "human", "fix_mojibake": fix_mojibake},
    )


# --------------------------------------------------------------------------------------------
# Hugging Face ms_marco rows


def _hf_row(path: PathLike, n: int, obj: dict, fix: bool, seen: SeenIds) -> QueryExample:
    for key in ("query", "query_id", "passages"):
        if obj.get(key) is None:
            raise DataError(path, n, f"missing field '{key}'", "missing-field")
    query = maybe_fix(check_text(path, n, obj["query"], "query"), fix)
    qid = id_str(path, n, obj["query_id"], "query_id")
    ps = obj["passages"]
    if not isinstance(ps, dict):
        raise DataError(path, n, f"field 'passages' must be an object, got {type(ps).__name__}", "invalid-type")
    for key in ("is_selected", "passage_text"):
        if not isinstance(ps.get(key), list):
            raise DataError(path, n, f"missing field 'passages.{key}'", "missing-field")
    sel, texts = ps["is_selected"], ps["passage_text"]
    urls = ps.get("url") or [""] * len(texts)
    if not (len(sel) == len(texts) == len(urls)):
        raise DataError(
            path,
            n,
            f"passages: is_selected has {len(sel)} items, passage_text {len(texts)}, url {len(urls)}",
            "invalid-passages",
        )
    pos, neg = [], []
    for i, (s, t, u) in enumerate(zip(sel, texts, urls)):
        if s not in (0, 1):
            raise DataError(path, n, f"passages.is_selected[{i}] is {s!r}, expected 0 or 1", "invalid-label")
        t = maybe_fix(check_text(path, n, t, "passage", where=f"passages.passage_text[{i}]"), fix)
        meta = {"url": u} if u else {}
        (pos if s == 1 else neg).append(Passage(stable_id("", t), t, metadata=meta))
    answers = [a for a in str_list(path, n, obj.get("answers"), "answers") if a.strip() and a.strip() != NO_ANSWER]
    meta = {}
    if obj.get("query_type"):
        meta["query_type"] = obj["query_type"]
    well = [a for a in str_list(path, n, obj.get("wellFormedAnswers"), "wellFormedAnswers") if a.strip()]
    if well:
        meta["well_formed_answers"] = well
    ex = check_passages(path, n, QueryExample(qid, query, pos, neg, answers, source="hf-msmarco", metadata=meta),
                        "passages.passage_text is empty")
    seen.check(path, n, qid)
    return ex


def read_hf_msmarco(path: PathLike, rejects: Rejects | None = None, fix_mojibake: bool = False) -> Iterator[QueryExample]:
    """Stream Hugging Face ``ms_marco`` rows (JSONL, or ``.parquet``) as query examples.

    Parquet rows are numbered from 1 in place of lines, and a rejected parquet row is written to
    the rejects file as its JSON.
    """
    path = require_path(path)
    seen = SeenIds("query")
    if str(path).endswith(".parquet"):
        rows = iter_parquet_rows(path)
    else:
        rows = iter_json_lines(path, rejects)
    yield from parse_rows(path, rows, lambda n, obj: _hf_row(path, n, obj, fix_mojibake, seen), rejects)


@register_format("hf-msmarco", "Hugging Face ms_marco v1.1/v2.1 rows as JSONL or .parquet (input=file)")
def open_hf_msmarco(input: PathLike, rejects: Rejects | None = None, fix_mojibake: bool = False) -> Source:
    path = require_path(input)
    rj = once(rejects)

    def corpus() -> Iterator[Passage]:
        return dedupe(p for ex in read_hf_msmarco(path, rj, fix_mojibake) for p in (*ex.positives, *ex.negatives))

    return Source(
        name="hf-msmarco",
        corpus=corpus,
        queries=lambda: read_hf_msmarco(path, rj, fix_mojibake),
        files=[str(path)],
        info={"label_source": "human", "fix_mojibake": fix_mojibake},
    )
