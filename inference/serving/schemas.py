"""The request and response bodies of :mod:`inference.serving.app` (pydantic, so FastAPI validates
them, answers 422 naming the field, and documents them on ``/docs``).

Unknown request fields are ignored, as the APIs we mirror do (Cohere's client sends
``max_chunks_per_doc``, TEI's ``truncation_direction``): a client written for those servers works
unchanged.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from data_prep.records import Passage


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Document(_Request):
    """A document as an object: its text, and optionally a title (shown to the model through the
    export's passage format, as in training) and an id (echoed by ``/v1/grade``)."""

    text: str
    title: str = ""
    id: Optional[str] = None


DocumentIn = Union[str, Document]


def as_passage(doc: DocumentIn, i: int) -> "str | Passage":
    """What the scorers take: a string as it is, an object with a title as a :class:`Passage`."""
    if isinstance(doc, str) or not doc.title:
        return doc if isinstance(doc, str) else doc.text
    if not doc.text.strip():
        return doc.text  # the scorer's check names documents[i]
    return Passage(id=doc.id or f"documents[{i}]", text=doc.text, title=doc.title)


def doc_id(doc: DocumentIn) -> Optional[str]:
    return None if isinstance(doc, str) else doc.id


class RerankRequest(_Request):
    """``/v1/rerank``: the Cohere / Jina / Infinity request."""

    model: Optional[str] = None
    query: str
    documents: list[DocumentIn]
    top_n: Optional[int] = Field(None, ge=1)
    return_documents: bool = False


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: Optional[RerankDocument] = None


class RerankResponse(BaseModel):
    id: str
    results: list[RerankResult]
    model: str
    usage: dict[str, int]
    meta: dict[str, Any]


class TeiRerankRequest(_Request):
    """``/rerank``: text-embeddings-inference's request. ``truncate`` is accepted and needs no
    action: the model always truncates the passage (never the query) to its length, as in training."""

    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = False


class TeiRank(BaseModel):
    index: int
    score: float
    text: Optional[str] = None


class GradeRequest(_Request):
    query: str
    documents: list[DocumentIn]
    theta_high: Optional[float] = None
    theta_low: Optional[float] = None
    two_tier: bool = False


class GradedDocument(BaseModel):
    index: int
    score: float
    action: Literal["Correct", "Ambiguous", "Incorrect"]
    id: Optional[str] = None


class GradeResponse(BaseModel):
    query: str
    action: Literal["Correct", "Ambiguous", "Incorrect"]
    theta_high: float
    theta_low: Optional[float]
    documents: list[GradedDocument]
    model: str


class HasAnswerRequest(_Request):
    query: str
    documents: list[DocumentIn]
    threshold: Optional[float] = Field(None, ge=0.0, le=1.0)


class AnswerResult(BaseModel):
    index: int
    score: float
    has_answer: bool


class HasAnswerResponse(BaseModel):
    threshold: float
    results: list[AnswerResult]
    model: str


class ExtractRequest(_Request):
    query: str
    documents: list[DocumentIn]
    top_k: Optional[int] = Field(None, ge=1)
    min_score: Optional[float] = Field(None, ge=0.0, le=1.0)


class SentenceOut(BaseModel):
    index: int
    text: str
    start: int
    end: int
    score: float


class ExtractResult(BaseModel):
    index: int
    sentences: list[SentenceOut]


class ExtractResponse(BaseModel):
    top_k: int
    min_score: Optional[float]
    results: list[ExtractResult]
    model: str
