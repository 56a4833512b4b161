"""CRAG as a LangChain document compressor: grade the retrieved documents for the query, drop the
Incorrect ones, refine the Ambiguous ones to their key sentences (with an extractor), keep the
Correct ones::

    from langchain_classic.retrievers import ContextualCompressionRetriever
    from integrations.langchain import CragCompressor

    crag = CragCompressor(evaluator="exports/evaluator", extractor="exports/extractor")
    # or CragCompressor(base_url="http://127.0.0.1:8080", api_key=...)   (python -m inference serve)
    retriever = ContextualCompressionRetriever(base_compressor=crag, base_retriever=vectorstore.as_retriever())
    docs = retriever.invoke("who wrote hamlet")

Each kept document is a copy (the input documents are left as they are) whose metadata has
``crag_score`` (the calibrated relevance probability) and ``crag_action`` (``Correct`` or
``Ambiguous``); the documents keep their retrieval order. Needs ``langchain-core``; the
``ContextualCompressionRetriever`` of LangChain 1.x is in ``langchain-classic``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field, PrivateAttr

from ._common import resolve_models, route


class CragCompressor(BaseDocumentCompressor):
    """CRAG's routing of a query's documents with our retrieval evaluator (and, for Ambiguous
    documents, our key-sentence extractor).

    ``evaluator`` / ``extractor``: an export folder (``inference.load``) or a loaded model;
    ``base_url`` (and ``api_key``): a server's models instead (its extractor when it serves one,
    unless ``extractor`` is ``False``; ``True`` requires one). ``theta_high`` / ``theta_low``:
    override the export's thresholds; ``top_k``: the extractor's number of sentences (default: its
    manifest's); ``device``: where local exports run.

    The async path (``acompress_documents``, so ``ContextualCompressionRetriever.ainvoke``) is the
    base class's: the grading runs in the event loop's executor, off the loop.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    evaluator: Any = Field(default=None, description="Evaluator export folder or loaded evaluator.")
    extractor: Any = Field(default=None, description="Extractor export folder or loaded extractor (optional).")
    base_url: Optional[str] = Field(default=None, description="URL of `python -m inference serve` instead.")
    api_key: Optional[str] = Field(default=None, description="The server's API key.", repr=False, exclude=True)
    theta_high: Optional[float] = Field(default=None, description="Correct at or above (default: the export's).")
    theta_low: Optional[float] = Field(default=None, description="Incorrect below (default: the export's).")
    top_k: Optional[int] = Field(default=None, description="Sentences kept of an Ambiguous document.")
    device: Optional[str] = Field(default=None, description="Device for local exports.")

    _evaluator: Any = PrivateAttr(default=None)
    _extractor: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._evaluator, self._extractor = resolve_models(self.evaluator, self.extractor, self.base_url,
                                                          self.api_key, self.device)

    def grade_documents(self, documents: Sequence[Document], query: str) -> tuple[str, list[Document]]:
        """The query's CRAG action (``Correct`` / ``Ambiguous`` / ``Incorrect``) and the documents
        kept (copies with ``crag_score`` and ``crag_action``), in retrieval order."""
        documents = list(documents)
        if not documents:
            return "Incorrect", []
        texts = [d.page_content for d in documents]
        action, kept = route(self._evaluator, self._extractor, query, texts,
                             theta_high=self.theta_high, theta_low=self.theta_low, top_k=self.top_k)
        out = []
        for r in kept:
            doc = documents[r.index]
            out.append(doc.model_copy(update={
                "page_content": r.text,
                "metadata": {**doc.metadata, "crag_score": r.score, "crag_action": r.action},
            }))
        return action, out

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        """Incorrect documents dropped, Ambiguous ones refined (with an extractor), Correct ones kept."""
        return self.grade_documents(documents, query)[1]
