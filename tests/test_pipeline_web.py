"""pipeline.web (JsonHttpSearcher against a real loopback HTTP server, keyword_query) and
pipeline.rounds (query rewriting, overlap and stop rules)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.rounds import MAX_ROUNDS, OVERLAP_STOP, results_overlap, rewrite_query, should_stop, stop_reason
from pipeline.types import Chunk
from pipeline.web import JsonHttpSearcher, WebSearchError, WebSearcher, domain_of, keyword_query, redact_url

SECRET = "sk-test-SECRET-4242"

RESULTS = {"results": [
    {"title": "E-204 error", "snippet": "E-204 means the drain pump is blocked.", "url": "https://www.example.com/e204",
     "published": "2024-01-02"},
    {"title": "No text here", "url": "https://forum.example.org/t/1"},
    {"title": "Empty", "snippet": "   ", "url": "https://forum.example.org/t/2"},
    {"title": "Manual", "snippet": "Clean the pump filter.", "url": "https://docs.vendor.com/manual#p3"},
    "not an object",
    {"title": "Third", "snippet": "A third result.", "url": "https://third.net/x"},
]}
NESTED = {"data": {"web": {"items": [
    {"meta": {"name": "Nested one", "link": "https://nested.example.com/a", "date": "2023-05-06"},
     "body": {"lines": ["first line", "second line"]}},
    {"meta": {"name": "No body", "link": "https://nested.example.com/b"}},
]}}}


class Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - the http.server API
        url = urllib.parse.urlsplit(self.path)
        qs = urllib.parse.parse_qs(url.query)
        Handler.seen.append({"path": url.path, "query": qs, "headers": dict(self.headers)})
        if url.path == "/search":
            self.reply(200, json.dumps(RESULTS).encode())
        elif url.path == "/nested":
            self.reply(200, json.dumps(NESTED).encode())
        elif url.path == "/error":  # a server that echoes the credentials back: they must not leak
            self.reply(500, f"internal error for {self.headers.get('Authorization')}".encode(), "text/plain")
        elif url.path == "/slow":
            time.sleep(1.5)
            self.reply(200, b'{"results": []}')
        elif url.path == "/html":
            self.reply(200, b"<html><body>Rate limited</body></html>", "text/html")
        elif url.path == "/shape":
            self.reply(200, b'{"results": {"oops": 1}}')
        elif url.path == "/accepted":
            self.reply(202, b'{"results": []}')
        else:
            self.reply(404, b"not found", "text/plain")


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("CRAG_TEST_SEARCH_KEY", SECRET)
    return "CRAG_TEST_SEARCH_KEY"


# ---------------------------------------------------------------------------------------------
# JsonHttpSearcher
# ---------------------------------------------------------------------------------------------


def test_normal_results_become_chunks(server, api_key):
    s = JsonHttpSearcher(server + "/search?q={query}&n={k}", api_key_env=api_key)
    assert isinstance(s, WebSearcher)
    chunks = s.search("E-204 drain pump & filter", k=5)
    assert [c.title for c in chunks] == ["E-204 error", "Manual", "Third"]
    c = chunks[0]
    assert isinstance(c, Chunk)
    assert c.text == "E-204 means the drain pump is blocked."
    assert c.source == "example.com" and c.doc_id == c.id == "https://www.example.com/e204"
    assert c.metadata["url"] == "https://www.example.com/e204" and c.metadata["published"] == "2024-01-02"
    assert c.end == len(c.text)
    assert chunks[1].source == "docs.vendor.com" and "published" not in chunks[1].metadata
    # results without text (or not objects) are skipped and counted
    assert s.last_skipped == {"no_text": 2, "not_an_object": 1}
    # the query was URL-quoted, k passed, and the key went in a header
    req = Handler.seen[-1]
    assert req["query"] == {"q": ["E-204 drain pump & filter"], "n": ["5"]}
    assert req["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(s)
    assert len(s.search("x", k=1)) == 1  # at most k


def test_nested_fields_and_custom_key_header(server, api_key):
    s = JsonHttpSearcher(server + "/nested?q={query}", results_path="data.web.items",
                         fields={"title": "meta.name", "text": "body.lines.1", "url": "meta.link", "published": "meta.date"},
                         api_key_env=api_key, api_key_header="X-Subscription-Token", api_key_prefix="")
    chunks = s.search("anything", k=10)
    assert len(chunks) == 1
    assert (chunks[0].title, chunks[0].text, chunks[0].source) == ("Nested one", "second line", "nested.example.com")
    assert chunks[0].metadata["published"] == "2023-05-06"
    assert s.last_skipped == {"no_text": 1}
    assert Handler.seen[-1]["headers"]["X-Subscription-Token"] == SECRET


@pytest.mark.parametrize("path, reason, words", [
    ("/error", "http_status", "HTTP 500"),
    ("/accepted", "http_status", "HTTP 202"),
    ("/missing", "http_status", "HTTP 404"),
    ("/html", "bad_json", "not JSON"),
    ("/shape", "bad_shape", "'results' is a dict, not a list"),
])
def test_failures_raise_websearcherror_without_the_key(server, api_key, path, reason, words):
    s = JsonHttpSearcher(server + path + "?q={query}", api_key_env=api_key)
    with pytest.raises(WebSearchError) as e:
        s.search("E-204", k=3)
    err = e.value
    assert err.reason == reason
    assert words in str(err)
    assert f"{server}{path}?q=E-204" in str(err)  # names the URL
    assert SECRET not in str(err) and SECRET not in repr(err) and SECRET not in err.message
    assert "Traceback" not in str(err)
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # no chained trace
    if path == "/error":
        assert "***" in str(err)  # the echoed key was redacted from the quoted body


def test_timeout(server, api_key):
    s = JsonHttpSearcher(server + "/slow?q={query}", timeout=0.3, api_key_env=api_key)
    t0 = time.monotonic()
    with pytest.raises(WebSearchError) as e:
        s.search("slow", k=3)
    assert time.monotonic() - t0 < 1.4
    assert e.value.reason == "timeout" and "0.3 s" in str(e.value) and SECRET not in str(e.value)


def test_connection_refused(api_key):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = JsonHttpSearcher(f"http://127.0.0.1:{port}/search?q={{query}}", api_key_env=api_key)
    with pytest.raises(WebSearchError) as e:
        s.search("E-204", k=3)
    assert e.value.reason == "connection" and f"127.0.0.1:{port}" in str(e.value) and SECRET not in str(e.value)


def test_missing_key_and_bad_configuration(server, monkeypatch):
    monkeypatch.delenv("CRAG_TEST_NO_SUCH_KEY", raising=False)
    s = JsonHttpSearcher(server + "/search?q={query}", api_key_env="CRAG_TEST_NO_SUCH_KEY")
    with pytest.raises(WebSearchError) as e:
        s.search("x", k=3)
    assert e.value.reason == "config" and "CRAG_TEST_NO_SUCH_KEY" in str(e.value)
    with pytest.raises(ValueError, match="query"):
        JsonHttpSearcher(server + "/search")
    with pytest.raises(ValueError, match="unknown fields"):
        JsonHttpSearcher(server + "/search?q={query}", fields={"body": "x"})


def test_redact_url_and_domain_of():
    assert redact_url("https://u:pw@api.example.com/s?q=a&api_key=abc&token=t") == \
        "https://api.example.com/s?q=a&api_key=***&token=***"
    assert redact_url("https://x.com/s?q=sk-1", ("sk-1",)) == "https://x.com/s?q=***"
    assert domain_of("https://www.Example.com:8080/x") == "example.com"
    assert domain_of("forum.example.com") == "forum.example.com"
    assert domain_of("") == ""


# ---------------------------------------------------------------------------------------------
# keyword_query
# ---------------------------------------------------------------------------------------------


def test_keyword_query_keeps_codes_first_and_drops_question_words():
    assert keyword_query("What does error E-204 mean on the XR-7000?") == "E-204 XR-7000 error"
    assert keyword_query("How heavy is the E-204 v2.1 in kg?") == "E-204 v2.1 heavy kg"
    q = keyword_query('Who wrote "The Old Man and the Sea" in 1952?')
    assert q == 'wrote "The Old Man and the Sea" 1952'
    assert keyword_query("what is the capital of New York State") == "capital New York State"
    assert keyword_query("Tell me about Marie Curie's discoveries in Paris") == "Marie Curie discoveries Paris"


def test_keyword_query_limits_terms_but_never_drops_codes():
    q = "Which firmware fixes E-204 and E-301 on the XR-7000 dishwasher pump motor bearings quickly?"
    out = keyword_query(q, max_terms=2)
    assert out.split()[:3] == ["E-204", "E-301", "XR-7000"]
    assert len(out.split()) == 5
    assert keyword_query(q, max_terms=2) == out  # deterministic
    # names and numbers outrank plain words
    assert keyword_query("when did the battery of the Tesla Model 3 get 75 kWh cells", max_terms=2) == "Tesla Model 3"
    assert keyword_query("Why?") == "Why?"  # nothing left: the question itself
    with pytest.raises(ValueError):
        keyword_query("x", max_terms=0)


# ---------------------------------------------------------------------------------------------
# rounds
# ---------------------------------------------------------------------------------------------

FEEDBACK = [
    "The E-204 error indicates a blocked drain pump on the XR-7000 dishwasher.",
    "Clean the drain pump filter to clear E-204.",
]


def test_rewrite_query_keeps_codes_and_adds_a_new_term_each_round():
    question = "What does error E-204 mean?"
    previous = [keyword_query(question)]
    seen_terms = set(previous[0].lower().split())
    for _ in range(3):
        q = rewrite_query(question, previous, FEEDBACK)
        assert q is not None
        assert "E-204" in q.split()
        new = set(q.lower().split()) - set(" ".join(previous).lower().split())
        assert new, f"{q!r} adds nothing to {previous}"
        assert not new & seen_terms
        seen_terms |= new
        previous.append(q)
    assert rewrite_query(question, previous, FEEDBACK) is not None  # still words left
    assert rewrite_query(question, previous + ["indicates blocked XR-7000 dishwasher clean filter clear"], FEEDBACK) is None


def test_rewrite_query_picks_frequent_terms_first_and_returns_none_without_feedback():
    q = rewrite_query("What does error E-204 mean?", ["error E-204"], FEEDBACK, new_terms=2)
    assert q == "E-204 error drain pump"  # in both feedback texts
    assert rewrite_query("What does error E-204 mean?", ["error E-204"], []) is None
    assert rewrite_query("What does error E-204 mean?", ["error E-204"], ["the of and E-204 error 42"]) is None
    # the question's codes survive even when previous queries dropped them
    assert rewrite_query("Fix E-204 on v2.1", ["pump"], ["firmware update"]).split()[:2] == ["E-204", "v2.1"]


def test_overlap_and_stop_rules():
    assert MAX_ROUNDS == 3 and OVERLAP_STOP == 0.7
    assert results_overlap(["a", "b", "c"], ["a", "b", "x"]) == pytest.approx(2 / 3)
    assert results_overlap(["a", "a", "b"], ["a"]) == 0.5  # distinct new results
    assert results_overlap([], ["a"]) == 1.0  # an empty round brings nothing new
    ids = [f"d{i}" for i in range(10)]
    assert results_overlap(ids, ids[:7]) == 0.7

    assert should_stop(1, results_overlap(ids, ids[:7]))  # 70%: stop
    assert should_stop(2, 0.7) and stop_reason(2, 0.7) == "overlap"
    assert not should_stop(2, 0.69)
    assert not should_stop(1, None)
    assert should_stop(3, 0.0) and stop_reason(3, 0.0) == "max_rounds"  # at most 3 rounds
    assert not should_stop(2, 0.0)
    assert stop_reason(1, 0.1, next_query=None) == "no_new_term"
    with pytest.raises(ValueError):
        should_stop(0, 0.1)
    with pytest.raises(ValueError):
        should_stop(1, 1.5)
