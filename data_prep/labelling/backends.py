"""Chat backends for the labeller: any OpenAI-compatible server over HTTP, or a local transformers
causal LM. Both are asyncio objects with one method, ``await backend.complete(messages,
temperature)`` -> :class:`Completion`, used as ``async with backend: ...``.

:class:`OpenAIBackend` (``POST {base_url}/chat/completions``; a hosted API, vLLM, llama.cpp's
server, Ollama's ``/v1``):

* **Servers**: several base URLs share the requests round-robin. A server that fails
  ``fail_threshold`` times in a row (timeout, connection error, HTTP 5xx, a body that is not a
  chat completion) is taken out of rotation for ``cooldown`` seconds (doubling while it keeps
  failing, at most 10 minutes); a 429 pauses that server for its ``Retry-After`` instead. When every
  server is out, requests wait for the first to come back.
* **Limits**: at most ``rpm`` requests a minute over all servers (each attempt counts), spaced
  evenly; the caller bounds the requests in flight (``--concurrency``); ``timeout`` seconds per
  attempt, the whole answer included.
* **Retries**: on a timeout, a connection error, 429, 5xx or a broken body, up to ``max_retries``
  more attempts, after ``Retry-After`` when the server sent one (seconds or an HTTP date), else
  an exponential backoff with full jitter (``uniform(0, min(backoff_max, backoff_base * 2**n))``).
  Other 4xx answers are not retried: 401, 403 and 404 (a bad key, URL or model name) stop the run
  (:class:`BackendError` with ``fatal=True``), a 400 fails the one item.
* **Secrets**: the API key is read from an environment variable by the caller and only ever put
  in the ``Authorization`` header; every message this module makes goes through :meth:`redact`, and
  URLs are shown without user info.

:class:`TransformersBackend` runs a local chat model (its chat template, left-padded batched
generation on the GPU when there is one) for data that must not leave the machine: concurrent
requests are gathered into batches of up to ``batch_size``.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

logger = logging.getLogger(__name__)

RETRYABLE = ("timeout", "connection", "bad-response")
FATAL_STATUS = (401, 403, 404)
MAX_COOLDOWN = 600.0


@dataclass
class Completion:
    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    server: str | None = None


class BackendError(Exception):
    """A request that failed for good: ``reason`` is a short code (``timeout``, ``connection``,
    ``http-500``, ``bad-response``, ...), the message says more and holds no secret."""

    def __init__(self, reason: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.reason = reason
        self.fatal = fatal


@dataclass
class RequestStats:
    requests: int = 0  # HTTP attempts (or prompts generated locally)
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


def display_url(url: str) -> str:
    """``url`` without user info (``https://user:pw@host/v1`` -> ``https://host/v1``)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from now (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class Server:
    url: str
    display: str
    requests: int = 0
    failures: int = 0
    consecutive: int = 0
    removed: int = 0
    available_at: float = 0.0
    cooldown: float = 0.0

    def report(self) -> dict[str, Any]:
        return {"url": self.display, "requests": self.requests, "failures": self.failures,
                "times_taken_out": self.removed}


class ServerPool:
    """Round-robin over the servers that are in rotation now."""

    def __init__(self, urls: list[str], fail_threshold: int = 3, cooldown: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        if not urls:
            raise ValueError("no --base-url given")
        self.servers = [Server(u.rstrip("/"), display_url(u.rstrip("/"))) for u in urls]
        self.fail_threshold = fail_threshold
        self.base_cooldown = cooldown
        self.clock = clock
        self._next = 0

    async def acquire(self) -> Server:
        while True:
            now = self.clock()
            n = len(self.servers)
            for i in range(n):
                s = self.servers[(self._next + i) % n]
                if s.available_at <= now:
                    self._next = (self._next + i + 1) % n
                    s.requests += 1
                    return s
            await asyncio.sleep(max(0.0, min(s.available_at for s in self.servers) - now))

    def success(self, s: Server) -> None:
        s.consecutive = 0
        s.cooldown = 0.0

    def failure(self, s: Server) -> None:
        s.failures += 1
        s.consecutive += 1
        if s.consecutive >= self.fail_threshold:
            s.cooldown = min(MAX_COOLDOWN, s.cooldown * 2 if s.cooldown else self.base_cooldown)
            s.available_at = self.clock() + s.cooldown
            s.removed += 1
            s.consecutive = 0
            logger.warning("server %s failed %d times in a row: out of rotation for %.0f s", s.display,
                           self.fail_threshold, s.cooldown)

    def pause(self, s: Server, seconds: float) -> None:
        s.available_at = max(s.available_at, self.clock() + seconds)


class RateLimiter:
    """At most ``rpm`` calls a minute, evenly spaced (``None`` or 0: no limit)."""

    def __init__(self, rpm: float | None, clock: Callable[[], float] = time.monotonic):
        self.interval = 60.0 / rpm if rpm else 0.0
        self.clock = clock
        self._next = 0.0

    async def wait(self) -> None:
        if not self.interval:
            return
        now = self.clock()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


class OpenAIBackend:
    """An OpenAI-compatible chat-completions server (or several)."""

    kind = "openai"

    def __init__(self, base_urls: list[str], model: str, api_key: str | None = None, *, timeout: float = 60.0,
                 max_retries: int = 5, rpm: float | None = None, max_tokens: int = 256, concurrency: int = 16,
                 backoff_base: float = 0.5, backoff_max: float = 60.0, fail_threshold: int = 3,
                 cooldown: float = 30.0, extra_body: dict[str, Any] | None = None, seed: int | None = None):
        if not model:
            raise ValueError("--model is required for an OpenAI-compatible server")
        self.model = model
        self.api_key = api_key or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.concurrency = concurrency
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.extra_body = dict(extra_body or {})
        self.pool = ServerPool(base_urls, fail_threshold, cooldown)
        self.limiter = RateLimiter(rpm)
        self.stats = RequestStats()
        self.rng = random.Random(seed)
        self._client = None

    def redact(self, text: str) -> str:
        return text.replace(self.api_key, "***") if self.api_key and text else text

    async def __aenter__(self) -> "OpenAIBackend":
        import httpx

        limits = httpx.Limits(max_connections=max(4, self.concurrency * 2), max_keepalive_connections=max(4, self.concurrency * 2))
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), limits=limits, follow_redirects=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def report(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "servers": [s.report() for s in self.pool.servers]}

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _backoff(self, attempt: int) -> float:
        return self.rng.uniform(0.0, min(self.backoff_max, self.backoff_base * 2 ** attempt))

    async def _attempt(self, server: Server, body: dict[str, Any]) -> tuple[Completion | None, str, str, float | None]:
        """One request: ``(completion, "", "", None)``, or ``(None, reason, message, retry_after)``."""
        import httpx

        url = f"{server.url}/chat/completions"
        try:
            resp = await asyncio.wait_for(self._client.post(url, json=body, headers=self._headers()), self.timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            return None, "timeout", f"{server.display}: no complete answer within {self.timeout:g} s", None
        except httpx.HTTPError as e:
            return None, "connection", f"{server.display}: {type(e).__name__}: {self.redact(str(e))}", None
        status = resp.status_code
        if status == 200:
            try:
                data = resp.json()
                text = data["choices"][0]["message"]["content"]
                if not isinstance(text, str):
                    raise TypeError(f"message content is {type(text).__name__}")
            except (ValueError, KeyError, IndexError, TypeError) as e:
                snippet = self.redact(resp.text[:200])
                return None, "bad-response", f"{server.display}: not a chat completion ({type(e).__name__}: {e}; body {snippet!r})", None
            usage = data.get("usage") or {}
            tin = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            tout = usage.get("completion_tokens") if isinstance(usage, dict) else None
            return Completion(text, int(tin or 0), int(tout or 0), server.display), "", "", None
        detail = self.redact(resp.text[:200])
        msg = f"{server.display}: HTTP {status} ({detail!r})"
        return None, f"http-{status}", msg, retry_after_seconds(resp.headers.get("retry-after"))

    async def complete(self, messages: list[dict[str, str]], temperature: float = 0.0) -> Completion:
        body = {"model": self.model, "messages": messages, "temperature": temperature, "max_tokens": self.max_tokens,
                **self.extra_body}
        attempt = 0
        while True:
            server = await self.pool.acquire()
            await self.limiter.wait()
            self.stats.requests += 1
            comp, reason, message, retry_after = await self._attempt(server, body)
            if comp is not None:
                self.pool.success(server)
                self.stats.tokens_in += comp.tokens_in
                self.stats.tokens_out += comp.tokens_out
                return comp
            status = int(reason[5:]) if reason.startswith("http-") else None
            if status in FATAL_STATUS:
                what = {401: "refused the API key", 403: "refused access", 404: "does not know this URL or model"}[status]
                raise BackendError(reason, f"{message}: the server {what} (model {self.model!r})", fatal=True)
            retryable = reason in RETRYABLE or status == 429 or (status is not None and status >= 500)
            if not retryable:
                raise BackendError(reason, message)
            if status == 429:
                self.pool.pause(server, retry_after if retry_after is not None else self._backoff(attempt))
            else:
                self.pool.failure(server)
            if attempt >= self.max_retries:
                raise BackendError(reason, f"{message} (after {attempt + 1} attempts)" if attempt else message)
            attempt += 1
            self.stats.retries += 1
            delay = retry_after if retry_after is not None else self._backoff(attempt - 1)
            logger.debug("retry %d after %.2f s: %s", attempt, delay, message)
            await asyncio.sleep(min(delay, self.backoff_max))


@dataclass
class _Job:
    messages: list[dict[str, str]]
    temperature: float
    future: asyncio.Future = field(repr=False)


class TransformersBackend:
    """A local causal LM with a chat template; requests in flight are generated in batches."""

    kind = "transformers"

    def __init__(self, model: str, *, device: str | None = None, batch_size: int = 8, max_tokens: int = 256,
                 dtype: str | None = None, seed: int = 0, gather_ms: float = 20.0):
        self.model_name = model
        self.model = model
        self.device_name = device
        self.batch_size = max(1, batch_size)
        self.max_tokens = max_tokens
        self.dtype = dtype
        self.seed = seed
        self.gather_s = gather_ms / 1000.0
        self.concurrency = self.batch_size * 2
        self.stats = RequestStats()
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._lm = self._tok = self._device = None

    def redact(self, text: str) -> str:
        return text

    def report(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model_name, "device": str(self._device), "batch_size": self.batch_size}

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.device_name:
            device = torch.device(self.device_name)
        else:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        tok = AutoTokenizer.from_pretrained(self.model_name)
        if not getattr(tok, "chat_template", None):
            raise ValueError(f"{self.model_name}: the tokenizer has no chat template; use a chat (instruct) model")
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, None: None}[self.dtype]
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
        lm = AutoModelForCausalLM.from_pretrained(self.model_name, dtype=dtype).to(device).eval()
        self._lm, self._tok, self._device = lm, tok, device

    async def __aenter__(self) -> "TransformersBackend":
        await asyncio.to_thread(self._load)
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._batcher())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    async def complete(self, messages: list[dict[str, str]], temperature: float = 0.0) -> Completion:
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(_Job(messages, temperature, fut))
        return await fut

    async def _batcher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.gather_s
            while len(batch) < self.batch_size:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except asyncio.TimeoutError:
                    break
            try:
                results = await asyncio.to_thread(self._generate, batch)
            except Exception as e:  # a failed batch fails its items, not the run
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(BackendError("generation", f"local generation failed: {type(e).__name__}: {e}"))
                continue
            for job, comp in zip(batch, results):
                if not job.future.done():
                    job.future.set_result(comp)

    def _generate(self, jobs: list[_Job]) -> list[Completion]:
        import torch

        out: dict[int, Completion] = {}
        by_temp: dict[float, list[int]] = {}
        for i, j in enumerate(jobs):
            by_temp.setdefault(j.temperature, []).append(i)
        tok, lm = self._tok, self._lm
        for temp, idx in by_temp.items():
            texts = [tok.apply_chat_template(jobs[i].messages, tokenize=False, add_generation_prompt=True) for i in idx]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self._device)
            kw: dict[str, Any] = {"max_new_tokens": self.max_tokens, "pad_token_id": tok.pad_token_id}
            if temp > 0:
                kw.update(do_sample=True, temperature=temp)
            else:
                kw.update(do_sample=False)
            torch.manual_seed(self.seed + self.stats.requests)
            with torch.inference_mode():
                gen = lm.generate(**enc, **kw)
            new = gen[:, enc["input_ids"].shape[1]:]
            for row, i in enumerate(idx):
                ids = new[row].tolist()
                n_out = len(ids)
                if tok.eos_token_id in ids:
                    n_out = ids.index(tok.eos_token_id) + 1
                text = tok.decode(ids[:n_out], skip_special_tokens=True)
                n_in = int(enc["attention_mask"][row].sum())
                out[i] = Completion(text, n_in, n_out, "local")
                self.stats.requests += 1
                self.stats.tokens_in += n_in
                self.stats.tokens_out += n_out
        return [out[i] for i in range(len(jobs))]
