"""The HTTP server of ``python -m inference serve``: the exports behind the reranking APIs RAG stacks call.

Endpoints (FastAPI; the OpenAPI page is at ``/docs``):

* ``POST /v1/rerank`` (and ``/v2/rerank``): the Cohere / Jina / Infinity shape. ``relevance_score`` is
  the export's calibrated probability; results best first, ``top_n`` of them.
* ``POST /rerank``: Hugging Face text-embeddings-inference's shape; ``raw_scores: true`` gives the
  export's logit ``z`` (model logit plus the lexical term) instead of the probability.
* ``POST /v1/grade``: CRAG's decision (query action, and per document score and action) with the
  manifest's thresholds unless the request overrides them.
* ``POST /v1/extract`` and ``POST /v1/has_answer``: with ``--extractor`` / ``--answer-classifier``.
* ``GET /health`` (200 once the models are loaded, 503 while stopping), ``GET /info`` (each model's
  task, head, thresholds, weights sha256 and package version), ``GET /metrics`` (Prometheus text).

Every request's pairs go through a :class:`~inference.serving.batching.DynamicBatcher`, so
concurrent requests share forward passes; the numbers are those of ``inference.load(DIR)``.

Bad input: malformed JSON or a missing or mistyped field is 422 naming the field (FastAPI's
``detail[].loc``); an empty query or an empty document is 422 naming the document; more documents or
characters than the limits is 413; a full queue is 503 with ``Retry-After``. An empty document list
is an empty result. With an API key, every endpoint but ``/health`` needs ``Authorization: Bearer
KEY`` (or ``X-API-Key: KEY``), compared in constant time; the key is never logged or returned.
"""


import hmac
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

from data_prep.records import Passage

from ..decisions import action_of, query_action
from .batching import BatcherStopped, DynamicBatcher, QueueFull

logger = logging.getLogger(__name__)


@dataclass
class ServeSettings:
    """What ``python -m inference serve`` was asked for (travels to ``--workers`` processes as JSON)."""

    model: str
    extractor: str | None = None
    answer_classifier: str | None = None
    device: str | None = None
    dtype: str | None = None
    batch_tokens: int | None = None
    trust_pickle: bool = False
    api_key_env: str | None = None
    max_documents: int = 1000
    max_chars: int = 2_000_000
    max_batch_items: int = 512
    max_wait_ms: float = 2.0
    max_queue_items: int = 8192
    retry_after_s: int = 1
    model_name: str | None = None  # the name /v1/rerank answers with (default: the export's)
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ServeSettings":
        return cls(**d)


class RequestError(Exception):
    """A request the server refuses: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


# -- the models behind the endpoints ----------------------------------------------------------------
class ServedModel:
    """A loaded export and its batcher: pairs in, ``(probability, logit)`` (or an extractor's scored
    sentences) out."""

    def __init__(self, model, role: str, settings: ServeSettings, on_batch=None):
        self.model, self.role = model, role
        self.retry_after_s = settings.retry_after_s
        fn = model.score_sentences if model.task == "extractor" else self._score_pairs
        self.batcher = DynamicBatcher(fn, max_batch_items=settings.max_batch_items, max_wait_ms=settings.max_wait_ms,
                                      max_queue_items=settings.max_queue_items, name=role,
                                      on_batch=(lambda r, n: on_batch(role, r, n)) if on_batch else None)

    def _score_pairs(self, items: list[tuple[str, str]]) -> list[tuple[float, float]]:
        z, _ = self.model.text_logits([q for q, _ in items], [p for _, p in items])
        return list(zip(self.model.calibrate(z).tolist(), z.tolist()))

    def info(self) -> dict[str, Any]:
        m = self.model.manifest
        return {"role": self.role, "task": m.task, "name": m.name, "path": self.model.path, "head": m.model.head,
                "thresholds": m.thresholds.to_dict(), "weights_sha256": dict(m.model.files_sha256),
                "package": m.package, "created_at": m.created_at, "device": str(self.model.device)}

    def pair_texts(self, query: str, documents: list[Any]) -> tuple[list[str], list[str]]:
        """The checked texts of a request's pairs; an empty query or document is a 422 naming it."""
        try:
            q = self.model.check_query(query)
            return [q] * len(documents), [self.model.passage_text(d, f"documents[{i}]") for i, d in enumerate(documents)]
        except (TypeError, ValueError) as e:
            raise RequestError(422, str(e)) from None

    async def scores(self, query: str, documents: list[Any]) -> list[tuple[float, float]]:
        queries, passages = self.pair_texts(query, documents)
        return await self.submit(list(zip(queries, passages)))

    async def submit(self, items: list[Any]) -> list[Any]:
        try:
            return await self.batcher.submit(items)
        except QueueFull as e:
            raise RequestError(503, f"busy: {e}", {"Retry-After": str(self.retry_after_s)}) from None
        except BatcherStopped as e:
            raise RequestError(503, str(e), {"Retry-After": "1"}) from None


def load_models(settings: ServeSettings, on_batch=None) -> dict[str, ServedModel]:
    """``inference.load`` each export of ``settings``; ``model`` must score pairs (an evaluator or an
    answer classifier), the others are checked for their task."""
    from .. import load
    from ..loading import ExportError

    common = dict(device=settings.device, dtype=settings.dtype, batch_tokens=settings.batch_tokens,
                  trust_pickle=settings.trust_pickle)
    main = load(settings.model, **common)
    if main.task == "extractor":
        raise ExportError(f"{settings.model}: --model must be an evaluator or an answer classifier (it scores "
                          "pairs for /v1/rerank); give an extractor with --extractor")
    models = {"model": ServedModel(main, "model", settings, on_batch)}
    if settings.extractor:
        models["extractor"] = ServedModel(load(settings.extractor, task="extractor", **common), "extractor",
                                          settings, on_batch)
    if settings.answer_classifier:
        models["answer_classifier"] = ServedModel(load(settings.answer_classifier, task="answer_classifier", **common),
                                                  "answer_classifier", settings, on_batch)
    return models


# -- the app ------------------------------------------------------------------------------------------
def create_app(settings: ServeSettings, models: dict[str, ServedModel] | None = None):
    """The FastAPI app. ``models``: already loaded ones (tests); default: load ``settings``' exports
    at start-up (``/health`` answers once they are loaded)."""
    import os

    from fastapi import Depends, FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse
    from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from . import schemas as S

    api_key = None
    if settings.api_key_env:
        api_key = os.environ.get(settings.api_key_env)
        if not api_key:
            raise ValueError(f"--api-key-env {settings.api_key_env}: that environment variable is not set or empty")

    registry = CollectorRegistry()
    requests_total = Counter("crag_requests", "HTTP requests by endpoint and status", ["endpoint", "status"],
                             registry=registry)
    latency = Histogram("crag_request_latency_seconds", "request latency by endpoint", ["endpoint"], registry=registry,
                        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
    batch_items = Histogram("crag_batch_items", "pairs (extractor: passages) per model call", ["model"],
                            registry=registry, buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000))
    batch_requests = Histogram("crag_batch_requests", "requests merged into one model call", ["model"],
                               registry=registry, buckets=(1, 2, 4, 8, 16, 32, 64))
    queue_depth = Gauge("crag_queue_items", "items waiting for the model", ["model"], registry=registry)

    def on_batch(role: str, n_requests: int, n_items: int) -> None:
        batch_items.labels(role).observe(n_items)
        batch_requests.labels(role).observe(n_requests)

    state: dict[str, Any] = {"ready": False, "models": models}

    @asynccontextmanager
    async def lifespan(app):
        if state["models"] is None:
            state["models"] = load_models(settings, on_batch)
        for m in state["models"].values():
            if m.batcher.on_batch is None:
                m.batcher.on_batch = lambda r, n, role=m.role: on_batch(role, r, n)
            m.batcher.start()
            queue_depth.labels(m.role).set_function(lambda b=m.batcher: b.queued_items)
        state["ready"] = True
        logger.info("serving %s", ", ".join(f"{k}={v.model.path}" for k, v in state["models"].items()))
        yield
        state["ready"] = False
        for m in state["models"].values():
            m.batcher.stop()

    app = FastAPI(title="crag-evaluators", version=_package_version(), lifespan=lifespan,
                  description="CRAG retrieval evaluators: rerank, grade, extract, has_answer.")
    app.state.draining = False  # set on SIGTERM by inference.serving.server.DrainingServer

    bearer = HTTPBearer(auto_error=False)
    header_key = APIKeyHeader(name="X-API-Key", auto_error=False)

    async def check_key(cred: HTTPAuthorizationCredentials | None = Depends(bearer),
                        x_key: str | None = Depends(header_key)) -> None:
        if api_key is None:
            return
        given = cred.credentials if cred is not None else x_key
        if given is None or not hmac.compare_digest(given.encode("utf-8"), api_key.encode("utf-8")):
            raise RequestError(401, "missing or wrong API key", {"WWW-Authenticate": "Bearer"})

    @app.middleware("http")
    async def measure(request: Request, call_next):
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "other")
        requests_total.labels(endpoint, str(response.status_code)).inc()
        latency.labels(endpoint).observe(time.perf_counter() - t0)
        if app.state.draining:  # stopping: clients open no more requests on this connection
            response.headers["Connection"] = "close"
        return response

    @app.exception_handler(RequestError)
    async def request_error(request: Request, e: RequestError):
        return JSONResponse({"detail": e.message}, status_code=e.status, headers=e.headers)

    def model(role: str) -> ServedModel:
        m = (state["models"] or {}).get(role)
        if m is None:
            flag = "--" + role.replace("_", "-")
            raise RequestError(404, f"no {role.replace('_', ' ')} is served (start the server with {flag} DIR)")
        return m

    def check_size(documents: list[Any], query: str) -> None:
        if len(documents) > settings.max_documents:
            raise RequestError(413, f"{len(documents)} documents; this server takes at most {settings.max_documents} "
                                    "per request (--max-documents)")
        chars = len(query) + sum(len(d.text if isinstance(d, Passage) else d) for d in documents)
        if chars > settings.max_chars:
            raise RequestError(413, f"{chars} characters; this server takes at most {settings.max_chars} per request "
                                    "(--max-chars)")

    def model_name(m: ServedModel) -> str:
        return settings.model_name or m.model.manifest.name or os.path.basename(str(m.model.path).rstrip("/"))

    guarded = [Depends(check_key)]

    @app.get("/health")
    async def health():
        if not state["ready"] or app.state.draining:
            return JSONResponse({"status": "draining" if app.state.draining else "unavailable"}, status_code=503)
        return {"status": "ok"}

    @app.get("/info", dependencies=guarded)
    async def info():
        return {"version": _package_version(), "pid": os.getpid(),
                "models": {k: v.info() for k, v in (state["models"] or {}).items()},
                "limits": {k: getattr(settings, k) for k in ("max_documents", "max_chars", "max_batch_items",
                                                             "max_wait_ms", "max_queue_items")}}

    @app.get("/metrics", dependencies=guarded)
    async def metrics():
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def rerank_results(req: S.RerankRequest) -> dict[str, Any]:
        m = model("model")
        docs = [S.as_passage(d, i) for i, d in enumerate(req.documents)]
        check_size(docs, req.query)
        scores = await m.scores(req.query, docs) if docs else []
        order = sorted(range(len(docs)), key=lambda i: (-scores[i][0], i))[: req.top_n or None]
        results = []
        for i in order:
            r: dict[str, Any] = {"index": i, "relevance_score": scores[i][0]}
            if req.return_documents:
                r["document"] = {"text": docs[i].text if isinstance(docs[i], Passage) else docs[i]}
            results.append(r)
        words = len(req.query.split()) * len(docs) + sum(len((d.text if isinstance(d, Passage) else d).split())
                                                         for d in docs)
        return {"id": str(uuid.uuid4()), "results": results, "model": req.model or model_name(m),
                "usage": {"total_tokens": words, "search_units": 1},
                "meta": {"api_version": {"version": "1"}, "billed_units": {"search_units": 1}}}

    @app.post("/v1/rerank", dependencies=guarded, response_model=S.RerankResponse, response_model_exclude_none=True)
    async def rerank_v1(req: S.RerankRequest):
        return await rerank_results(req)

    @app.post("/v2/rerank", dependencies=guarded, response_model=S.RerankResponse, response_model_exclude_none=True,
              include_in_schema=False)
    async def rerank_v2(req: S.RerankRequest):
        return await rerank_results(req)

    @app.post("/rerank", dependencies=guarded, response_model=list[S.TeiRank], response_model_exclude_none=True)
    async def rerank_tei(req: S.TeiRerankRequest):
        m = model("model")
        check_size(req.texts, req.query)
        scores = await m.scores(req.query, list(req.texts)) if req.texts else []
        order = sorted(range(len(req.texts)), key=lambda i: (-scores[i][0], i))
        return [{"index": i, "score": scores[i][1] if req.raw_scores else scores[i][0],
                 **({"text": req.texts[i]} if req.return_text else {})} for i in order]

    @app.post("/v1/grade", dependencies=guarded, response_model=S.GradeResponse)
    async def grade(req: S.GradeRequest):
        m = model("model")
        if m.model.task != "evaluator":
            raise RequestError(404, f"/v1/grade needs an evaluator; --model is an {m.model.task} export")
        docs = [S.as_passage(d, i) for i, d in enumerate(req.documents)]
        check_size(docs, req.query)
        try:
            hi, lo = m.model.thresholds(req.theta_high, req.theta_low, req.two_tier)
        except ValueError as e:
            raise RequestError(422, str(e)) from None
        scores = await m.scores(req.query, docs) if docs else []
        graded = [{"index": i, "score": s, "action": action_of(s, hi, lo), "id": S.doc_id(d)}
                  for i, ((s, _), d) in enumerate(zip(scores, req.documents))]
        return {"query": req.query, "action": query_action([g["action"] for g in graded]) if graded else "Incorrect",
                "theta_high": hi, "theta_low": lo, "documents": graded, "model": model_name(m)}

    @app.post("/v1/has_answer", dependencies=guarded, response_model=S.HasAnswerResponse)
    async def has_answer(req: S.HasAnswerRequest):
        m = model("answer_classifier")
        docs = [S.as_passage(d, i) for i, d in enumerate(req.documents)]
        check_size(docs, req.query)
        t = m.model.threshold if req.threshold is None else req.threshold
        scores = await m.scores(req.query, docs) if docs else []
        return {"threshold": t, "results": [{"index": i, "score": s, "has_answer": bool(s >= t)}
                                            for i, (s, _) in enumerate(scores)], "model": model_name(m)}

    @app.post("/v1/extract", dependencies=guarded, response_model=S.ExtractResponse)
    async def extract(req: S.ExtractRequest):
        m = model("extractor")
        docs = [S.as_passage(d, i) for i, d in enumerate(req.documents)]
        check_size(docs, req.query)
        try:
            k, floor = m.model._rule(req.top_k, req.min_score)
            m.pair_texts(req.query, docs)  # 422 on an empty query or document
        except ValueError as e:
            raise RequestError(422, str(e)) from None
        scored = await m.submit([(req.query, d) for d in docs]) if docs else []
        return {"top_k": k, "min_score": floor, "model": model_name(m),
                "results": [{"index": i, "sentences": [s.to_dict() for s in m.model.select(sents, sc, k, floor)]}
                            for i, (sents, sc) in enumerate(scored)]}

    return app


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("crag-evaluators")
    except Exception:
        return "0+unknown"


def app_from_env():
    """The uvicorn factory of ``--workers N``: the settings come as JSON in ``CRAG_SERVE_SETTINGS``."""
    import json
    import os

    return create_app(ServeSettings.from_dict(json.loads(os.environ["CRAG_SERVE_SETTINGS"])))
