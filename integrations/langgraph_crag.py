"""The CRAG graph of LangGraph's corrective-RAG tutorial, with our retrieval evaluator as its
grading node instead of an LLM asked "is this document relevant? yes/no" per document::

    from integrations.langgraph_crag import build_crag_graph

    graph = build_crag_graph(vectorstore.as_retriever(), ChatOpenAI(model="gpt-4o-mini"),
                             evaluator="exports/evaluator", extractor="exports/extractor",
                             web_search=lambda q: [d["content"] for d in tavily.search(q)["results"]])
    out = graph.invoke({"question": "who wrote hamlet"})
    out["generation"], out["action"], out["documents"]

retrieve -> grade -> (generate | web_search -> generate | abstain):

* ``grade``: one call of the evaluator for all the retrieved documents (:func:`integrations._common.route`):
  Incorrect ones dropped, Ambiguous ones refined to their key sentences (with an extractor),
  Correct ones kept; ``action`` is the query's CRAG action.
* some documents kept: ``generate`` answers from them with the chat model.
* nothing kept (Incorrect): ``web_search(question)`` when given, then ``generate`` from its
  results; without one (or when it finds nothing) ``abstain`` answers ``abstain_answer`` and the
  chat model is not called. With ``search_on_ambiguous=True`` an Ambiguous query also searches and
  generates from the refined documents and the results together (the CRAG paper's Ambiguous action).

Needs ``langgraph`` and ``langchain-core``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TypedDict

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda
from langgraph.graph import END, START, StateGraph

from .langchain import CragCompressor

# the tutorial's prompt (LangChain hub's rlm/rag-prompt)
RAG_PROMPT = ChatPromptTemplate.from_messages([(
    "human",
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved context "
    "to answer the question. If you don't know the answer, just say that you don't know. Use three "
    "sentences maximum and keep the answer concise.\nQuestion: {question} \nContext: {context} \nAnswer:",
)])

ABSTAIN_ANSWER = "I don't know: none of the retrieved documents is relevant to the question."


class CragState(TypedDict, total=False):
    """The graph's state: the ``question`` in; the ``documents`` (retrieved, then those kept and
    any web results), the query's CRAG ``action``, ``web_search`` (whether it ran) and the
    ``generation`` out."""

    question: str
    documents: list[Document]
    action: str
    web_search: bool
    generation: str


def _as_documents(found: Any) -> list[Document]:
    """A web search's results as Documents: Documents, strings, or one string."""
    if found is None:
        return []
    if isinstance(found, (str, Document)):
        found = [found]
    out = []
    for f in found:
        doc = f if isinstance(f, Document) else Document(page_content=str(f))
        if doc.page_content.strip():
            out.append(doc.model_copy(update={"metadata": {**doc.metadata, "crag_source": "web_search"}}))
    return out


def _format_docs(docs: Sequence[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def build_crag_graph(retriever: Any, llm: Any, evaluator: Any = None, extractor: Any = None,
                     base_url: Optional[str] = None, web_search: Optional[Callable[[str], Any]] = None, *,
                     api_key: Optional[str] = None, theta_high: Optional[float] = None,
                     theta_low: Optional[float] = None, top_k: Optional[int] = None, device: Optional[str] = None,
                     search_on_ambiguous: bool = False, prompt: Any = None,
                     abstain_answer: str = ABSTAIN_ANSWER, checkpointer: Any = None):
    """The compiled CRAG graph (a LangGraph ``CompiledStateGraph``: ``invoke`` / ``ainvoke`` /
    ``stream`` it with ``{"question": ...}``).

    ``retriever``: a LangChain retriever or any runnable or callable from the question to a list of
    Documents. ``llm``: a chat model (or any runnable taking the prompt's messages). ``evaluator``,
    ``extractor``, ``base_url``, ``api_key``, ``theta_high``, ``theta_low``, ``top_k``, ``device``: as
    for :class:`~integrations.langchain.CragCompressor` (a ready ``CragCompressor`` may be given as
    ``evaluator``). ``web_search``: a callable from the question to Documents or strings.
    ``prompt``: a prompt template with ``{question}`` and ``{context}`` (default: the tutorial's).
    """
    if isinstance(evaluator, CragCompressor):
        crag = evaluator
    else:
        crag = CragCompressor(evaluator=evaluator, extractor=extractor, base_url=base_url, api_key=api_key,
                              theta_high=theta_high, theta_low=theta_low, top_k=top_k, device=device)
    if not isinstance(retriever, Runnable):
        if not callable(retriever):
            raise TypeError(f"retriever must be a retriever, a runnable or a callable, got {type(retriever).__name__}")
        retriever = RunnableLambda(retriever)
    rag_chain = (prompt if prompt is not None else RAG_PROMPT) | llm | StrOutputParser()

    def retrieve(state: CragState) -> dict:
        return {"documents": list(retriever.invoke(state["question"]))}

    def grade(state: CragState) -> dict:
        action, kept = crag.grade_documents(state.get("documents") or [], state["question"])
        return {"documents": kept, "action": action, "web_search": False}

    def search(state: CragState) -> dict:
        found = _as_documents(web_search(state["question"]))
        return {"documents": [*(state.get("documents") or []), *found], "web_search": True}

    def generate(state: CragState) -> dict:
        return {"generation": rag_chain.invoke({"question": state["question"],
                                                "context": _format_docs(state["documents"])})}

    def abstain(state: CragState) -> dict:
        return {"generation": abstain_answer}

    def after_grade(state: CragState) -> str:
        if state["documents"] and not (search_on_ambiguous and state["action"] == "Ambiguous"
                                       and web_search is not None):
            return "generate"
        return "web_search" if web_search is not None else "abstain"

    def after_search(state: CragState) -> str:
        return "generate" if state["documents"] else "abstain"

    g = StateGraph(CragState)
    g.add_node("retrieve", retrieve)
    g.add_node("grade", grade)
    g.add_node("generate", generate)
    g.add_node("abstain", abstain)
    g.add_edge(START, "retrieve")
    g.add_edge("retrieve", "grade")
    routes = {"generate": "generate", "abstain": "abstain"}
    if web_search is not None:
        g.add_node("web_search", search)
        routes["web_search"] = "web_search"
        g.add_conditional_edges("web_search", after_search, {"generate": "generate", "abstain": "abstain"})
    g.add_conditional_edges("grade", after_grade, routes)
    g.add_edge("generate", END)
    g.add_edge("abstain", END)
    return g.compile(checkpointer=checkpointer)
