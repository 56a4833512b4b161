"""FlagEmbedding (bge) fine-tuning data: read it, and write mined examples in it.

One JSON object a line::

    {"query": str, "pos": [str], "neg": [str], "pos_scores": [float], "neg_scores": [float],
     "prompt": str, "type": str}

``query`` and a non-empty ``pos`` are required; ``neg``, the score lists (one score per text),
``prompt`` and ``type`` are optional. Passages are bare strings, so they get
:func:`~data_prep.readers.common.stable_id` ids with an empty title; the query id is
:func:`text_query_id` of the query (or the row's ``id`` when present). Scores, prompt and type
travel in ``QueryExample.metadata`` so that :func:`write_flagembedding` writes them back unchanged.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Iterable, Iterator

from ..io import DataError, Rejects, atomic_write, iter_json_lines, parse_rows, require_path
from ..records import Passage, QueryExample
from . import Source, register_format
from .common import check_text, dedupe, id_str, once, stable_id, text_query_id

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


def _texts(path: PathLike, n: int, obj: dict, key: str, required: bool) -> list[str]:
    v = obj.get(key)
    if v is None:
        if required:
            raise DataError(path, n, f"missing field '{key}'", "missing-field")
        return []
    if not isinstance(v, list):
        raise DataError(path, n, f"field '{key}' must be a list of strings, got {type(v).__name__}", "invalid-type")
    if required and not v:
        raise DataError(path, n, f"field '{key}' is an empty list", "no-positive")
    for i, t in enumerate(v):
        if not isinstance(t, str):
            raise DataError(path, n, f"{key}[{i}] must be a string, got {type(t).__name__}", "invalid-type")
        if not t.strip():
            raise DataError(path, n, f"{key}[{i}]: empty passage", "empty-passage")
    return v


def _scores(path: PathLike, n: int, obj: dict, key: str, texts_key: str, count: int) -> list[float] | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise DataError(path, n, f"field '{key}' must be a list of numbers", "invalid-type")
    if len(v) != count:
        raise DataError(path, n, f"field '{key}' has {len(v)} scores but '{texts_key}' has {count} texts", "invalid-scores")
    return v


def _row(path: PathLike, n: int, obj: dict) -> QueryExample:
    if obj.get("query") is None:
        raise DataError(path, n, "missing field 'query'", "missing-field")
    query = check_text(path, n, obj["query"], "query")
    pos = _texts(path, n, obj, "pos", True)
    neg = _texts(path, n, obj, "neg", False)
    meta: dict[str, Any] = {}
    for key, texts_key, count in (("pos_scores", "pos", len(pos)), ("neg_scores", "neg", len(neg))):
        s = _scores(path, n, obj, key, texts_key, count)
        if s is not None:
            meta[key] = s
    for key in ("prompt", "type"):
        if obj.get(key) is not None:
            meta[key] = obj[key]
    qid = id_str(path, n, obj["id"], "id") if obj.get("id") is not None else text_query_id(query)
    return QueryExample(
        id=qid,
        query=query,
        positives=[Passage(stable_id("", t), t) for t in pos],
        negatives=[Passage(stable_id("", t), t) for t in neg],
        source="flagembedding",
        metadata=meta,
    )


def read_flagembedding(path: PathLike, rejects: Rejects | None = None) -> Iterator[QueryExample]:
    """Stream a FlagEmbedding JSONL file as query examples."""
    yield from parse_rows(path, iter_json_lines(path, rejects), lambda n, obj: _row(path, n, obj), rejects)


def _passage_scores(passages: list[Passage], from_meta: Any) -> list[float] | None:
    if isinstance(from_meta, list) and len(from_meta) == len(passages):
        return from_meta
    scores = [p.metadata.get("score") for p in passages]
    if passages and all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores):
        return scores  # type: ignore[return-value]
    return None


def flagembedding_row(ex: QueryExample, prompt: str | None = None, type: str | None = None) -> dict[str, Any]:
    """One example as a FlagEmbedding row (passages as ``title text`` when they have a title)."""
    row: dict[str, Any] = {
        "query": ex.query,
        "pos": [p.full_text(" ") for p in ex.positives],
        "neg": [p.full_text(" ") for p in ex.negatives],
    }
    for key, group in (("pos_scores", ex.positives), ("neg_scores", ex.negatives)):
        s = _passage_scores(group, ex.metadata.get(key))
        if s is not None:
            row[key] = s
    for key, given in (("prompt", prompt), ("type", type)):
        v = given if given is not None else ex.metadata.get(key)
        if v is not None:
            row[key] = v
    return row


def write_flagembedding(
    path: PathLike,
    examples: Iterable[QueryExample],
    prompt: str | None = None,
    type: str | None = None,
    require_negatives: bool = True,
) -> int:
    """Atomically write examples as FlagEmbedding JSONL; returns the number of rows written.

    Scores come from ``metadata["pos_scores"/"neg_scores"]`` or, failing that, each passage's
    ``metadata["score"]`` (omitted when neither is complete). ``prompt``/``type`` override the
    examples' own. Examples without a positive - or without a negative, when
    ``require_negatives`` (FlagEmbedding samples its group from them) - are skipped and counted
    in the log.
    """
    written = skipped = 0
    with atomic_write(path) as f:
        for ex in examples:
            if not ex.positives or (require_negatives and not ex.negatives):
                skipped += 1
                continue
            f.write(json.dumps(flagembedding_row(ex, prompt, type)) + "\n")
            written += 1
    if skipped:
        logger.warning("%s: skipped %d examples without positives%s", path, skipped, " or negatives" if require_negatives else "")
    return written


@register_format("flagembedding", "FlagEmbedding JSONL {query, pos, neg, pos_scores, neg_scores, prompt, type} (input=file)")
def open_flagembedding(input: PathLike, rejects: Rejects | None = None) -> Source:
    path = require_path(input)
    rj = once(rejects)
    return Source(
        name="flagembedding",
        corpus=lambda: dedupe(p for ex in read_flagembedding(path, rj) for p in (*ex.positives, *ex.negatives)),
        queries=lambda: read_flagembedding(path, rj),
        files=[str(path)],
        info={"label_source": "human"},
    )
