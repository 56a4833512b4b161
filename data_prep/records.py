"""Typed records shared by every stage, and their one JSONL schema (see docs/data.md).

Three records cover the package's data:

* :class:`Passage` - a retrievable unit (``id``, ``title``, ``text``, ``metadata``).
* :class:`QueryExample` - a query with its positive and negative passages and gold answers,
  the output of readers and of hard-negative mining.
* :class:`LabelledPair` - one (query, passage, label) pair with the label's source, the input
  of the evaluator, answer-existence and extractor trainers.

Every record round-trips through ``to_dict``/``from_dict`` (JSONL) and through
``datasets.Dataset`` (:func:`to_dataset` / :func:`from_dataset`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Sequence

SCHEMA_VERSION = 1

#: Where a label came from. ``human``: annotated qrels or gold passages; ``answer-match``: the
#: passage contains a gold answer string; ``title-match``: the passage's title equals the
#: question's entity (CRAG's rule for PopQA); ``llm``: an LLM judge; ``feedback``: user signals;
#: ``distilled``: the calibrated score of an exported model (``python -m training.distill``).
LABEL_SOURCES = ("human", "answer-match", "title-match", "llm", "feedback", "distilled")


class RecordError(ValueError):
    """A record that does not satisfy the schema (the message says which field and why)."""


def _req_str(d: dict, key: str, rec: str, allow_empty: bool = False) -> str:
    if key not in d:
        raise RecordError(f"{rec}: missing field '{key}'")
    v = d[key]
    if isinstance(v, (int, float)) and not isinstance(v, bool) and key == "id":
        v = str(v)
    if not isinstance(v, str):
        raise RecordError(f"{rec}: field '{key}' must be a string, got {type(v).__name__}")
    if not allow_empty and not v.strip():
        raise RecordError(f"{rec}: field '{key}' is empty")
    return v


def _opt_dict(d: dict, key: str, rec: str) -> dict:
    v = d.get(key) or {}
    if isinstance(v, str):  # datasets round-trip stores metadata as a JSON string
        v = json.loads(v) if v else {}
    if not isinstance(v, dict):
        raise RecordError(f"{rec}: field '{key}' must be an object, got {type(v).__name__}")
    return v


@dataclass
class Passage:
    """A retrievable unit of text."""

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise RecordError("passage: field 'id' is empty")
        if not isinstance(self.text, str) or not self.text.strip():
            raise RecordError(f"passage {self.id!r}: field 'text' is empty")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "metadata": self.metadata}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Passage":
        if not isinstance(d, dict):
            raise RecordError(f"passage: expected an object, got {type(d).__name__}")
        return cls(
            id=_req_str(d, "id", "passage"),
            text=_req_str(d, "text", "passage"),
            title=d.get("title") or "",
            metadata=_opt_dict(d, "metadata", "passage"),
        )

    def full_text(self, sep: str = "\n") -> str:
        """Title and text joined the way models see them (the text alone when there is no title)."""
        return f"{self.title}{sep}{self.text}" if self.title else self.text


@dataclass
class QueryExample:
    """A query with positives, negatives and gold answers."""

    id: str
    query: str
    positives: list[Passage] = field(default_factory=list)
    negatives: list[Passage] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise RecordError("query example: field 'id' is empty")
        if not isinstance(self.query, str) or not self.query.strip():
            raise RecordError(f"query example {self.id!r}: field 'query' is empty")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "positives": [p.to_dict() for p in self.positives],
            "negatives": [p.to_dict() for p in self.negatives],
            "answers": list(self.answers),
            "source": self.source,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "QueryExample":
        if not isinstance(d, dict):
            raise RecordError(f"query example: expected an object, got {type(d).__name__}")
        rec = "query example"
        out = []
        for key in ("positives", "negatives"):
            v = d.get(key) or []
            if not isinstance(v, list):
                raise RecordError(f"{rec}: field '{key}' must be a list")
            out.append([Passage.from_dict(p) for p in v])
        answers = d.get("answers") or []
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise RecordError(f"{rec}: field 'answers' must be a list of strings")
        return cls(
            id=_req_str(d, "id", rec),
            query=_req_str(d, "query", rec),
            positives=out[0],
            negatives=out[1],
            answers=answers,
            source=d.get("source") or "",
            metadata=_opt_dict(d, "metadata", rec),
        )


@dataclass
class LabelledPair:
    """One (query, passage) pair with a label in [0, 1] and where the label came from."""

    query_id: str
    query: str
    passage: Passage
    label: float
    label_source: str = "human"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise RecordError(f"labelled pair {self.query_id!r}: field 'query' is empty")
        try:
            self.label = float(self.label)
        except (TypeError, ValueError):
            raise RecordError(f"labelled pair {self.query_id!r}: label {self.label!r} is not a number") from None
        if math.isnan(self.label) or not 0.0 <= self.label <= 1.0:
            raise RecordError(f"labelled pair {self.query_id!r}: label {self.label} is outside [0, 1]")
        if self.label_source not in LABEL_SOURCES:
            raise RecordError(
                f"labelled pair {self.query_id!r}: label_source {self.label_source!r} is not one of {', '.join(LABEL_SOURCES)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "query": self.query,
            "passage": self.passage.to_dict(),
            "label": self.label,
            "label_source": self.label_source,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LabelledPair":
        if not isinstance(d, dict):
            raise RecordError(f"labelled pair: expected an object, got {type(d).__name__}")
        rec = "labelled pair"
        if "label" not in d:
            raise RecordError(f"{rec}: missing field 'label'")
        if "passage" not in d:
            raise RecordError(f"{rec}: missing field 'passage'")
        return cls(
            query_id=_req_str(d, "query_id", rec),
            query=_req_str(d, "query", rec),
            passage=Passage.from_dict(d["passage"]),
            label=d["label"],
            label_source=d.get("label_source") or "human",
            metadata=_opt_dict(d, "metadata", rec),
        )


RECORD_TYPES = {"passage": Passage, "query": QueryExample, "pair": LabelledPair}


def _flatten(d: dict[str, Any]) -> dict[str, Any]:
    """Arrow needs one schema for every row: free-form metadata travels as a JSON string."""
    out = {}
    for k, v in d.items():
        if k == "metadata":
            out[k] = json.dumps(v, ensure_ascii=False, sort_keys=True)
        elif isinstance(v, dict):
            out[k] = _flatten(v)
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out[k] = [_flatten(x) for x in v]
        else:
            out[k] = v
    return out


def to_dataset(records: Sequence[Passage | QueryExample | LabelledPair]):
    """Records as a ``datasets.Dataset`` (metadata kept as a JSON string column)."""
    import datasets

    return datasets.Dataset.from_list([_flatten(r.to_dict()) for r in records])


def from_dataset(ds, record_type: type) -> list:
    """The inverse of :func:`to_dataset`."""
    return [record_type.from_dict(_unflatten(row)) for row in ds]


def _unflatten(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if k == "metadata" and isinstance(v, str):
            out[k] = json.loads(v) if v else {}
        elif isinstance(v, dict):
            out[k] = _unflatten(v)
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out[k] = [_unflatten(x) for x in v]
        else:
            out[k] = v
    return out


def iter_dicts(records: Iterable[Passage | QueryExample | LabelledPair]) -> Iterator[dict[str, Any]]:
    for r in records:
        yield r.to_dict()
