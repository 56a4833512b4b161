"""Unmodified LangChain and LlamaIndex reranker clients, configured for a Cohere- or TEI-style
reranker at our server's URL, get our scores: langchain_cohere.CohereRerank (the cohere SDK's
ClientV2, ``/v2/rerank``), the cohere SDK's v1 Client (``/v1/rerank``) and llama-index's
TextEmbeddingInference postprocessor (``/rerank``); with an API key, the right key works and a
wrong one is a 401."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from conftest import live_server  # noqa: E402

import inference  # noqa: E402
from inference.serving.app import ServeSettings  # noqa: E402

QUERY = "who wrote the novel war and peace"
TEXTS = [
    "War and Peace is a novel by Leo Tolstoy, published in 1869.",
    "The river flows through the old city and boats carry goods.",
    "Tolstoy was a Russian writer who also wrote Anna Karenina.",
    "The 2004 summer olympics were held in athens greece.",
    "A novel is a long work of narrative fiction written in prose.",
]
KEY_ENV = "CRAG_TEST_CLIENTS_KEY"
KEY = "s3cret-key-for-tests"


@pytest.fixture(scope="module")
def ours(ce_export) -> list[float]:
    scores = inference.load(ce_export).score([(QUERY, t) for t in TEXTS])
    assert len(set(scores)) == len(scores), scores  # the clients' orderings are then well defined
    return scores


@pytest.fixture(scope="module")
def server(ce_export):
    with live_server(ServeSettings(model=str(ce_export))) as url:
        yield url


@pytest.fixture
def keyed_server(ce_export, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with live_server(ServeSettings(model=str(ce_export), api_key_env=KEY_ENV)) as url:
        yield url


def best_first(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: -scores[i])


# -- LangChain: langchain_cohere.CohereRerank -------------------------------------------------------
def test_langchain_cohere_rerank(server, ours):
    cohere = pytest.importorskip("cohere")
    lc = pytest.importorskip("langchain_cohere")
    from langchain_core.documents import Document

    docs = [Document(page_content=t, metadata={"i": i}) for i, t in enumerate(TEXTS)]
    # a cohere ClientV2 pointed at our server, handed to the compressor ...
    client = cohere.ClientV2(api_key="unused", base_url=server)
    out = lc.CohereRerank(client=client, model="crag-evaluator", top_n=3).compress_documents(docs, QUERY)
    assert [d.metadata["i"] for d in out] == best_first(ours)[:3]
    for d in out:
        assert d.page_content == TEXTS[d.metadata["i"]]
        assert d.metadata["relevance_score"] == pytest.approx(ours[d.metadata["i"]], abs=1e-6)
    assert all("relevance_score" not in d.metadata for d in docs)
    # ... or the compressor's own base_url; all the documents with top_n=None
    rr = lc.CohereRerank(base_url=server, cohere_api_key="unused", model="crag-evaluator", top_n=None)
    ranked = rr.rerank(TEXTS, QUERY)
    assert [r["index"] for r in ranked] == best_first(ours)
    assert [r["relevance_score"] for r in ranked] == pytest.approx([ours[i] for i in best_first(ours)], abs=1e-6)


def test_cohere_v1_client(server, ours):
    cohere = pytest.importorskip("cohere")
    res = cohere.Client(api_key="unused", base_url=server).rerank(
        model="crag-evaluator", query=QUERY, documents=TEXTS, top_n=2, return_documents=True, max_chunks_per_doc=4)
    assert [r.index for r in res.results] == best_first(ours)[:2]
    for r in res.results:
        assert r.relevance_score == pytest.approx(ours[r.index], abs=1e-6)
        assert r.document.text == TEXTS[r.index]


# -- LlamaIndex: llama_index.postprocessor.tei_rerank.TextEmbeddingInference ------------------------
def tei_nodes():
    from llama_index.core.schema import NodeWithScore, TextNode

    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=0.0) for i, t in enumerate(TEXTS)]


def test_llamaindex_tei_rerank(server, ours):
    tei = pytest.importorskip("llama_index.postprocessor.tei_rerank")
    from llama_index.core.schema import QueryBundle

    out = tei.TextEmbeddingInference(base_url=server, top_n=len(TEXTS)).postprocess_nodes(tei_nodes(), QueryBundle(QUERY))
    assert [n.node.node_id for n in out] == [f"n{i}" for i in best_first(ours)]
    for n in out:
        assert n.score == pytest.approx(ours[int(n.node.node_id[1:])], abs=1e-6)
    top2 = tei.TextEmbeddingInference(base_url=server, top_n=2).postprocess_nodes(tei_nodes(), query_str=QUERY)
    assert [n.node.node_id for n in top2] == [f"n{i}" for i in best_first(ours)[:2]]


# -- with an API key ----------------------------------------------------------------------------
def test_cohere_clients_with_an_api_key(keyed_server, ours):
    cohere = pytest.importorskip("cohere")
    lc = pytest.importorskip("langchain_cohere")
    from cohere.core.api_error import ApiError
    from langchain_core.documents import Document

    rr = lc.CohereRerank(base_url=keyed_server, cohere_api_key=KEY, model="crag-evaluator", top_n=None)
    assert [r["relevance_score"] for r in rr.rerank(TEXTS, QUERY)] == \
           pytest.approx([ours[i] for i in best_first(ours)], abs=1e-6)
    docs = [Document(page_content=t) for t in TEXTS]
    with pytest.raises(ApiError) as e:
        lc.CohereRerank(base_url=keyed_server, cohere_api_key="wrong", model="crag-evaluator").compress_documents(docs, QUERY)
    assert e.value.status_code == 401
    with pytest.raises(ApiError) as e:
        cohere.Client(api_key="wrong", base_url=keyed_server).rerank(model="m", query=QUERY, documents=TEXTS)
    assert e.value.status_code == 401
    assert KEY not in str(e.value)


def test_tei_client_with_an_api_key(keyed_server, ours):
    import httpx

    tei = pytest.importorskip("llama_index.postprocessor.tei_rerank")

    # the client sends auth_token as the Authorization header as it is
    out = tei.TextEmbeddingInference(base_url=keyed_server, top_n=len(TEXTS), auth_token=f"Bearer {KEY}") \
        .postprocess_nodes(tei_nodes(), query_str=QUERY)
    assert [n.score for n in out] == pytest.approx([ours[i] for i in best_first(ours)], abs=1e-6)
    # a callable token too
    out = tei.TextEmbeddingInference(base_url=keyed_server, top_n=1, auth_token=lambda url: f"Bearer {KEY}") \
        .postprocess_nodes(tei_nodes(), query_str=QUERY)
    assert [n.node.node_id for n in out] == [f"n{best_first(ours)[0]}"]
    # a wrong key: the server answers 401 (the client does not check the status, and fails on the body)
    with pytest.raises(Exception):
        tei.TextEmbeddingInference(base_url=keyed_server, auth_token="Bearer wrong").postprocess_nodes(
            tei_nodes(), query_str=QUERY)
    metrics = httpx.get(f"{keyed_server}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    assert 'crag_requests_total{endpoint="/rerank",status="401"} 1.0' in metrics
    assert 'crag_requests_total{endpoint="/rerank",status="200"} 2.0' in metrics
    r = httpx.post(f"{keyed_server}/rerank", json={"query": QUERY, "texts": TEXTS}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and KEY not in r.text
