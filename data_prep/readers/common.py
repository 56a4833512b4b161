"""Helpers shared by the format readers.

* :func:`stable_id` / :func:`text_query_id` - content-derived ids for formats that carry none
  (``"h" + sha1(title + "\\n" + text)[:16]`` for passages, ``"q" + sha1(query)[:16]`` for queries).
  A derived id names the content, so the same text read twice gets the same id.
* :func:`fix_mojibake` - undo UTF-8 text that was decoded as Latin-1/cp1252 (``donâ€™t``).
* :func:`ctx_passage` - a ``{title, text, passage_id|psg_id|id}`` context as a :class:`Passage`.
* :func:`join_qrels` - qrels + queries + corpus into :class:`QueryExample` objects (MS MARCO, BEIR).
* :func:`check_passages` - the rule every reader applies to the examples it makes: an example may
  lack positives (an unanswerable question, a query judged only non-relevant), but one with no
  positive *and* no negative passage carries nothing and is a bad row (kind ``no-passages``).
* :class:`OnceRejects` - a :class:`Rejects` view that records each bad row once, however many
  times a :class:`~data_prep.readers.Source` re-reads the file.

The files themselves are parsed in :mod:`data_prep.readers.files` (TSV, JSON arrays, JSONL,
parquet); the format and pair registries are in :mod:`data_prep.readers`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..io import STRICT, DataError, Rejects
from ..records import Passage, QueryExample

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

# --------------------------------------------------------------------------------------------
# ids and text


def stable_id(title: str, text: str) -> str:
    """A passage id derived from its content: ``"h" + sha1(title + "\\n" + text)[:16]``."""
    return "h" + hashlib.sha1(f"{title}\n{text}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def text_query_id(query: str) -> str:
    """A query id derived from its text: ``"q" + sha1(query)[:16]``."""
    return "q" + hashlib.sha1(query.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# cp1252 maps bytes 0x80-0x9f to these characters; Latin-1 maps them to C1 controls.
_CP1252_HIGH = "".join(
    bytes([b]).decode("cp1252") for b in range(0x80, 0xA0) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
)
_CONT = "[\u0080-\u00bf" + re.escape(_CP1252_HIGH) + "]"
# a UTF-8 lead byte (as Latin-1/cp1252 text) followed by the right number of continuation bytes
_MOJIBAKE = re.compile(
    "[\u00c2-\u00df]" + _CONT + "|[\u00e0-\u00ef]" + _CONT + "{2}|[\u00f0-\u00f4]" + _CONT + "{3}"
)


def _to_byte(ch: str) -> int:
    o = ord(ch)
    if o < 0x100:
        return o
    return ch.encode("cp1252")[0]


def _fix_match(m: re.Match) -> str:
    s = m.group(0)
    try:
        return bytes(_to_byte(c) for c in s).decode("utf-8")
    except UnicodeDecodeError:
        return s


def fix_mojibake(text: str) -> str:
    """Undo UTF-8 that was decoded as Latin-1 or cp1252: ``donâ€™t`` -> ``don’t``, ``1Â½`` -> ``1½``.

    Only byte sequences that form valid UTF-8 are changed; everything else is left as it is.
    """
    if not text.isascii():
        return _MOJIBAKE.sub(_fix_match, text)
    return text


def maybe_fix(text: str, fix: bool) -> str:
    return fix_mojibake(text) if fix else text


def check_text(path: PathLike, line: int, value: Any, what: str, where: str = "") -> str:
    """``value`` as a non-empty string, else a :class:`DataError` (``[where: ]empty <what>``, kind
    ``empty-<last word of what>``; or ``<what> must be a string``, kind ``invalid-type``)."""
    prefix = f"{where}: " if where else ""
    if not isinstance(value, str):
        raise DataError(path, line, f"{prefix}{what} must be a string, got {type(value).__name__}", "invalid-type")
    if not value.strip():
        raise DataError(path, line, f"{prefix}empty {what}", "empty-" + what.split()[-1])
    return value


def str_list(path: PathLike, line: int, value: Any, field: str, allow_json_string: bool = False) -> list[str]:
    """A list of strings (PopQA stores some as a JSON string of a list: ``'["a", "b"]'``)."""
    if allow_json_string and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]
    if value is None:
        return []
    if not isinstance(value, list):
        raise DataError(path, line, f"field '{field}' must be a list of strings, got {type(value).__name__}", "invalid-type")
    out = []
    for v in value:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str):
            raise DataError(path, line, f"field '{field}' must be a list of strings", "invalid-type")
        out.append(v)
    return out


def id_str(path: PathLike, line: int, value: Any, field: str) -> str:
    """An id field as a non-empty string (integers are accepted and converted)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, line, f"field '{field}' must be a string or integer id", "invalid-type")
    s = str(value).strip()
    if not s:
        raise DataError(path, line, f"empty {field}", "empty-id")
    return s


class SeenIds:
    """Duplicate-id check for files whose ids must be unique.

    Decimal ids without leading zeros (MS MARCO's 8.8M passage ids, BEIR's numeric ids) are kept
    as bits of one growing bitmap, a bit per id up to the largest one (1.1 MB for MS MARCO, against
    ~700 MB as a set of strings); any other id goes to a set.
    """

    MAX_BIT = 1 << 34  # larger numeric ids go to the set (the bitmap stays under 2 GiB)

    def __init__(self, what: str):
        self.what = what
        self._seen: set[str] = set()
        self._bits = bytearray()

    def _bit(self, id_: str) -> int:
        """The id's bit, or -1 when it is not a canonical decimal number below MAX_BIT."""
        if id_.isascii() and id_.isdigit() and (len(id_) == 1 or id_[0] != "0") and len(id_) <= 11:
            v = int(id_)
            if v < self.MAX_BIT:
                return v
        return -1

    def check(self, path: PathLike, line: int, id_: str) -> None:
        v = self._bit(id_)
        if v < 0:
            if id_ in self._seen:
                raise DataError(path, line, f"duplicate {self.what} id {id_!r}", "duplicate-id")
            self._seen.add(id_)
            return
        byte, mask = v >> 3, 1 << (v & 7)
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits) // 2)))
        if self._bits[byte] & mask:
            raise DataError(path, line, f"duplicate {self.what} id {id_!r}", "duplicate-id")
        self._bits[byte] |= mask

    def __contains__(self, id_: str) -> bool:
        v = self._bit(id_)
        if v < 0:
            return id_ in self._seen
        byte = v >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (v & 7)))


def dedupe(passages: Iterable[Passage]) -> Iterator[Passage]:
    """Passages with ids seen before dropped (keeps a set of ids, not the passages)."""
    seen: set[str] = set()
    for p in passages:
        if p.id not in seen:
            seen.add(p.id)
            yield p


def group_consecutive(examples: Iterable[QueryExample]) -> Iterator[QueryExample]:
    """Merge runs of examples with the same id (positives/negatives appended, duplicates dropped)."""
    cur: QueryExample | None = None
    for ex in examples:
        if cur is not None and ex.id == cur.id:
            for attr in ("positives", "negatives"):
                have = {p.id for p in getattr(cur, attr)}
                getattr(cur, attr).extend(p for p in getattr(ex, attr) if p.id not in have)
            for a in ex.answers:
                if a not in cur.answers:
                    cur.answers.append(a)
            continue
        if cur is not None:
            yield cur
        cur = ex
    if cur is not None:
        yield cur


# --------------------------------------------------------------------------------------------
# rejects


class OnceRejects(Rejects):
    """Delegates to ``inner`` but passes each ``(file, line, kind)`` on only once.

    A :class:`~data_prep.readers.Source` streams its files again on every ``corpus()`` /
    ``queries()`` call; this keeps one bad row from being counted and written several times.
    """

    def __init__(self, inner: Rejects):
        super().__init__(skip_bad=inner.skip_bad, out_dir=inner.out_dir)
        self.inner = inner
        self.counts = inner.counts
        self._done: set[tuple[str | None, int | None, str]] = set()

    def reject(self, error: DataError, raw: bytes | str | None = None) -> None:
        key = (error.path, error.line, error.kind)
        if key in self._done:
            if not self.skip_bad:
                raise error
            return
        self._done.add(key)
        self.inner.reject(error, raw)

    def close(self) -> None:
        self.inner.close()


def once(rejects: Rejects | None) -> Rejects | None:
    """``rejects`` wrapped in :class:`OnceRejects` when it skips bad rows (strict needs no wrap)."""
    if rejects is None or not rejects.skip_bad or isinstance(rejects, OnceRejects):
        return rejects
    return OnceRejects(rejects)


def reject_or_raise(rejects: Rejects | None, error: DataError, raw: bytes | str | None) -> None:
    (rejects or STRICT).reject(error, raw)


# --------------------------------------------------------------------------------------------
# contexts (DPR, NQ-open, PopQA)

CTX_ID_FIELDS = ("passage_id", "psg_id", "id", "docid")


def ctx_passage(path: PathLike, line: int, ctx: Any, where: str, metadata: dict | None = None) -> Passage:
    """A ``{title, text, [passage_id|psg_id|id|docid]}`` context as a :class:`Passage`.

    The id is the context's own id when it has one, else :func:`stable_id` of title and text.
    """
    if not isinstance(ctx, dict):
        raise DataError(path, line, f"{where}: expected an object, got {type(ctx).__name__}", "invalid-type")
    if ctx.get("text") is None:
        raise DataError(path, line, f"missing field '{where}.text'", "missing-field")
    text = ctx["text"]
    if not isinstance(text, str):
        raise DataError(path, line, f"{where}.text must be a string, got {type(text).__name__}", "invalid-type")
    if not text.strip():
        raise DataError(path, line, f"{where}: empty passage", "empty-passage")
    title = ctx.get("title") or ""
    if not isinstance(title, str):
        raise DataError(path, line, f"{where}.title must be a string, got {type(title).__name__}", "invalid-type")
    pid = None
    for key in CTX_ID_FIELDS:
        v = ctx.get(key)
        if v is not None and not isinstance(v, bool) and str(v).strip():
            pid = str(v).strip()
            break
    return Passage(id=pid or stable_id(title, text), text=text, title=title, metadata=metadata or {})


def check_passages(path: PathLike, line: int | None, ex: QueryExample, why: str = "") -> QueryExample:
    """``ex`` unchanged when it has a positive or a negative passage; else a :class:`DataError`
    ``query <id> has no positive and no negative passage[ (why)]``, kind ``no-passages``."""
    if not ex.positives and not ex.negatives:
        raise DataError(path, line, f"query {ex.id!r} has no positive and no negative passage" + (f" ({why})" if why else ""),
                        "no-passages")
    return ex


def ctx_list(path: PathLike, line: int, obj: dict, field: str, required: bool = False) -> list:
    v = obj.get(field)
    if v is None:
        if required:
            raise DataError(path, line, f"missing field '{field}'", "missing-field")
        return []
    if not isinstance(v, list):
        raise DataError(path, line, f"field '{field}' must be a list, got {type(v).__name__}", "invalid-type")
    return v


# --------------------------------------------------------------------------------------------
# qrels joins (MS MARCO, BEIR)


@dataclass
class Qrel:
    qid: str
    pid: str
    score: int
    line: int
    raw: bytes


def parse_score(path: PathLike, line: int, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        try:
            f = float(value)
        except ValueError:
            raise DataError(path, line, f"relevance {value!r} is not a number", "invalid-score") from None
        if not f.is_integer():
            raise DataError(path, line, f"relevance {value!r} is not an integer", "invalid-score") from None
        return int(f)


def join_qrels(
    qrels: list[Qrel],
    qrels_path: PathLike,
    query_texts: dict[str, str],
    queries_path: PathLike,
    passages: dict[str, Passage],
    corpus_path: PathLike,
    rejects: Rejects | None,
    source: str,
) -> Iterator[QueryExample]:
    """One :class:`QueryExample` per judged query, in qrels order: score > 0 positive, score <= 0 a
    judged negative. A qrels row naming an unknown query or passage is a bad row of the qrels file."""
    rejects = rejects or STRICT
    groups: dict[str, list[Qrel]] = {}
    seen: set[tuple[str, str]] = set()
    for q in qrels:
        if q.qid not in query_texts:
            rejects.reject(
                DataError(qrels_path, q.line, f"query id {q.qid!r} is not in {Path(queries_path).name}", "unknown-query"), q.raw
            )
            continue
        if q.pid not in passages:
            rejects.reject(
                DataError(qrels_path, q.line, f"passage id {q.pid!r} is not in {Path(corpus_path).name}", "unknown-passage"),
                q.raw,
            )
            continue
        if (q.qid, q.pid) in seen:
            rejects.reject(
                DataError(qrels_path, q.line, f"duplicate qrels entry for query {q.qid!r} and passage {q.pid!r}", "duplicate-id"),
                q.raw,
            )
            continue
        seen.add((q.qid, q.pid))
        groups.setdefault(q.qid, []).append(q)
    for qid, rows in groups.items():
        yield QueryExample(
            id=qid,
            query=query_texts[qid],
            positives=[passages[r.pid] for r in rows if r.score > 0],
            negatives=[passages[r.pid] for r in rows if r.score <= 0],
            source=source,
            metadata={"relevance": {r.pid: r.score for r in rows}},
        )
