"""BEIR dataset folders.

Format ``beir`` (``input=DIR, split="train"``)::

    DIR/corpus.jsonl        {"_id", "title", "text", "metadata"}
    DIR/queries.jsonl       {"_id", "text", "metadata"}
    DIR/qrels/<split>.tsv   query-id<TAB>corpus-id<TAB>score, with that header row

Score > 0 is a positive (the score is kept in ``metadata["relevance"]``), score 0 (or below) a
judged negative. Only queries judged in the split are yielded: a query of ``queries.jsonl``
without qrels in the split is unjudged, not an example without passages, so every example has at
least one judged passage. A qrels file with only its header row is an empty input file. A document whose text is empty but
whose title is not (TREC-COVID has thousands) keeps its title as the text
(``metadata["text_from_title"] = True``); one with neither is a bad row.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

from ..io import STRICT, DataError, Rejects, empty_file_error, iter_json_lines, open_binary, parse_rows, require_path
from ..records import Passage
from . import Source, register_format
from .common import Qrel, SeenIds, check_text, id_str, join_qrels, once, parse_score
from .files import iter_tsv

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
QRELS_HEADER = ("query-id", "corpus-id", "score")


def read_corpus(path: PathLike, rejects: Rejects | None = None) -> Iterator[Passage]:
    """Stream ``corpus.jsonl``; duplicate ``_id`` values and empty documents are bad rows."""
    seen = SeenIds("passage")

    def parse(n: int, obj: dict) -> Passage:
        if obj.get("_id") is None:
            raise DataError(path, n, "missing field '_id'", "missing-field")
        pid = id_str(path, n, obj["_id"], "_id")
        if "text" not in obj:
            raise DataError(path, n, "missing field 'text'", "missing-field")
        text, title = obj.get("text") or "", obj.get("title") or ""
        if not isinstance(text, str) or not isinstance(title, str):
            raise DataError(path, n, "fields 'title' and 'text' must be strings", "invalid-type")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict):
            raise DataError(path, n, f"field 'metadata' must be an object, got {type(meta).__name__}", "invalid-type")
        if not text.strip():
            if not title.strip():
                raise DataError(path, n, "empty passage (no text and no title)", "empty-passage")
            text, title, meta = title, "", {**meta, "text_from_title": True}
        seen.check(path, n, pid)
        return Passage(id=pid, text=text, title=title, metadata=meta)

    yield from parse_rows(path, iter_json_lines(path, rejects), parse, rejects)


def read_queries(path: PathLike, rejects: Rejects | None = None) -> Iterator[tuple[str, str]]:
    """Stream ``queries.jsonl`` as ``(id, text)``; duplicate ids and empty queries are bad rows."""
    seen = SeenIds("query")

    def parse(n: int, obj: dict) -> tuple[str, str]:
        for k in ("_id", "text"):
            if obj.get(k) is None:
                raise DataError(path, n, f"missing field '{k}'", "missing-field")
        qid = id_str(path, n, obj["_id"], "_id")
        text = check_text(path, n, obj["text"], "query")
        seen.check(path, n, qid)
        return qid, text

    yield from parse_rows(path, iter_json_lines(path, rejects), parse, rejects)


def read_qrels(path: PathLike, rejects: Rejects | None = None) -> Iterator[Qrel]:
    """Stream ``qrels/<split>.tsv`` (``query-id corpus-id score``; the header row is skipped)."""
    first = True
    header_only = False
    for n, f, raw in iter_tsv(path, QRELS_HEADER, rejects):
        header_only = False
        if first:
            first = False
            if tuple(x.strip().lower() for x in f) == QRELS_HEADER:
                header_only = True
                continue
            logger.warning("%s has no header row (%s); reading line %d as data", path, "\t".join(QRELS_HEADER), n)
        try:
            score = parse_score(path, n, f[2].strip())
        except DataError as e:
            (rejects or STRICT).reject(e, raw)
            continue
        yield Qrel(qid=f[0].strip(), pid=f[1].strip(), score=score, line=n, raw=raw)
    if header_only:  # nothing after the header was yielded: was there anything at all?
        with open_binary(path) as fh:
            if sum(1 for raw in fh if raw.strip()) == 1:
                raise empty_file_error(path, "only the header row")


def _examples(corpus: Path, queries: Path, qrels: Path, rejects: Rejects | None, source: str):
    rows = list(read_qrels(qrels, rejects))
    qids = {r.qid for r in rows}
    pids = {r.pid for r in rows}
    texts = {qid: t for qid, t in read_queries(queries, rejects) if qid in qids}
    passages = {p.id: p for p in read_corpus(corpus, rejects) if p.id in pids}
    yield from join_qrels(rows, qrels, texts, queries, passages, corpus, rejects, source)


@register_format("beir", "BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (input=folder, split)")
def open_beir(
    input: PathLike | None = None,
    split: str = "train",
    corpus: PathLike | None = None,
    queries: PathLike | None = None,
    qrels: PathLike | None = None,
    rejects: Rejects | None = None,
) -> Source:
    root = Path(require_path(input, "BEIR folder", is_dir=True)) if input is not None else None
    if root is None and None in (corpus, queries, qrels):
        raise ValueError("beir: give --input (the dataset folder) or all of --corpus, --queries and --qrels")
    cpath = require_path(corpus if corpus is not None else root / "corpus.jsonl", "corpus")
    qpath = require_path(queries if queries is not None else root / "queries.jsonl", "queries")
    rpath = require_path(qrels if qrels is not None else root / "qrels" / f"{split}.tsv", "qrels")
    rj = once(rejects)
    return Source(
        name="beir",
        corpus=lambda: read_corpus(cpath, rj),
        queries=lambda: _examples(cpath, qpath, rpath, rj, "beir"),
        files=[str(cpath), str(qpath), str(rpath)],
        info={"split": split, "label_source": "human"},
    )
