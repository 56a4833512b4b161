"""Web search fallback: a search-engine interface, a JSON-over-HTTP searcher, and keyword queries.

CRAG falls back to the web when the evaluator judges the retrieved passages wrong or doubtful: an
LLM rewrites the question into at most three keywords, a search engine is asked, and the returned
paragraphs are graded like any other passage. This module gives the pieces that do not need a model:

* :class:`WebSearcher` - the protocol: ``search(query, k) -> list[Chunk]``. Web results are
  :class:`~pipeline.types.Chunk`\\ s whose ``source`` is the result's domain (what credibility is
  looked up by), ``doc_id`` its URL, and ``metadata`` holds ``url``, ``rank`` and, when the engine
  gives one, ``published``.
* :class:`JsonHttpSearcher` - any engine that answers a GET with JSON (SearxNG, Brave, Bing, a
  company proxy): a URL template, the dotted path of the result list, and a field mapping. An API key
  is read from an environment variable at each call, sent in a header, and never appears in an error
  message, a log line or ``repr``. Every failure (timeout, connection error, a status other than 200,
  a body that is not JSON or has no list where expected) raises :class:`WebSearchError` with a
  ``reason`` code and a one-line message naming the URL (credentials redacted) - the caller degrades
  to abstention instead of crashing.
* :func:`keyword_query` - the offline, rule-based stand-in for CRAG's LLM query rewrite (see its
  docstring for the rules). Deterministic, so a run can be replayed.

The term helpers (:data:`STOPWORDS`, :func:`is_code_like`, :func:`terms`) are shared with
:mod:`pipeline.rounds`, :mod:`pipeline.quantities` and :mod:`pipeline.conflicts`.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any, Protocol, runtime_checkable

from pipeline.types import Chunk

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Term helpers (shared with pipeline.rounds, pipeline.quantities and pipeline.conflicts)
# ---------------------------------------------------------------------------------------------

#: question words and auxiliaries a keyword query never needs
QUESTION_WORDS = frozenset(
    "what which who whom whose when where why how whether does do did is are was were am be been being "
    "can could should would will shall may might must has have had".split()
)

#: English function words (a superset of Lucene's 33) plus conversational filler
STOPWORDS = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their then "
        "there these they this to was will with "
        "about above after again against all also am any because been before being below between both "
        "cannot could did do does doing down during each few from further had has have having he her "
        "here hers herself him himself his how i its itself just me more most my myself nor now off once "
        "only other ought our ours ourselves out over own same she should so some than theirs them "
        "themselves those through too under until up very we were what when where which while who whom "
        "whose why would you your yours yourself yourselves can may might must shall us "
        "please tell know explain find give show let want need get got like really actually "
        "anyone someone something anything thing things way ways much many mean means meaning"
    ).split()
) | QUESTION_WORDS

_ALNUM = r"[^\W_]+"
#: a word, or a code: words joined by - _ . / with no spaces (E-204, v2.1, ISO_9001, A/B)
TOKEN_RE = re.compile(rf"{_ALNUM}(?:[-_./]{_ALNUM})*")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th|s)\Z", re.IGNORECASE)  # 4th, 1990s: not codes
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*\Z")
_QUOTED = re.compile(r"\"([^\"]+)\"|\u201c([^\u201d]+)\u201d|(?:(?<=\s)|^)'([^']+)'(?=[\s.,;:!?)]|$)")


def is_code_like(token: str) -> bool:
    """A product code, version or identifier: letters *and* digits in one token (``E-204``, ``v2.1``,
    ``XR-7000``, ``ISO_9001``, ``COVID-19``); not ordinals or decades (``4th``, ``1990s``) and not
    plain numbers (``2024``, ``3.5``)."""
    if not TOKEN_RE.fullmatch(token):
        return False
    has_digit = any(c.isdigit() for c in token)
    has_alpha = any(c.isalpha() for c in token)
    return has_digit and has_alpha and not _ORDINAL.fullmatch(token)


def _strip_possessive(tok: str) -> str:
    return tok[:-2] if tok.endswith(("'s", "\u2019s")) else tok


def terms(text: str) -> list[str]:
    """The tokens of ``text`` in order (words and whole codes, possessive ``'s`` dropped), case kept."""
    out = []
    for m in re.finditer(rf"{TOKEN_RE.pattern}(?:['\u2019]s\b)?", text):
        out.append(_strip_possessive(m.group(0)))
    return out


def norm_term(tok: str) -> str:
    """Lower case and a light plural strip (``batteries`` -> ``battery``, ``weights`` -> ``weight``;
    ``mass``, ``status`` and codes kept) - enough to tell whether a term is already used."""
    t = tok.lower()
    if is_code_like(t) or len(t) <= 3 or not t.isalpha():
        return t
    if t.endswith("ies") and len(t) > 4:
        return t[:-3] + "y"
    if t.endswith("s") and not t.endswith(("ss", "us", "is")):
        return t[:-1]
    return t


def keyword_query(question: str, max_terms: int = 6) -> str:
    """Rewrite a question into a short keyword query (CRAG's web-search rewrite, rule based).

    CRAG asks an LLM for at most three keywords; this is the offline, deterministic stand-in:

    1. quoted phrases (``"..."``, curly quotes, or ``'...'`` between spaces) are kept whole, quoted;
    2. code-like tokens (:func:`is_code_like`: ``E-204``, ``v2.1``, ``XR-7000``) are kept whole and
       come first - all of them, even past ``max_terms``;
    3. question words, auxiliaries, stopwords and filler (``what``, ``does``, ``the``, ``please``)
       are dropped; a possessive ``'s`` is cut;
    4. the rest is ranked: quoted phrases, then numbers and capitalised names (a run of capitalised
       words such as ``New York`` is one term; a capital that only starts the sentence does not make
       a name), then the other words in question order; duplicates (case-insensitive) are dropped.

    The query is the codes, then the chosen other terms in question order, ``max_terms`` terms at
    most (codes excepted). A question with no term left comes back whitespace-normalised.
    """
    if max_terms < 1:
        raise ValueError(f"max_terms must be >= 1, got {max_terms}")
    text = question.strip()
    seen: set[str] = set()
    codes: list[str] = []
    candidates: list[tuple[int, int, str]] = []  # (priority, position, term)

    def add(priority: int, pos: int, term: str) -> None:
        key = term.lower()
        if key not in seen:
            seen.add(key)
            candidates.append((priority, pos, term))

    # 1. quoted phrases (removed from the text before word scanning)
    def take_quote(m: re.Match) -> str:
        phrase = " ".join(next(g for g in m.groups() if g is not None).split())
        if phrase:
            add(0, m.start(), f'"{phrase}"')
        return " " * (m.end() - m.start())

    rest = _QUOTED.sub(take_quote, text)
    # 2-4. tokens
    toks = list(re.finditer(rf"{TOKEN_RE.pattern}(?:['\u2019]s\b)?", rest))
    i = 0
    while i < len(toks):
        m = toks[i]
        tok = _strip_possessive(m.group(0))
        low = tok.lower()
        sentence_start = m.start() == 0 or rest[: m.start()].rstrip()[-1:] in {".", "?", "!", ":", ""}
        if is_code_like(tok):
            if low not in seen:
                seen.add(low)
                codes.append(tok)
            i += 1
            continue
        if low in STOPWORDS:
            i += 1
            continue
        if _NUMBER.fullmatch(tok):
            add(1, m.start(), tok)
            i += 1
            continue
        if tok[0].isupper() and not sentence_start:
            # a run of capitalised words is one name
            j, parts = i, [tok]
            while j + 1 < len(toks):
                nxt = _strip_possessive(toks[j + 1].group(0))
                gap = rest[toks[j].end(): toks[j + 1].start()]
                if gap.strip() or not nxt[:1].isupper() or is_code_like(nxt) or nxt.lower() in STOPWORDS:
                    break
                parts.append(nxt)
                j += 1
            add(1, m.start(), " ".join(parts))
            i = j + 1
            continue
        if len(tok) > 1 or tok.isdigit():
            add(2, m.start(), tok if tok[0].isupper() and not sentence_start else low)
        i += 1

    chosen = sorted(candidates, key=lambda c: (c[0], c[1]))[:max_terms]
    chosen.sort(key=lambda c: c[1])
    out = codes + [c[2] for c in chosen]
    if not out:
        return " ".join(question.split())
    return " ".join(out)


# ---------------------------------------------------------------------------------------------
# Searchers
# ---------------------------------------------------------------------------------------------


class WebSearchError(RuntimeError):
    """A web search that failed. ``reason`` is a short code (``config``, ``timeout``, ``connection``,
    ``http_status``, ``too_large``, ``bad_json``, ``bad_shape``); ``message`` one line for a log or a
    user, naming the URL with credentials redacted. Callers degrade to abstention on it."""

    def __init__(self, reason: str, message: str):
        super().__init__(reason, message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return self.message


@runtime_checkable
class WebSearcher(Protocol):
    """Anything that turns a query into web results as :class:`~pipeline.types.Chunk`\\ s
    (``source`` = the result's domain, ``doc_id`` = its URL, ``metadata`` with ``url`` and, when
    known, ``published``)."""

    def search(self, query: str, k: int) -> list[Chunk]: ...


DEFAULT_FIELDS = {"title": "title", "text": "snippet", "url": "url", "published": "published"}
_SECRET_PARAM = re.compile(r"key|token|secret|password|passwd|sig|auth|credential", re.IGNORECASE)
_MISSING = object()


def domain_of(url: str) -> str:
    """``https://www.Example.com:8080/x`` -> ``example.com``; ``""`` when ``url`` has no host."""
    if not url:
        return ""
    parsed = urllib.parse.urlsplit(url if "://" in url else f"//{url}")
    host = (parsed.hostname or "").lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


def get_path(obj: Any, path: str | None, default: Any = _MISSING) -> Any:
    """Follow a dotted path (``"data.items"``, ``"meta.0.date"``; ``""`` is ``obj`` itself) through
    dicts and lists; ``default`` (or :data:`_MISSING`) when a step is absent."""
    if path is None:
        return default
    cur = obj
    for part in path.split(".") if path else []:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit() and -len(cur) <= int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return default
    return cur


def redact_url(url: str, secrets: tuple[str, ...] = ()) -> str:
    """``url`` with the values of credential-like query parameters (``key``, ``token``, ``sig``,
    ...), any user:password part, and every string in ``secrets`` replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if query:
            query = [(k, "***" if _SECRET_PARAM.search(k) else v) for k, v in query]
            parts = parts._replace(query=urllib.parse.urlencode(query, safe="*"))
        if parts.username or parts.password:
            host = parts.hostname or ""
            parts = parts._replace(netloc=host + (f":{parts.port}" if parts.port else ""))
        out = urllib.parse.urlunsplit(parts)
    except ValueError:
        out = url
    for s in secrets:
        if s:
            out = out.replace(s, "***").replace(urllib.parse.quote(s, safe=""), "***")
    return out


class JsonHttpSearcher:
    """A search engine reached by one HTTP GET that answers JSON.

    * ``url_template`` - formatted with ``query`` (URL-quoted) and ``k``, e.g.
      ``"https://search.example.com/api?q={query}&count={k}"``.
    * ``results_path`` - dotted path of the result list in the JSON (``"web.results"``; ``""``: the
      body is the list).
    * ``fields`` - where each result keeps ``title``, ``text``, ``url`` and ``published`` (dotted
      paths; merged over :data:`DEFAULT_FIELDS`; ``None`` disables one). Results without text are
      skipped and counted in :attr:`last_skipped` / :attr:`skipped`.
    * ``api_key_env`` - the name of an environment variable holding an API key, read at each call and
      sent as ``{api_key_header}: {api_key_prefix}{key}`` (default ``Authorization: Bearer ...``).
      It is never logged, never stored on the object, and redacted from every error message.
    * ``max_bytes`` - a larger body is refused (``too_large``).
    """

    def __init__(
        self,
        url_template: str,
        results_path: str = "results",
        fields: dict[str, str | None] | None = None,
        timeout: float = 10.0,
        headers: dict[str, str] | None = None,
        api_key_env: str | None = None,
        api_key_header: str = "Authorization",
        api_key_prefix: str = "Bearer ",
        max_bytes: int = 20_000_000,
    ):
        if "{query}" not in url_template:
            raise ValueError(f"url_template must contain '{{query}}': {url_template!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        unknown = set(fields or {}) - set(DEFAULT_FIELDS)
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}; expected some of {sorted(DEFAULT_FIELDS)}")
        self.url_template = url_template
        self.results_path = results_path
        self.fields = {**DEFAULT_FIELDS, **(fields or {})}
        self.timeout = float(timeout)
        self.headers = dict(headers or {})
        self.api_key_env = api_key_env
        self.api_key_header = api_key_header
        self.api_key_prefix = api_key_prefix
        self.max_bytes = int(max_bytes)
        self.skipped: Counter = Counter()  # over the searcher's life
        self.last_skipped: Counter = Counter()  # the last call

    def __repr__(self) -> str:
        return (f"JsonHttpSearcher(url_template={redact_url(self.url_template)!r}, results_path={self.results_path!r}, "
                f"api_key_env={self.api_key_env!r})")

    # -- the request -----------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise WebSearchError("config", f"web search: environment variable {self.api_key_env} (the API key) is not set")
        return key

    def _fetch(self, url: str, key: str | None) -> Any:
        shown = redact_url(url, (key,) if key else ())
        headers = {"Accept": "application/json", "User-Agent": "crag-evaluators/pipeline", **self.headers}
        if key:
            headers[self.api_key_header] = f"{self.api_key_prefix}{key}"
        req = urllib.request.Request(url, headers=headers, method="GET")

        def fail(reason: str, what: str) -> WebSearchError:
            text = f"web search failed ({reason}) for {shown}: {what}"
            if key:
                text = text.replace(key, "***")
            return WebSearchError(reason, text)

        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status = resp.status
                if status != 200:
                    raise fail("http_status", f"HTTP {status} (expected 200)")
                body = resp.read(self.max_bytes + 1)
                charset = resp.headers.get_content_charset() or "utf-8"
        except WebSearchError:
            raise
        except urllib.error.HTTPError as e:
            try:
                detail = e.read(300).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - the body is a courtesy
                detail = ""
            detail = " ".join(detail.split())[:200]
            raise fail("http_status", f"HTTP {e.code} {e.reason}" + (f": {detail}" if detail else "")) from None
        except (TimeoutError, socket.timeout):
            raise fail("timeout", f"no answer within {self.timeout:g} s") from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                raise fail("timeout", f"no answer within {self.timeout:g} s") from None
            raise fail("connection", f"cannot connect ({e.reason})") from None
        except (OSError, ValueError, http.client.HTTPException) as e:  # reset, bad URL, truncated body
            raise fail("connection", f"{type(e).__name__}: {e}") from None

        if len(body) > self.max_bytes:
            raise fail("too_large", f"the body is larger than {self.max_bytes} bytes")
        try:
            return json.loads(body.decode(charset))
        except (UnicodeDecodeError, LookupError, json.JSONDecodeError) as e:
            head = " ".join(body[:80].decode("utf-8", "replace").split())
            raise fail("bad_json", f"the body is not JSON ({e.__class__.__name__}); it starts {head!r}") from None

    # -- the protocol ----------------------------------------------------------------------------
    def search(self, query: str, k: int) -> list[Chunk]:
        """Up to ``k`` results for ``query`` as chunks; raises :class:`WebSearchError` on failure."""
        if k < 1:
            return []
        key = self._api_key()
        url = self.url_template.format(query=urllib.parse.quote(query, safe=""), k=k)
        data = self._fetch(url, key)
        items = get_path(data, self.results_path)
        if not isinstance(items, list):
            what = "is missing" if items is _MISSING else f"is a {type(items).__name__}, not a list"
            raise WebSearchError(
                "bad_shape",
                f"web search failed (bad_shape) for {redact_url(url, (key,) if key else ())}: "
                f"'{self.results_path or '<body>'}' {what}",
            )
        self.last_skipped = Counter()
        chunks: list[Chunk] = []
        used_ids: Counter = Counter()
        for rank, item in enumerate(items, 1):
            if len(chunks) >= k:
                break
            if not isinstance(item, dict):
                self.last_skipped["not_an_object"] += 1
                continue
            text = get_path(item, self.fields["text"], None)
            if isinstance(text, (int, float)) and not isinstance(text, bool):
                text = str(text)
            if not isinstance(text, str) or not text.strip():
                self.last_skipped["no_text"] += 1
                continue
            text = text.strip()
            title = get_path(item, self.fields["title"], None)
            url_v = get_path(item, self.fields["url"], None)
            published = get_path(item, self.fields["published"], None)
            url_s = str(url_v) if isinstance(url_v, (str, int, float)) and str(url_v) else ""
            meta: dict[str, Any] = {"rank": rank, "query": query}
            if url_s:
                meta["url"] = url_s
            if published not in (None, ""):
                meta["published"] = str(published)
            base_id = url_s or f"web:{rank}"
            used_ids[base_id] += 1
            cid = base_id if used_ids[base_id] == 1 else f"{base_id}#{used_ids[base_id]}"
            chunks.append(Chunk(
                id=cid, doc_id=url_s or cid, text=text, title=str(title) if isinstance(title, (str, int, float)) else "",
                paragraph=0, start=0, end=len(text), source=domain_of(url_s) or "web", metadata=meta,
            ))
        self.skipped.update(self.last_skipped)
        if self.last_skipped:
            logger.info("web search: skipped %s of %d results (%s)", sum(self.last_skipped.values()), len(items),
                        dict(self.last_skipped))
        return chunks
