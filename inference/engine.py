"""Scoring engine and the evaluator object that :func:`inference.load` returns.

:class:`ScoringEngine` turns many (query, passage) texts into one relevance logit each, for
throughput:

1. tokenise in large chunks with the fast tokenizer (the training :class:`PairEncoder`, so the
   model sees exactly what it was trained on: the passage is truncated, never the query);
2. sort each chunk by token length (longest first, so an out-of-memory error shows at once) and cut
   it into batches under a padded-token budget (``batch_tokens``), so short pairs run in large
   batches and long ones in small;
3. pad each batch to its own longest sequence with vectorised numpy (no per-pair Python on the hot
   path), run it under ``torch.inference_mode`` (optionally bfloat16 autocast), and write the logits
   back at the pairs' input positions;
4. skip work the answer does not need: a cross-encoder's head reads one position of the last layer,
   so that layer runs for that position only (:class:`FirstTokenLayer`; exact up to float
   rounding, about -17% of the compute of a 6-layer model).

:class:`Evaluator` adds the manifest's calibration and thresholds: ``score`` (calibrated
probabilities), ``score_raw`` (``sigmoid(z)``) and ``grade`` (CRAG's Correct / Ambiguous /
Incorrect per chunk and per query).

Empty (or whitespace-only) queries and passages are rejected with ``ValueError`` naming the pair:
there is no relevance to score, and a number for them would look like evidence.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from data_prep.records import Passage
from training.calibration import Calibration
from training.modeling import EncodeStats, EvaluatorSpec, PairEncoder, label_token_ids, relevance_logits

from .loading import Export, ExportError, LoadOptions, load_adapter_model, load_full_model, load_tokenizer, register_task
from .metrics import action_of, query_action

logger = logging.getLogger(__name__)

#: padded tokens per forward pass, by device type. CPU: small enough that a batch's widest
#: activation (feed-forward, 2,048 x 1,536 floats = 12.6 MB for MiniLM) stays in cache: on the
#: 2-core benchmark machine 2,048 and 4,096 tokens score 62-63 pairs/s, 8,192 only 49
#: (docs/benchmarks.md). Accelerators: large.
DEFAULT_BATCH_TOKENS = {"cpu": 2048, "mps": 16384, "cuda": 65536}
DEFAULT_PASSAGE_FORMAT = "{title}. {text}"


#: with the opt-in oneDNN path (``cpu_fast_path=True``), inputs below this many rows (tokens)
#: keep the plain MKL ``nn.Linear`` (as fast or faster for a handful of chunks)
FAST_PATH_MIN_ROWS = 2048


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` on the CPU through oneDNN with the weight pre-packed once, optionally with the
    following activation fused into the matrix product (``attr="gelu"``, exact erf GELU). Inputs of
    fewer than ``min_rows`` rows go through the original layer (kept as ``.linear``)."""

    def __init__(self, linear: torch.nn.Linear, attr: str = "none", algorithm: str = "",
                 min_rows: int = FAST_PATH_MIN_ROWS):
        super().__init__()
        self.linear = linear
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None),
                             persistent=False)
        self.attr, self.algorithm, self.min_rows = attr, algorithm, min_rows
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @property
    def weight(self) -> torch.Tensor:  # some models read ``.weight.dtype``
        return self.linear.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() < self.min_rows * self.in_features:
            y = self.linear(x)
            return torch.nn.functional.gelu(y) if self.attr == "gelu" else y
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.linear.bias, self.attr, [], self.algorithm)


def cpu_fast_path_available() -> bool:
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def pack_linears(model: torch.nn.Module, swapped: list[tuple[torch.nn.Module, str, torch.nn.Module]]) -> None:
    """Swap every ``nn.Linear`` of ``model`` for a :class:`PackedLinear`, fusing the exact GELU of
    BERT-style ``intermediate`` blocks (``dense`` + ``intermediate_act_fn``). What was replaced is
    appended to ``swapped`` as ``(parent, attribute, original)`` as it happens, so that
    :func:`unpack_linears` can undo it even after a failure halfway."""
    for mod in list(model.modules()):
        act = getattr(mod, "intermediate_act_fn", None)
        dense = getattr(mod, "dense", None)
        if isinstance(dense, torch.nn.Linear) and type(act).__name__ == "GELUActivation" and \
                getattr(act, "act", None) is torch.nn.functional.gelu:
            packed = PackedLinear(dense, "gelu", "none")
            swapped += [(mod, "dense", dense), (mod, "intermediate_act_fn", act)]
            mod.dense = packed
            mod.intermediate_act_fn = torch.nn.Identity()
        for name, child in list(mod.named_children()):
            if type(child) is torch.nn.Linear:
                packed = PackedLinear(child)
                swapped.append((mod, name, child))
                setattr(mod, name, packed)


def unpack_linears(swapped: list[tuple[torch.nn.Module, str, torch.nn.Module]]) -> None:
    for parent, name, original in reversed(swapped):
        setattr(parent, name, original)


class FirstTokenLayer(torch.nn.Module):
    """The last layer of a BERT-style encoder computed for the first position only.

    A sequence-classification head (BERT's pooler, RoBERTa's and ELECTRA's heads) reads only the
    first token of the last layer, so that layer needs queries, attention output and feed-forward for
    one position only. In float32 it does not project keys and values either: with ``q`` the first
    position's query of a head and ``W_k``, ``W_v`` that head's rows of the key and value weights,

    * ``q . (W_k x_j + b_k) = (W_k^T q) . x_j + q . b_k``, and ``q . b_k`` is the same for every
      position ``j``, so it cancels in the softmax: the scores are ``x_j . u`` with ``u = W_k^T q``;
    * ``sum_j p_j (W_v x_j + b_v) = W_v (sum_j p_j x_j) + b_v``, since the ``p_j`` sum to 1;

    which replaces two ``tokens x hidden x hidden`` products with matrix-vector work (the whole
    layer is then about 1/n of its full cost; ~17% of a 6-layer model). Under autocast or in
    another dtype, or with a mask that is not a 4-D boolean or additive one, it keeps the projections
    and runs the model's own attention function on the first query. Either way the result equals the full layer's first row up to float rounding (the engine
    checks this on a probe batch at load). The output has sequence length 1."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer

    @staticmethod
    def supports(layer: torch.nn.Module) -> bool:
        att = getattr(layer, "attention", None)
        sa = getattr(att, "self", None)
        return (sa is not None and all(isinstance(getattr(sa, n, None), torch.nn.Module) for n in ("query", "key", "value"))
                and hasattr(sa, "attention_head_size") and hasattr(sa, "num_attention_heads") and hasattr(sa, "scaling")
                and isinstance(sa.key, torch.nn.Linear) and isinstance(sa.value, torch.nn.Linear)
                and sa.key.bias is not None and sa.value.bias is not None and hasattr(att, "output")
                and hasattr(layer, "feed_forward_chunk") and not getattr(layer, "add_cross_attention", False)
                and getattr(getattr(sa, "config", None), "_attn_implementation", None) in ("sdpa", "eager"))

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args, **kwargs) -> torch.Tensor:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.bert.modeling_bert import eager_attention_forward

        att = self.layer.attention
        sa = att.self
        b, n, width = hidden_states.shape
        first = hidden_states[:, :1]
        mask_ok = attention_mask is None or (attention_mask.dim() == 4 and (
            attention_mask.dtype == torch.bool or attention_mask.is_floating_point()))
        if mask_ok and hidden_states.dtype == torch.float32 and sa.key.weight.dtype == torch.float32 \
                and not torch.is_autocast_enabled(hidden_states.device.type):
            heads, size = sa.num_attention_heads, sa.attention_head_size
            q = sa.query(first).view(b, heads, size)
            u = torch.einsum("bhd,hdk->bhk", q, sa.key.weight.view(heads, size, width)) * sa.scaling
            scores = torch.bmm(u, hidden_states.transpose(1, 2))  # [b, heads, n]
            if attention_mask is not None:  # [b, 1, n_query, n]: the first query's row
                m = attention_mask[:, :, 0, :]
                scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
            mixed = torch.bmm(torch.softmax(scores, dim=-1), hidden_states)  # [b, heads, width]
            ctx = torch.einsum("bhk,hdk->bhd", mixed, sa.value.weight.view(heads, size, width))
            ctx = ctx + sa.value.bias.view(heads, size)
            out = att.output(ctx.reshape(b, 1, heads * size), first)
            return self.layer.feed_forward_chunk(out)
        q = sa.query(first).view(b, 1, -1, sa.attention_head_size).transpose(1, 2)
        k = sa.key(hidden_states).view(b, n, -1, sa.attention_head_size).transpose(1, 2)
        v = sa.value(hidden_states).view(b, n, -1, sa.attention_head_size).transpose(1, 2)
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = attention_mask[:, :, :1, :]
        fn = ALL_ATTENTION_FUNCTIONS.get_interface(sa.config._attn_implementation, eager_attention_forward)
        out, _ = fn(sa, q, k, v, attention_mask, dropout=0.0, scaling=sa.scaling)
        out = att.output(out.reshape(b, 1, -1).contiguous(), first)
        return self.layer.feed_forward_chunk(out)


def first_token_head(model: torch.nn.Module) -> bool:
    """Whether ``model``'s classification head reads only the first position of the last layer
    (BERT pooler, RoBERTa / ELECTRA heads): the models :class:`FirstTokenLayer` may serve."""
    return type(model).__name__ in ("BertForSequenceClassification", "RobertaForSequenceClassification",
                                    "XLMRobertaForSequenceClassification", "ElectraForSequenceClassification",
                                    "CamembertForSequenceClassification")


def encoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    base = getattr(model, "base_model", None)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    return layers if isinstance(layers, torch.nn.ModuleList) and len(layers) else None


class ScoringEngine:
    """One relevance logit per (query, passage) text pair, in input order.

    For BERT-style cross-encoders the last layer is computed for the first position only, the one
    the classification head reads (:class:`FirstTokenLayer`; ``first_token_layer=False`` to skip).
    Opt-in (``cpu_fast_path=True``): on the CPU in float32, batches of at least
    ``FAST_PATH_MIN_ROWS`` tokens run their linear layers through oneDNN with pre-packed weights
    (and BERT's GELU fused into its matrix product); with the CPU's default 2,048-token budget only
    full batches reach that size, so pair it with a larger ``batch_tokens``. Faster than MKL's ``nn.Linear`` in isolated
    matrix-product timings, it made the whole model slower on a quiet benchmark machine, also when
    only the GELU feed-forward was packed (docs/benchmarks.md), so it is off by default. It is
    switched on only after a probe batch scores within 1e-4 of the plain model.
    """

    def __init__(
        self,
        model,
        tokenizer,
        spec: EvaluatorSpec,
        device: torch.device,
        label_ids: tuple[int, int] | None = None,
        autocast_dtype: torch.dtype | None = None,
        batch_tokens: int | None = None,
        max_batch_size: int = 256,
        chunk_pairs: int = 8192,
        cpu_fast_path: bool = False,
        first_token_layer: bool = True,
    ):
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.spec = spec
        self.encoder = PairEncoder(tokenizer, spec)
        self.device = device
        self.label_ids = label_ids
        self.autocast_dtype = autocast_dtype
        # the per-device default grows to hold one pair of the model's longest length; an explicit
        # budget below that is an error
        self.batch_tokens = int(batch_tokens or max(DEFAULT_BATCH_TOKENS.get(device.type, DEFAULT_BATCH_TOKENS["cpu"]),
                                                    spec.max_length))
        if self.batch_tokens < spec.max_length:
            raise ValueError(f"batch_tokens ({self.batch_tokens}) must be at least max_length ({spec.max_length})")
        self.max_batch_size = max_batch_size
        self.chunk_pairs = chunk_pairs
        self.pad_id = tokenizer.pad_token_id
        self.stats = EncodeStats()  # cumulative over the engine's life
        self.fast_path = False
        self.first_token_layer = first_token_layer and self._enable_first_token_layer()
        if cpu_fast_path and device.type == "cpu" and autocast_dtype is None and cpu_fast_path_available():
            self.fast_path = self._enable_fast_path()

    def _probe_logits(self) -> np.ndarray:
        words = "the first nobel prize in physics was awarded to wilhelm conrad roentgen in 1901 for x rays".split()
        probe_q = ["who won the first nobel prize in physics", "when", "who discovered x rays"]
        probe_p = [" ".join(words * 3), " ".join(words[:5]), " ".join(words * 2)]
        return self.logits(probe_q, probe_p)[0]

    def _try_speedup(self, name: str, apply, undo, probe_setup=None, probe_teardown=None) -> bool:
        """Apply a speed-up, keep it only if probe pairs (of unequal lengths, so with padding) score
        within 1e-4 of the model as it was; undo it otherwise."""
        before = self._probe_logits()
        try:
            apply()
            if probe_setup:
                probe_setup()
            after = self._probe_logits()
            if probe_teardown:
                probe_teardown()
            ok = bool(np.all(np.abs(after - before) <= 1e-4 * np.maximum(1.0, np.abs(before))))
            why = "its probe scores differ from the plain model's"
        except Exception as e:  # a torch build without the op, a model that reads Linear internals, ...
            ok, why = False, f"{type(e).__name__}: {e}"
        if not ok:
            undo()
            logger.warning("%s off (%s)", name, why)
        self.stats = EncodeStats()
        return ok

    def _enable_first_token_layer(self) -> bool:
        layers = encoder_layers(self.model)
        if self.spec.head != "cross-encoder" or not first_token_head(self.model) or layers is None \
                or not FirstTokenLayer.supports(layers[-1]):
            return False
        original = layers[-1]

        def apply():
            layers[-1] = FirstTokenLayer(original)

        def undo():
            layers[-1] = original

        return self._try_speedup("first-token last layer", apply, undo)

    def _enable_fast_path(self) -> bool:
        """Pack the linears through oneDNN (the probe goes through the packed path)."""
        swapped: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []
        return self._try_speedup("CPU fast path", lambda: pack_linears(self.model, swapped), lambda: unpack_linears(swapped),
                                 probe_setup=lambda: self._set_min_rows(0),
                                 probe_teardown=lambda: self._set_min_rows(FAST_PATH_MIN_ROWS))

    def _set_min_rows(self, n: int) -> None:
        for m in self.model.modules():
            if isinstance(m, PackedLinear):
                m.min_rows = n

    # -- planning ------------------------------------------------------------------------------
    def plan_batches(self, lengths: np.ndarray) -> list[np.ndarray]:
        """Indices into ``lengths`` grouped into batches: longest first, each batch's
        ``size * longest`` within the token budget."""
        order = np.argsort(-lengths, kind="stable")
        batches, i, n = [], 0, len(order)
        while i < n:
            width = int(lengths[order[i]])
            size = max(1, min(self.max_batch_size, self.batch_tokens // max(width, 1), n - i))
            batches.append(order[i : i + size])
            i += size
        return batches

    @staticmethod
    def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        offsets = np.zeros(len(seqs), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lengths.sum()))
        return flat, offsets, lengths

    @staticmethod
    def _pad(flat: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, idx: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        """``[len(idx), longest]`` ids and attention mask for rows ``idx`` (right padding)."""
        lens = lengths[idx]
        width = int(lens.max())
        cols = np.arange(width)
        mask = cols[None, :] < lens[:, None]
        out = np.full((len(idx), width), pad, dtype=np.int64)
        out[mask] = flat[(offsets[idx][:, None] + cols[None, :])[mask]]
        return out, mask.astype(np.int64)

    # -- scoring -------------------------------------------------------------------------------
    def _forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.autocast_dtype is not None:
            with torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype):
                return relevance_logits(self.model, batch, self.spec.head, self.label_ids)
        return relevance_logits(self.model, batch, self.spec.head, self.label_ids)

    def _score_chunk(self, queries: Sequence[str], passages: Sequence[str], out: np.ndarray, bar) -> EncodeStats:
        enc, stats = self.encoder.encode(queries, passages)
        flat, offsets, lengths = self._flatten(enc["input_ids"])
        tt = self._flatten(enc["token_type_ids"])[0] if "token_type_ids" in enc else None
        non_blocking = self.device.type == "cuda"
        for idx in self.plan_batches(lengths):
            ids, mask = self._pad(flat, offsets, lengths, idx, self.pad_id)
            batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
            if tt is not None:
                batch["token_type_ids"] = torch.from_numpy(self._pad(tt, offsets, lengths, idx, 0)[0])
            if self.device.type != "cpu":
                batch = {k: v.to(self.device, non_blocking=non_blocking) for k, v in batch.items()}
            out[idx] = self._forward(batch).float().cpu().numpy()
            if bar is not None:
                bar.update(len(idx))
        return stats

    @torch.inference_mode()
    def logits(self, queries: Sequence[str], passages: Sequence[str], progress: bool = False,
               desc: str = "scoring") -> tuple[np.ndarray, EncodeStats]:
        """Logits (float64, input order) and the truncation counts of this call."""
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries but {len(passages)} passages")
        n = len(queries)
        out = np.empty(n, dtype=np.float64)
        stats = EncodeStats()
        bar = tqdm(total=n, desc=desc, unit=" pairs", disable=None, mininterval=1.0) if progress else None
        try:
            for s in range(0, n, self.chunk_pairs):
                stats.add(self._score_chunk(queries[s : s + self.chunk_pairs], passages[s : s + self.chunk_pairs], out, bar))
        finally:
            if bar is not None:
                bar.close()
        self.stats.add(stats)
        return out, stats


# --------------------------------------------------------------------------------------------
# the evaluator


@dataclass
class ChunkGrade:
    """One chunk of a graded query: its position in the input, calibrated score and action."""

    index: int
    score: float
    action: str
    passage_id: str | None = None


@dataclass
class Grade:
    """CRAG's decision for one query: per-chunk actions and the query-level action (any Correct ->
    Correct; else any Ambiguous -> Ambiguous; else Incorrect; no chunks -> Incorrect)."""

    query: str
    action: str
    chunks: list[ChunkGrade]
    theta_high: float
    theta_low: float | None  # None: two-tier mode (no Ambiguous)
    passages_truncated: int = 0

    @property
    def scores(self) -> list[float]:
        return [c.score for c in self.chunks]

    def ranked(self) -> list[ChunkGrade]:
        """Chunks by score, best first (ties keep input order)."""
        return sorted(self.chunks, key=lambda c: -c.score)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_thresholds(theta_high: float, theta_low: float | None) -> None:
    for name, v in (("theta_high", theta_high), ("theta_low", theta_low)):
        if v is not None and not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
            raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
    if theta_low is not None and theta_low > theta_high:
        raise ValueError(f"theta_low ({theta_low}) must not exceed theta_high ({theta_high})")


class Evaluator:
    """A loaded retrieval evaluator: calibrated relevance probabilities and CRAG actions.

    ``pairs`` are ``(query, passage)`` tuples; a passage is a string or a
    :class:`~data_prep.records.Passage` (formatted with the manifest's ``passage_format``,
    ``"{title}. {text}"``, as in training).
    """

    task = "evaluator"

    def __init__(self, engine: ScoringEngine, calibration: Calibration, theta_high: float, theta_low: float,
                 passage_format: str = DEFAULT_PASSAGE_FORMAT, manifest: dict[str, Any] | None = None,
                 path: str | None = None):
        _check_thresholds(theta_high, theta_low)
        self.engine = engine
        self.calibration = calibration
        self.theta_high = float(theta_high)
        self.theta_low = float(theta_low)
        self.passage_format = passage_format
        self.manifest = manifest or {}
        self.path = path

    def __repr__(self) -> str:
        return (f"Evaluator(path={self.path!r}, head={self.engine.spec.head!r}, device={str(self.engine.device)!r}, "
                f"theta_high={self.theta_high:.4f}, theta_low={self.theta_low:.4f})")

    @property
    def spec(self) -> EvaluatorSpec:
        return self.engine.spec

    @property
    def device(self) -> torch.device:
        return self.engine.device

    # -- inputs --------------------------------------------------------------------------------
    def passage_text(self, passage: str | Passage, where: str = "passage") -> str:
        if isinstance(passage, Passage):
            text = self.passage_format.format(title=passage.title, text=passage.text) if passage.title else passage.text
        elif isinstance(passage, str):
            text = passage
        else:
            raise TypeError(f"{where}: a passage must be a str or Passage, got {type(passage).__name__}")
        if not text.strip():
            raise ValueError(f"{where}: empty passage (nothing to score)")
        return text

    def texts(self, pairs: Iterable[tuple[str, str | Passage]]) -> tuple[list[str], list[str]]:
        queries, passages = [], []
        for i, pair in enumerate(pairs):
            try:
                q, p = pair
            except (TypeError, ValueError):
                raise TypeError(f"pair {i}: expected a (query, passage) tuple, got {type(pair).__name__}") from None
            if not isinstance(q, str):
                raise TypeError(f"pair {i}: the query must be a str, got {type(q).__name__}")
            if not q.strip():
                raise ValueError(f"pair {i}: empty query (nothing to score)")
            queries.append(q)
            passages.append(self.passage_text(p, f"pair {i}"))
        return queries, passages

    # -- scores --------------------------------------------------------------------------------
    def logits(self, pairs: Iterable[tuple[str, str | Passage]], progress: bool = False) -> np.ndarray:
        """The model's relevance logit ``z`` per pair (float64, input order)."""
        queries, passages = self.texts(pairs)
        return self.engine.logits(queries, passages, progress=progress)[0]

    def calibrate(self, logits: Sequence[float] | np.ndarray) -> np.ndarray:
        """``sigmoid(a * z + b)`` with the manifest's calibration."""
        return self.calibration.apply(logits)

    @staticmethod
    def sigmoid(logits: Sequence[float] | np.ndarray) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float64)
        return 1.0 / (1.0 + np.exp(-z))

    def score(self, pairs: Iterable[tuple[str, str | Passage]], progress: bool = False) -> list[float]:
        """Calibrated relevance probabilities in [0, 1], one per pair, in input order."""
        return self.calibrate(self.logits(pairs, progress)).tolist()

    def score_raw(self, pairs: Iterable[tuple[str, str | Passage]], progress: bool = False) -> list[float]:
        """Uncalibrated ``sigmoid(z)``, one per pair, in input order."""
        return self.sigmoid(self.logits(pairs, progress)).tolist()

    # -- CRAG decisions ------------------------------------------------------------------------
    def thresholds(self, theta_high: float | None = None, theta_low: float | None = None,
                   two_tier: bool = False) -> tuple[float, float | None]:
        """The thresholds in force: the manifest's unless overridden; ``theta_low`` is ``None`` in
        two-tier mode (one threshold, no Ambiguous)."""
        hi = self.theta_high if theta_high is None else float(theta_high)
        lo = None if two_tier else (self.theta_low if theta_low is None else float(theta_low))
        if lo is not None and theta_low is None and lo > hi:
            lo = hi  # theta_high lowered below the manifest's theta_low: no Ambiguous band
        _check_thresholds(hi, lo)
        return hi, lo

    def actions(self, scores: Sequence[float], theta_high: float | None = None, theta_low: float | None = None,
                two_tier: bool = False) -> list[str]:
        hi, lo = self.thresholds(theta_high, theta_low, two_tier)
        return [action_of(float(s), hi, lo) for s in scores]

    def grade(self, query: str, chunks: Sequence[str | Passage], theta_high: float | None = None,
              theta_low: float | None = None, two_tier: bool = False) -> Grade:
        """Score ``chunks`` against ``query`` and route them as CRAG does."""
        hi, lo = self.thresholds(theta_high, theta_low, two_tier)
        if isinstance(chunks, (str, Passage)):
            raise TypeError("chunks must be a list of passages (got a single one)")
        chunks = list(chunks)
        if not chunks:
            return Grade(query, "Incorrect", [], hi, lo)
        z, stats = self.engine.logits(*self.texts((query, c) for c in chunks))
        scores = self.calibrate(z)
        graded = [ChunkGrade(i, float(s), action_of(float(s), hi, lo), c.id if isinstance(c, Passage) else None)
                  for i, (s, c) in enumerate(zip(scores, chunks))]
        return Grade(query, query_action([g.action for g in graded]), graded, hi, lo, stats.passages_truncated)


@register_task("evaluator", manifest="evaluator.json", schema_versions=(1,))
def load_evaluator(export: Export, options: LoadOptions) -> Evaluator:
    """Build an :class:`Evaluator` from an ``evaluator.json`` export."""
    head = export.get("model.head", str)
    weights = export.get("model.weights", str)
    try:
        spec = EvaluatorSpec(
            head=head,
            max_length=export.get("input.max_length", int),
            max_query_length=export.get("input.max_query_length", int),
            input_template=export.get("input.template", (str, type(None)), None),
            label_tokens=tuple(export.get("input.label_tokens", list, ["true", "false"])),
        )
    except ValueError as e:
        raise ExportError(f"{export.manifest_path}: {e}") from None
    try:
        calibration = Calibration(method=export.get("calibration.method", str), a=float(export.get("calibration.a", (int, float))),
                                  b=float(export.get("calibration.b", (int, float))))
    except (TypeError, ValueError) as e:
        raise ExportError(f"{export.manifest_path}: bad calibration ({e})") from None
    if not (math.isfinite(calibration.a) and math.isfinite(calibration.b)):
        raise ExportError(f"{export.manifest_path}: calibration a/b must be finite numbers")
    theta_high = float(export.get("thresholds.theta_high", (int, float)))
    theta_low = float(export.get("thresholds.theta_low", (int, float)))
    passage_format = export.get("input.passage_format", str, DEFAULT_PASSAGE_FORMAT)
    if "{text}" not in passage_format:
        raise ExportError(f"{export.manifest_path}: input.passage_format must contain {{text}}: {passage_format!r}")

    if weights in ("full", "merged-lora"):
        model = load_full_model(export, head, options)
    elif weights == "lora-adapter":
        model = load_adapter_model(export, head, options)
    else:
        raise ExportError(f"{export.manifest_path}: unknown model.weights {weights!r} (full, merged-lora or lora-adapter)")
    tokenizer = load_tokenizer(export)
    label_ids = None
    if head == "seq2seq":
        try:
            label_ids = label_token_ids(tokenizer, spec.label_tokens)
        except ValueError as e:
            raise ExportError(f"{export.path}: {e}") from None
    engine = ScoringEngine(model, tokenizer, spec, options.device, label_ids, options.autocast_dtype, options.batch_tokens,
                           cpu_fast_path=options.cpu_fast_path, first_token_layer=options.first_token_layer)
    try:
        return Evaluator(engine, calibration, theta_high, theta_low, passage_format, export.manifest, str(export.path))
    except ValueError as e:
        raise ExportError(f"{export.manifest_path}: {e}") from None
