"""LLM-labelled cold-start data: ``python -m data_prep label``.

Unlabelled (query, passage) pairs from any pair reader go to a chat model with a versioned prompt
per task (:mod:`.prompts`); each reply is parsed and validated (:mod:`.answers`), asked again with the
error shown when it is not the requested JSON, and written as it arrives (:mod:`.store`).

================  ====================================================================
module            what it does
================  ====================================================================
``prompts``       the prompt files (``prompts/<task>.yaml``) and the chat messages
``answers``       JSON reply parsing and validation per task
``backends``      an OpenAI-compatible server (async HTTP, retries, rate limit, several
                  servers) and a local transformers chat model (batched generation)
``store``         the output folder as a cache: append and flush, resume, partial lines
``runner``        one run: items, cache keys, concurrency, samples, summary
``agreement``     accuracy, Cohen's kappa and the confusion table against gold labels
``command``       the command line
``loopback``      a scripted chat-completions server on loopback (tests, benchmark)
================  ====================================================================

Outputs in ``--output DIR``: ``labels.jsonl`` (:class:`~data_prep.records.LabelledPair` lines,
``label_source = "llm"``, with the model, prompt id and version, cache key, reasons and raw replies
in ``metadata["llm"]``), ``failures.jsonl`` (input, reason, message, last raw reply),
``summary.json`` (done, cached, failed by reason, requests, retries, tokens, wall time, agreement
with gold) and ``run.json`` (the settings the folder's labels were made with).
"""

from .backends import BackendError, OpenAIBackend, TransformersBackend
from .prompts import TASKS, load_prompt
from .runner import LabelConfig, label

__all__ = ["BackendError", "LabelConfig", "OpenAIBackend", "TASKS", "TransformersBackend", "label", "load_prompt"]
