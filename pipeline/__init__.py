"""A thin Corrective-RAG pipeline on the exported models (``python -m pipeline``).

It loads exports only through :func:`inference.load` and never imports ``training``. Each stage is a
small module behind a small interface, so any of them can be replaced:

================  ==========================================================================
module            stage
================  ==========================================================================
``chunking``      documents -> sentence-aware chunks (256 characters, 32 overlap by default)
``index``         the on-disk index: BM25 (``data_prep.bm25``), dense (faiss over MiniLM), metadata codes
``recall``        hybrid recall: dense + BM25 + metadata routes, weighted reciprocal-rank fusion
``grading``       the evaluator grades the fused list (CRAG's actions); the answer filter
``rounds``        multi-round retrieval: query rewriting and stop rules
``web``           the ``WebSearcher`` interface, a JSON HTTP searcher, keyword queries
``refine``        knowledge refinement: key strips, top 5, original order
``credibility``   source credibility: static scores, time decay, calibration, registered domains
``quantities``    quantity spotting: numbers with units, currencies, scale words (pint conversions)
``conflicts``     conflict notes: evidence items stating different values for the same thing
``generate``      the ``Generator`` interface: extractive (default), local LM, OpenAI-compatible
``core``          :class:`CragPipeline`: the stages in order, stage times, the naive path
``cli``           ``python -m pipeline index | ask | evaluate``
================  ==========================================================================
"""

from .types import ABSTAIN, Answer, Chunk, Conflict, Evidence, GradedChunk, Hit

_CORE = ("CragPipeline", "PipelineConfig", "PipelineError", "PipelineResult")


def __getattr__(name: str):  # the orchestrator (and the models it needs) only when asked for
    if name in _CORE:
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

__all__ = ["ABSTAIN", "Answer", "Chunk", "Conflict", "CragPipeline", "Evidence", "GradedChunk", "Hit",
           "PipelineConfig", "PipelineError", "PipelineResult"]
