"""A client of ``python -m inference serve`` with the loaded models' methods, so code written for
``inference.load(DIR)`` runs against a server by changing one line::

    from inference.serving.client import RemoteEvaluator, RemoteExtractor
    evaluator = RemoteEvaluator("http://127.0.0.1:8080", api_key=os.environ.get("CRAG_API_KEY"))
    evaluator.grade("who wrote hamlet", chunks)          # the same Grade as Evaluator.grade
    RemoteExtractor("http://127.0.0.1:8080").extract("who wrote hamlet", passage, top_k=2)

Errors the server sends back raise :class:`ServerError` with its status and message.
"""

from __future__ import annotations

from typing import Any, Sequence

from data_prep.records import Passage

from ..answer import AnswerCheck
from ..evaluator import ChunkGrade, Grade
from ..extractor import KeySentence


class ServerError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _document(p: str | Passage) -> Any:
    if isinstance(p, Passage):
        return {"text": p.text, "title": p.title, "id": p.id}
    if isinstance(p, str):
        return p
    raise TypeError(f"a passage must be a str or Passage, got {type(p).__name__}")


class _Remote:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 60.0, client=None):
        import httpx

        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        r = self._client.post(path, json=body)
        if r.status_code != 200:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ServerError(r.status_code, str(detail))
        return r.json()

    def info(self) -> dict[str, Any]:
        r = self._client.get("/info")
        if r.status_code != 200:
            raise ServerError(r.status_code, r.text)
        return r.json()

    def close(self) -> None:
        self._client.close()


class RemoteEvaluator(_Remote):
    """:meth:`grade` and :meth:`score` of an :class:`~inference.evaluator.Evaluator`, over HTTP."""

    task = "evaluator"

    def grade(self, query: str, chunks: Sequence[str | Passage], theta_high: float | None = None,
              theta_low: float | None = None, two_tier: bool = False) -> Grade:
        if isinstance(chunks, (str, Passage)):
            raise TypeError("chunks must be a list of passages (got a single one)")
        chunks = list(chunks)
        body = {"query": query, "documents": [_document(c) for c in chunks], "two_tier": two_tier}
        if theta_high is not None:
            body["theta_high"] = theta_high
        if theta_low is not None:
            body["theta_low"] = theta_low
        out = self._post("/v1/grade", body)
        graded = [ChunkGrade(d["index"], d["score"], d["action"], chunks[d["index"]].id
                             if isinstance(chunks[d["index"]], Passage) else None) for d in out["documents"]]
        return Grade(query, out["action"], graded, out["theta_high"], out["theta_low"])

    def score(self, pairs: Sequence[tuple[str, str | Passage]]) -> list[float]:
        """Calibrated probabilities, one per pair, in input order (one request per distinct query)."""
        pairs = list(pairs)
        by_query: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_query.setdefault(q, []).append(i)
        out = [0.0] * len(pairs)
        for q, idx in by_query.items():
            res = self._post("/v1/rerank", {"query": q, "documents": [_document(pairs[i][1]) for i in idx]})
            for r in res["results"]:
                out[idx[r["index"]]] = r["relevance_score"]
        return out


class RemoteExtractor(_Remote):
    """:meth:`extract` and :meth:`extract_many` of an :class:`~inference.extractor.Extractor`."""

    task = "extractor"

    def extract_many(self, items: Sequence[tuple[str, str | Passage]], top_k: int | None = None,
                     min_score: float | None = None) -> list[list[KeySentence]]:
        by_query: dict[str, list[int]] = {}
        items = list(items)
        for i, (q, _) in enumerate(items):
            by_query.setdefault(q, []).append(i)
        out: list[list[KeySentence]] = [[] for _ in items]
        for q, idx in by_query.items():
            body: dict[str, Any] = {"query": q, "documents": [_document(items[i][1]) for i in idx]}
            if top_k is not None:
                body["top_k"] = top_k
            if min_score is not None:
                body["min_score"] = min_score
            for r in self._post("/v1/extract", body)["results"]:
                out[idx[r["index"]]] = [KeySentence(**s) for s in r["sentences"]]
        return out

    def extract(self, query: str, passage: str | Passage, top_k: int | None = None,
                min_score: float | None = None) -> list[KeySentence]:
        return self.extract_many([(query, passage)], top_k, min_score)[0]


class RemoteAnswerClassifier(_Remote):
    """:meth:`has_answer` of an :class:`~inference.answer.AnswerClassifier`."""

    task = "answer_classifier"

    def has_answer(self, query: str, passages: Sequence[str | Passage], threshold: float | None = None) -> list[AnswerCheck]:
        passages = list(passages)
        body: dict[str, Any] = {"query": query, "documents": [_document(p) for p in passages]}
        if threshold is not None:
            body["threshold"] = threshold
        out = self._post("/v1/has_answer", body)
        return [AnswerCheck(r["index"], r["score"], r["has_answer"],
                            passages[r["index"]].id if isinstance(passages[r["index"]], Passage) else None)
                for r in out["results"]]
