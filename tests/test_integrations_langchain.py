"""integrations.langchain (CragCompressor) and integrations.langgraph_crag (the CRAG graph) with the
real frameworks: langchain-core's compressor base class and fake chat models, langchain-classic's
ContextualCompressionRetriever, LangGraph's StateGraph, and real tiny exports (every score
sigmoid(b): b=3 Correct, b=0 Ambiguous, b=-3 Incorrect under the 0.7 / 0.3 thresholds)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")

from conftest import live_server, write_export  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import BaseDocumentCompressor, Document  # noqa: E402
from langchain_core.language_models import FakeListChatModel, GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from integrations.langchain import CragCompressor  # noqa: E402

PASSAGE = ("Hamlet is a tragedy. It was written by William Shakespeare. It is set in Denmark. "
           "The play was first performed around 1600. It is his longest play.")
QUERY = "who wrote hamlet"


@pytest.fixture(scope="module")
def exports(tiny_bert, tmp_path_factory):
    d = tmp_path_factory.mktemp("lc-exports")
    return {"correct": write_export(tiny_bert, d / "correct", "evaluator", 3.0),
            "ambiguous": write_export(tiny_bert, d / "ambiguous", "evaluator", 0.0),
            "incorrect": write_export(tiny_bert, d / "incorrect", "evaluator", -3.0),
            "extractor": write_export(tiny_bert, d / "extractor", "extractor", 0.0)}


@pytest.fixture(scope="module")
def models(exports):
    import inference

    return {k: inference.load(v, task="extractor" if k == "extractor" else "evaluator") for k, v in exports.items()}


def docs() -> list[Document]:
    return [Document(page_content=PASSAGE, metadata={"source": "a"}, id="d0"),
            Document(page_content="Denmark is a country in Europe.", metadata={"source": "b"}, id="d1")]


class FixedRetriever(BaseRetriever):
    """A real LangChain retriever that returns the same documents for every query."""

    documents: list[Document]

    def _get_relevant_documents(self, query, *, run_manager):
        return [d.model_copy() for d in self.documents]


class ChatStarts(BaseCallbackHandler):
    """Records the messages each chat model call was given."""

    def __init__(self):
        self.calls = []

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.calls.append(messages)


def test_compressor_is_a_langchain_compressor(exports):
    crag = CragCompressor(evaluator=str(exports["correct"]))
    assert isinstance(crag, BaseDocumentCompressor)
    with pytest.raises(ValueError, match="evaluator is needed"):
        CragCompressor()
    with pytest.raises(TypeError, match="export folder"):
        CragCompressor(evaluator=object())


def test_correct_documents_kept_with_metadata(exports):
    crag = CragCompressor(evaluator=exports["correct"])
    given = docs()
    out = crag.compress_documents(given, QUERY)
    assert [d.page_content for d in out] == [PASSAGE, "Denmark is a country in Europe."]
    assert [d.id for d in out] == ["d0", "d1"]
    for d, src in zip(out, "ab"):
        assert d.metadata["source"] == src
        assert d.metadata["crag_action"] == "Correct"
        assert d.metadata["crag_score"] == pytest.approx(0.9526, abs=1e-3)  # sigmoid(3)
    assert given == docs()  # the input documents are left as they were
    assert all(d is not g for d, g in zip(out, given))


def test_incorrect_documents_dropped(models):
    crag = CragCompressor(evaluator=models["incorrect"], extractor=models["extractor"])
    assert crag.compress_documents(docs(), QUERY) == []
    assert crag.grade_documents(docs(), QUERY)[0] == "Incorrect"
    assert crag.compress_documents([], QUERY) == []


def test_ambiguous_documents_refined_by_extractor(models):
    crag = CragCompressor(evaluator=models["ambiguous"], extractor=models["extractor"], top_k=2)
    action, out = crag.grade_documents(docs(), QUERY)
    assert action == "Ambiguous"
    refined = out[0]
    assert refined.metadata["crag_action"] == "Ambiguous"
    assert refined.metadata["crag_score"] == pytest.approx(0.5)
    assert len(refined.page_content) < len(PASSAGE)
    # the key sentences are the passage's own (ties: the first two, in passage order)
    sents = [s.text for s in models["extractor"].sentences(PASSAGE)]
    assert len(sents) == 5
    assert refined.page_content == " ".join(sents[:2])
    # without an extractor an Ambiguous document is kept whole
    whole = CragCompressor(evaluator=models["ambiguous"]).compress_documents(docs(), QUERY)
    assert whole[0].page_content == PASSAGE and whole[0].metadata["crag_action"] == "Ambiguous"


def test_thresholds_override_and_blank_documents(models):
    crag = CragCompressor(evaluator=models["ambiguous"], theta_high=0.4, theta_low=0.1)
    given = [Document(page_content="   "), *docs()]
    out = crag.compress_documents(given, QUERY)  # the blank one is dropped, not sent to the model
    assert [d.id for d in out] == ["d0", "d1"]
    assert {d.metadata["crag_action"] for d in out} == {"Correct"}


def test_contextual_compression_retriever_end_to_end(models):
    ccr_mod = pytest.importorskip("langchain_classic.retrievers")
    base = FixedRetriever(documents=[*docs(), Document(page_content="Paris is in France.", id="d2")])

    keep = ccr_mod.ContextualCompressionRetriever(
        base_compressor=CragCompressor(evaluator=models["correct"]), base_retriever=base)
    got = keep.invoke(QUERY)
    assert [d.id for d in got] == ["d0", "d1", "d2"]
    assert all(d.metadata["crag_action"] == "Correct" for d in got)
    assert [d.id for d in asyncio.run(keep.ainvoke(QUERY))] == ["d0", "d1", "d2"]

    drop = ccr_mod.ContextualCompressionRetriever(
        base_compressor=CragCompressor(evaluator=models["incorrect"]), base_retriever=base)
    assert drop.invoke(QUERY) == []

    refine = ccr_mod.ContextualCompressionRetriever(
        base_compressor=CragCompressor(evaluator=models["ambiguous"], extractor=models["extractor"], top_k=1),
        base_retriever=base)
    got = asyncio.run(refine.ainvoke(QUERY))
    assert got[0].page_content == "Hamlet is a tragedy."
    assert base.documents[0].page_content == PASSAGE


def test_remote_compressor_against_live_server(exports, models):
    from inference.serving.app import ServeSettings

    settings = ServeSettings(model=str(exports["ambiguous"]), extractor=str(exports["extractor"]))
    with live_server(settings) as url:
        crag = CragCompressor(base_url=url, top_k=2)  # the server's extractor, found through /info
        action, out = crag.grade_documents(docs(), QUERY)
        assert action == "Ambiguous"
        local = CragCompressor(evaluator=models["ambiguous"], extractor=models["extractor"], top_k=2)
        assert [(d.page_content, d.metadata) for d in out] == \
               [(d.page_content, pytest.approx(d.metadata)) for d in local.compress_documents(docs(), QUERY)]
        with pytest.raises(ValueError, match="not both"):
            CragCompressor(evaluator=models["ambiguous"], base_url=url)
        no_ext = CragCompressor(base_url=url, extractor=False)
        assert no_ext.compress_documents(docs(), QUERY)[0].page_content == PASSAGE


# -- the LangGraph CRAG graph -------------------------------------------------------------------------
def test_graph_correct_path_generates(models):
    from integrations.langgraph_crag import build_crag_graph

    searched = []
    llm = GenericFakeChatModel(messages=iter([AIMessage(content="William Shakespeare.")]))
    graph = build_crag_graph(FixedRetriever(documents=docs()), llm, evaluator=models["correct"],
                             web_search=lambda q: searched.append(q) or ["unused"])
    starts = ChatStarts()
    out = graph.invoke({"question": QUERY}, config={"callbacks": [starts]})
    assert out["generation"] == "William Shakespeare."
    assert out["action"] == "Correct"
    assert out["web_search"] is False and searched == []
    assert [d.id for d in out["documents"]] == ["d0", "d1"]
    [[messages]] = starts.calls
    prompt = messages[0].content
    assert QUERY in prompt and PASSAGE in prompt


def test_graph_ambiguous_path_generates_from_refined(models):
    from integrations.langgraph_crag import build_crag_graph

    llm = FakeListChatModel(responses=["Shakespeare."])
    graph = build_crag_graph(FixedRetriever(documents=docs()), llm, evaluator=models["ambiguous"],
                             extractor=models["extractor"], top_k=1)
    starts = ChatStarts()
    out = graph.invoke({"question": QUERY}, config={"callbacks": [starts]})
    assert (out["action"], out["generation"]) == ("Ambiguous", "Shakespeare.")
    prompt = starts.calls[0][0][0].content
    assert "Hamlet is a tragedy." in prompt and "It is set in Denmark." not in prompt
    assert "It was written by William Shakespeare." not in prompt


def test_graph_incorrect_path_web_search(models):
    from integrations.langgraph_crag import build_crag_graph

    searched = []

    def web_search(q):
        searched.append(q)
        return [Document(page_content="Hamlet was written by Shakespeare around 1600.", metadata={"url": "u"})]

    llm = FakeListChatModel(responses=["Shakespeare wrote it."])
    graph = build_crag_graph(FixedRetriever(documents=docs()), llm, evaluator=models["incorrect"],
                             web_search=web_search)
    starts = ChatStarts()
    out = graph.invoke({"question": QUERY}, config={"callbacks": [starts]})
    assert searched == [QUERY]
    assert out["action"] == "Incorrect" and out["web_search"] is True
    assert out["generation"] == "Shakespeare wrote it."
    assert [d.metadata for d in out["documents"]] == [{"url": "u", "crag_source": "web_search"}]
    prompt = starts.calls[0][0][0].content
    assert "around 1600" in prompt and PASSAGE not in prompt


def test_graph_incorrect_path_abstains_without_search(models):
    from integrations.langgraph_crag import ABSTAIN_ANSWER, build_crag_graph

    llm = FakeListChatModel(responses=["should not be called"])
    graph = build_crag_graph(FixedRetriever(documents=docs()), llm, evaluator=models["incorrect"])
    starts = ChatStarts()
    out = graph.invoke({"question": QUERY}, config={"callbacks": [starts]})
    assert out["generation"] == ABSTAIN_ANSWER and out["documents"] == [] and starts.calls == []
    # a search that finds nothing abstains as well
    graph = build_crag_graph(lambda q: docs(), llm, evaluator=models["incorrect"], web_search=lambda q: [],
                             abstain_answer="no idea")
    out = asyncio.run(graph.ainvoke({"question": QUERY}, config={"callbacks": [starts]}))
    assert out["generation"] == "no idea" and out["web_search"] is True and starts.calls == []


def test_graph_search_on_ambiguous_adds_web_results(models):
    from integrations.langgraph_crag import build_crag_graph

    llm = FakeListChatModel(responses=["Shakespeare."])
    graph = build_crag_graph(FixedRetriever(documents=docs()), llm, evaluator=models["ambiguous"],
                             extractor=models["extractor"], top_k=1, search_on_ambiguous=True,
                             web_search=lambda q: "Shakespeare wrote Hamlet.")
    out = graph.invoke({"question": QUERY})
    assert out["web_search"] is True
    assert [d.page_content for d in out["documents"]] == ["Hamlet is a tragedy.", "Denmark is a country in Europe.",
                                                          "Shakespeare wrote Hamlet."]
