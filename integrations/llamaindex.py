"""CRAG as a LlamaIndex node postprocessor: grade the retrieved nodes for the query, drop the
Incorrect ones, refine the Ambiguous ones to their key sentences (with an extractor), keep the
Correct ones::

    from integrations.llamaindex import CragPostprocessor

    crag = CragPostprocessor(evaluator="exports/evaluator", extractor="exports/extractor")
    # or CragPostprocessor(base_url="http://127.0.0.1:8080", api_key=...)   (python -m inference serve)
    engine = index.as_query_engine(node_postprocessors=[crag])

Each kept node is a copy (the input nodes are left as they are) whose ``score`` is the calibrated
relevance probability and whose metadata has ``crag_score`` and ``crag_action``; the nodes keep
their retrieval order. Needs ``llama-index-core``.
"""

from __future__ import annotations

from typing import Any, List, Optional

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from ._common import resolve_models, route

_KEYS = ("crag_score", "crag_action")


class CragPostprocessor(BaseNodePostprocessor):
    """CRAG's routing of a query's nodes with our retrieval evaluator (and, for Ambiguous nodes,
    our key-sentence extractor).

    ``evaluator`` / ``extractor``: an export folder (``inference.load``) or a loaded model;
    ``base_url`` (and ``api_key``): a server's models instead (its extractor when it serves one,
    unless ``extractor`` is ``False``). ``theta_high`` / ``theta_low``: override the export's
    thresholds; ``top_k``: the extractor's number of sentences (default: its manifest's).
    """

    evaluator: Any = Field(default=None, description="Evaluator export folder or loaded evaluator.")
    extractor: Any = Field(default=None, description="Extractor export folder or loaded extractor (optional).")
    base_url: Optional[str] = Field(default=None, description="URL of `python -m inference serve` instead.")
    api_key: Optional[str] = Field(default=None, description="The server's API key.", repr=False, exclude=True)
    theta_high: Optional[float] = Field(default=None, description="Correct at or above (default: the export's).")
    theta_low: Optional[float] = Field(default=None, description="Incorrect below (default: the export's).")
    top_k: Optional[int] = Field(default=None, description="Sentences kept of an Ambiguous node.")
    device: Optional[str] = Field(default=None, description="Device for local exports.")

    _evaluator: Any = PrivateAttr(default=None)
    _extractor: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._evaluator, self._extractor = resolve_models(self.evaluator, self.extractor, self.base_url,
                                                          self.api_key, self.device)

    @classmethod
    def class_name(cls) -> str:
        return "CragPostprocessor"

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("CragPostprocessor needs the query (a query_bundle or query_str)")
        if not nodes:
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        _, kept = route(self._evaluator, self._extractor, query_bundle.query_str, texts,
                        theta_high=self.theta_high, theta_low=self.theta_low, top_k=self.top_k)
        out = []
        for r in kept:
            node = nodes[r.index].node.model_copy()
            node.metadata = {**node.metadata, "crag_score": r.score, "crag_action": r.action}
            # the grade is for the pipeline, not for the LLM's context or an embedding
            node.excluded_llm_metadata_keys = list(dict.fromkeys([*node.excluded_llm_metadata_keys, *_KEYS]))
            node.excluded_embed_metadata_keys = list(dict.fromkeys([*node.excluded_embed_metadata_keys, *_KEYS]))
            if r.text != texts[r.index]:
                node.set_content(r.text)
            out.append(NodeWithScore(node=node, score=r.score))
        return out
