"""Plain JSONL inputs for scoring and evaluation, and the sniffing of an input's format.

* ``simple`` - one ``{"query": str, "passage": str | {"title", "text", "id"}}`` object a line, with
  optional ``label`` (0..1), ``query_id`` and ``passage_id``: :func:`read_simple` yields
  :class:`PairRow` (the label may be missing: scoring needs none).
* ``sentences`` - key-sentence evaluation rows ``{"query", "passage", "gold_sentences": [text, ...]}``;
  or ``{"query", "passage"?, "sentences": [text, ...], "gold": [index, ...]}`` to score the given
  sentences instead of splitting a passage: :func:`read_sentence_rows` yields :class:`SentenceRow`.
  A gold sentence that is not in its passage is a ``file:line`` error.
* :func:`detect_format` tells ``pairs`` (our LabelledPair JSONL), ``simple``, ``sentences`` and
  ``crag-evaluator`` apart from the first line of a file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..io import DataError, Rejects, iter_json_lines, iter_lines, parse_rows
from ..records import Passage
from .common import check_text, id_str, stable_id, text_query_id

SIMPLE = "simple"
SENTENCES = "sentences"


@dataclass
class PairRow:
    """One (query, passage) to score, whatever the input format; ``label`` may be unknown. The
    passage is ``""`` only for an empty passage kept on purpose (a CRAG evaluator line read with
    ``empty_passages="keep"``, :func:`data_prep.readers.rows.open_pair_rows`)."""

    query: str
    passage: str | Passage
    query_id: str
    passage_id: str | None
    label: float | None


@dataclass
class SentenceRow:
    """One passage (or list of sentences) with its gold key sentences."""

    line: int
    query: str
    query_id: str
    passage: str | None  # None when only ``sentences`` were given
    sentences: list[str] | None  # given sentences (scored as they are) or None (split the passage)
    gold: list[int] = field(default_factory=list)  # with ``sentences``: indices into them
    gold_spans: list[tuple[int, int]] = field(default_factory=list)  # with a passage: character spans in it


def _label(path: Path, n: int, obj: dict) -> float | None:
    label = obj.get("label")
    if label is None:
        return None
    if isinstance(label, bool) or not isinstance(label, (int, float)) or not 0.0 <= float(label) <= 1.0:
        raise DataError(path, n, f"label {label!r} is not a number in [0, 1]", "invalid-label")
    return float(label)


def _simple_row(path: Path, n: int, obj: dict) -> PairRow:
    if not isinstance(obj, dict):
        raise DataError(path, n, f"expected a JSON object, got {type(obj).__name__}", "invalid-type")
    for key in ("query", "passage"):
        if obj.get(key) is None:
            raise DataError(path, n, f"missing field '{key}'", "missing-field")
    query = check_text(path, n, obj["query"], "query")
    p = obj["passage"]
    if isinstance(p, dict):
        if p.get("text") is None:
            raise DataError(path, n, "missing field 'passage.text'", "missing-field")
        text = check_text(path, n, p["text"], "passage")
        title = p.get("title") or ""
        if not isinstance(title, str):
            raise DataError(path, n, f"passage.title must be a string, got {type(title).__name__}", "invalid-type")
        pid = id_str(path, n, p["id"], "passage.id") if p.get("id") is not None else stable_id(title, text)
        passage: str | Passage = Passage(pid, text, title)
    else:
        passage = check_text(path, n, p, "passage")
        pid = id_str(path, n, obj["passage_id"], "passage_id") if obj.get("passage_id") is not None else None
    qid = id_str(path, n, obj["query_id"], "query_id") if obj.get("query_id") is not None else text_query_id(query)
    return PairRow(query, passage, qid, pid if isinstance(passage, str) else passage.id, _label(path, n, obj))


def read_simple(path: str | Path, rejects: Rejects | None = None) -> Iterator[PairRow]:
    path = Path(path)
    yield from parse_rows(path, iter_json_lines(path, rejects), lambda n, obj: _simple_row(path, n, obj), rejects)


def find_span(passage: str, sentence: str, start: int = 0) -> tuple[int, int] | None:
    """Where ``sentence`` occurs in ``passage``: exactly, else ignoring differences in whitespace."""
    i = passage.find(sentence, start)
    if i < 0 and start:
        i = passage.find(sentence)
    if i >= 0:
        return i, i + len(sentence)
    words = sentence.split()
    if not words:
        return None
    import re

    m = re.search(r"\s+".join(re.escape(w) for w in words), passage)
    return (m.start(), m.end()) if m else None


def _str_list(path: Path, n: int, obj: dict, key: str) -> list[str]:
    v = obj[key]
    if not isinstance(v, list) or not v:
        raise DataError(path, n, f"'{key}' must be a non-empty list of strings", "invalid-type")
    out = []
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise DataError(path, n, f"{key}[{i}] must be a string, got {type(s).__name__}", "invalid-type")
        if not s.strip():
            raise DataError(path, n, f"{key}[{i}] is empty", f"empty-{key}")
        out.append(s)
    return out


def _sentence_row(path: Path, n: int, obj: dict) -> SentenceRow:
    if not isinstance(obj, dict):
        raise DataError(path, n, f"expected a JSON object, got {type(obj).__name__}", "invalid-type")
    if obj.get("query") is None:
        raise DataError(path, n, "missing field 'query'", "missing-field")
    query = check_text(path, n, obj["query"], "query")
    qid = id_str(path, n, obj["query_id"], "query_id") if obj.get("query_id") is not None else text_query_id(query)
    if obj.get("sentences") is not None:
        sentences = _str_list(path, n, obj, "sentences")
        gold = obj.get("gold")
        if not isinstance(gold, list) or not gold or not all(isinstance(g, int) and not isinstance(g, bool) for g in gold):
            raise DataError(path, n, "'gold' must be a non-empty list of sentence indices (with 'sentences')", "missing-field")
        bad = [g for g in gold if not 0 <= g < len(sentences)]
        if bad:
            raise DataError(path, n, f"gold index {bad[0]} is outside 0..{len(sentences) - 1} ({len(sentences)} sentences)",
                            "invalid-gold")
        passage = check_text(path, n, obj["passage"], "passage") if obj.get("passage") is not None else None
        return SentenceRow(n, query, qid, passage, sentences, sorted(set(gold)))
    if obj.get("passage") is None:
        raise DataError(path, n, "missing field 'passage' (or 'sentences' with 'gold')", "missing-field")
    passage = check_text(path, n, obj["passage"], "passage")
    if obj.get("gold_sentences") is None:
        raise DataError(path, n, "missing field 'gold_sentences'", "missing-field")
    golds = _str_list(path, n, obj, "gold_sentences")
    spans = []
    for i, g in enumerate(golds):
        span = find_span(passage, g.strip())
        if span is None:
            shown = g if len(g) <= 60 else g[:57] + "..."
            raise DataError(path, n, f"gold sentence {i} ({shown!r}) is not in the passage", "gold-not-found")
        spans.append(span)
    return SentenceRow(n, query, qid, passage, None, [], spans)


def read_sentence_rows(path: str | Path, rejects: Rejects | None = None) -> Iterator[SentenceRow]:
    path = Path(path)
    yield from parse_rows(path, iter_json_lines(path, rejects), lambda n, obj: _sentence_row(path, n, obj), rejects)


def detect_format(path: str | Path) -> str:
    """``pairs``, ``simple``, ``sentences`` or ``crag-evaluator`` from the first non-blank line."""
    path = Path(path)
    for _, text, _ in iter_lines(path, Rejects(skip_bad=True)):
        if text.lstrip().startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                break
            if isinstance(obj, dict) and isinstance(obj.get("passage"), dict) and "label" in obj and "query_id" in obj:
                return "pairs"
            if isinstance(obj, dict) and "query" in obj and ("gold_sentences" in obj or "sentences" in obj):
                return SENTENCES
            if isinstance(obj, dict) and "query" in obj and "passage" in obj:
                return SIMPLE
        elif "\t" in text and (" [SEP] " in text or text.split("\t")[0].rstrip().endswith(" [SEP]")):
            return "crag-evaluator"  # the second form: a first line with an empty passage, stripped
        break
    raise DataError(path, None, "cannot tell the input format from the first line; pass --format "
                    "(pairs, simple, sentences, crag-evaluator, or another reader format)", "unknown-format")
