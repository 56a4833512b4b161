"""The scoring engine: many (query, passage) texts to one logit each, for throughput.

:class:`ScoringEngine` serves every task (the evaluator, the answer classifier and the extractor
all score pairs):

1. tokenise in large chunks with the fast tokenizer (the :class:`~inference.inputs.PairEncoder`
   training used, so the model sees exactly what it was trained on: the passage is truncated,
   never the query);
2. sort each chunk by token length (longest first, so an out-of-memory error shows at once) and cut
   it into batches under a padded-token budget (``batch_tokens``), so short pairs run in large
   batches and long ones in small;
3. pad each batch to its own longest sequence with vectorised numpy (no per-pair Python on the hot
   path), run it under ``torch.inference_mode`` (optionally bfloat16 autocast), and write the logits
   back at the pairs' input positions;
4. skip work the answer does not need (:mod:`inference.kernels`): for BERT cross-encoders on the
   CPU, the sequences of a batch run packed, without padding (:class:`UnpaddedBert`), and the last
   layer computes only the position the head reads; other cross-encoders keep padded batches with
   that last-layer shortcut (:class:`FirstTokenLayer`).

:class:`BiEncoderEngine` serves the ``bi-encoder`` head with the same ``logits(queries, passages)``:
each distinct text is encoded once (batched the same way), vectors are kept in a bounded cache, and
``z = similarity_scale * cosine``. :func:`new_engine` picks the engine a spec needs.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from .inputs import EncodeStats, PairEncoder
from .kernels import (FAST_PATH_MIN_ROWS, FirstTokenLayer, PackedLinear, UnpaddedBert, cpu_fast_path_available,
                      encoder_layers, first_token_head, pack_linears, unpack_linears)
from .modeling import ModelSpec, mean_pooled, relevance_logits, weights_fingerprint

logger = logging.getLogger(__name__)

#: padded tokens per forward pass, by device type. CPU: small enough that a batch's widest
#: activation (feed-forward, 2,048 x 1,536 floats = 12.6 MB for MiniLM) stays in cache: on the
#: 2-core benchmark machine 2,048 and 4,096 tokens score 62-63 pairs/s, 8,192 only 49
#: (docs/benchmarks.md). Accelerators: large.
DEFAULT_BATCH_TOKENS = {"cpu": 2048, "mps": 16384, "cuda": 65536}


class ScoringEngine:
    """One logit per (query, passage) text pair, in input order, for every task.

    Exact shortcuts, each switched on only after probe pairs score within 1e-4 of the plain model:

    * ``unpadded`` (default on the CPU for ``BertForSequenceClassification``, MiniLM included): the
      sequences of a batch run packed, without padding, and the last layer only for ``[CLS]``
      (:class:`~inference.kernels.UnpaddedBert`);
    * ``first_token_layer`` (other BERT-style cross-encoders, or ``unpadded=False``): padded batches,
      the last layer for the first position only (:class:`~inference.kernels.FirstTokenLayer`);
    * ``cpu_fast_path`` (opt-in): on the CPU in float32, batches of at least ``FAST_PATH_MIN_ROWS``
      tokens run their linear layers through oneDNN with pre-packed weights (and BERT's GELU fused);
      it made the whole model slower on a quiet benchmark machine (docs/benchmarks.md), so it is off
      by default, and it turns the unpadded path off.
    """

    def __init__(
        self,
        model,
        tokenizer,
        spec: ModelSpec,
        device: torch.device,
        label_ids: tuple[int, int] | None = None,
        autocast_dtype: torch.dtype | None = None,
        batch_tokens: int | None = None,
        max_batch_size: int = 256,
        chunk_pairs: int = 8192,
        cpu_fast_path: bool = False,
        first_token_layer: bool = True,
        unpadded: bool | None = None,
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
        self.unpadded: UnpaddedBert | None = None
        if unpadded is None:
            unpadded = device.type == "cpu" and first_token_layer and not cpu_fast_path
        if unpadded and spec.head == "cross-encoder" and UnpaddedBert.supports(self.model):
            self._enable_unpadded()
        self.first_token_layer = first_token_layer and (self.unpadded is not None or self._enable_first_token_layer())
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

    def _enable_unpadded(self) -> bool:
        candidate = UnpaddedBert(self.model)

        def apply():
            self.unpadded = candidate

        def undo():
            self.unpadded = None

        return self._try_speedup("unpadded BERT path", apply, undo)

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

    @staticmethod
    def _packed(flat: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """The token ids of rows ``idx``, one after another."""
        lens = lengths[idx]
        starts = np.repeat(offsets[idx] - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
        return flat[starts + np.arange(int(lens.sum()))]

    def _forward_unpadded(self, flat, tt, offsets, lengths, idx) -> torch.Tensor:
        ids = torch.from_numpy(self._packed(flat, offsets, lengths, idx))
        types = torch.from_numpy(self._packed(tt, offsets, lengths, idx)) if tt is not None else None
        if self.device.type != "cpu":
            ids = ids.to(self.device)
            types = types.to(self.device) if types is not None else None
        lens = lengths[idx].tolist()
        if self.autocast_dtype is not None:
            with torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype):
                return self.unpadded.logits(ids, types, lens)
        return self.unpadded.logits(ids, types, lens)

    def _score_chunk(self, queries: Sequence[str], passages: Sequence[str], out: np.ndarray, bar) -> EncodeStats:
        enc, stats = self.encoder.encode(queries, passages)
        flat, offsets, lengths = self._flatten(enc["input_ids"])
        tt = self._flatten(enc["token_type_ids"])[0] if "token_type_ids" in enc else None
        non_blocking = self.device.type == "cuda"
        for idx in self.plan_batches(lengths):
            if self.unpadded is not None:
                out[idx] = self._forward_unpadded(flat, tt, offsets, lengths, idx).cpu().numpy()
                if bar is not None:
                    bar.update(len(idx))
                continue
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
                e = s + self.chunk_pairs  # each chunk writes its own slice of ``out`` (positions within the chunk)
                stats.add(self._score_chunk(queries[s:e], passages[s:e], out[s:e], bar))
        finally:
            if bar is not None:
                bar.close()
        self.stats.add(stats)
        return out, stats


class BiEncoderEngine(ScoringEngine):
    """``z = similarity_scale * cosine`` of mean-pooled, unit-length query and passage vectors.

    Each distinct query and passage text of a call is encoded once; vectors stay in an LRU cache of
    ``cache_size`` texts (0: none; 16,384 MiniLM vectors are 25 MB), so a passage graded again costs a
    dot product. The cache is guarded by a lock: one engine may serve several threads.
    :meth:`remember` puts vectors computed elsewhere into that cache: a pipeline whose dense index
    was embedded by the same weights (:attr:`fingerprint`) at the same length hands over the chunk
    vectors it already holds. The batching (length-sorted, under ``batch_tokens``) and the opt-in
    ``cpu_fast_path`` are the :class:`ScoringEngine`'s.
    """

    def __init__(self, model, tokenizer, spec: ModelSpec, device: torch.device, autocast_dtype: torch.dtype | None = None,
                 batch_tokens: int | None = None, max_batch_size: int = 256, cache_size: int = 16384,
                 cpu_fast_path: bool = False):
        if spec.head != "bi-encoder":
            raise ValueError(f"BiEncoderEngine serves the bi-encoder head, not {spec.head!r}")
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], tuple[np.ndarray, bool]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._use_cache = True
        # the fingerprint of the weights as loaded (the fast path swaps modules, so it is taken first)
        self._fingerprint = weights_fingerprint(model) if cpu_fast_path else None
        super().__init__(model, tokenizer, spec, device, None, autocast_dtype, batch_tokens, max_batch_size,
                         cpu_fast_path=cpu_fast_path, first_token_layer=False, unpadded=False)
        self.dim = int(getattr(self.model.config, "hidden_size", 0)) or None

    @property
    def fingerprint(self) -> str:
        """:func:`~inference.modeling.weights_fingerprint` of the weights (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = weights_fingerprint(self.model)
        return self._fingerprint

    def _probe_logits(self) -> np.ndarray:
        self._use_cache = False  # a speed-up is judged on vectors it computed, not on cached ones
        try:
            return super()._probe_logits()
        finally:
            self._use_cache = True

    def _limit(self, kind: str) -> int:
        return self.encoder.query_tokens() if kind == "query" else self.spec.max_length

    def _forward_vectors(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
        if self.device.type != "cpu":
            ids_t, mask_t = ids_t.to(self.device), mask_t.to(self.device)
        if self.autocast_dtype is not None:
            with torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype):
                return mean_pooled(self.model, ids_t, mask_t)
        return mean_pooled(self.model, ids_t, mask_t)

    @torch.inference_mode()
    def vectors(self, texts: Sequence[str], kind: str = "passage", bar=None) -> tuple[np.ndarray, np.ndarray]:
        """Unit vectors ``[len(texts), dim]`` (float32) of ``kind`` ``"query"`` or ``"passage"``
        texts, and which of them were truncated."""
        if kind not in ("query", "passage"):
            raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
        uniq = list(dict.fromkeys(texts))
        found: dict[str, tuple[np.ndarray, bool]] = {}
        if self._use_cache and self.cache_size:
            with self._cache_lock:
                for t in uniq:
                    hit = self._cache.get((kind, t))
                    if hit is not None:
                        self._cache.move_to_end((kind, t))
                        found[t] = hit
        todo = [t for t in uniq if t not in found]
        if todo:
            ids, cut = self.encoder.encode_texts(todo, self._limit(kind))
            flat, offsets, lengths = self._flatten(ids)
            for idx in self.plan_batches(lengths):
                padded, mask = self._pad(flat, offsets, lengths, idx, self.pad_id)
                vec = self._forward_vectors(padded, mask).float().cpu().numpy()
                for j, i in enumerate(idx.tolist()):
                    found[todo[i]] = (vec[j], bool(cut[i]))
                if bar is not None:
                    bar.update(len(idx))
            if self._use_cache:
                self._put(kind, ((t, found[t]) for t in todo))
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32), np.zeros(0, dtype=bool)
        return (np.stack([found[t][0] for t in texts]).astype(np.float32, copy=False),
                np.array([found[t][1] for t in texts], dtype=bool))

    def _put(self, kind: str, items) -> None:
        if not self.cache_size:
            return
        with self._cache_lock:
            for text, value in items:
                self._cache[(kind, text)] = value
                self._cache.move_to_end((kind, text))
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def remember(self, texts: Sequence[str], vectors: np.ndarray, kind: str = "passage") -> None:
        """Cache ``vectors`` (unit length, this model's, computed at this spec's length limit) as the
        vectors of ``texts``; the caller vouches for them (compare :attr:`fingerprint` first)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts) or (self.dim and vectors.shape[1] != self.dim):
            raise ValueError(f"remember: {len(texts)} texts need a [{len(texts)}, {self.dim}] array, got {vectors.shape}")
        if not self.cache_size or not len(texts):
            return
        cut = self.encoder.encode_texts(texts, self._limit(kind))[1]  # the truncation counts stay right
        self._put(kind, ((t, (v, c)) for t, v, c in zip(texts, vectors, cut)))

    @torch.inference_mode()
    def logits(self, queries: Sequence[str], passages: Sequence[str], progress: bool = False,
               desc: str = "scoring") -> tuple[np.ndarray, EncodeStats]:
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries but {len(passages)} passages")
        bar = tqdm(total=len(set(queries)) + len(set(passages)), desc=desc, unit=" texts", disable=None,
                   mininterval=1.0) if progress else None
        try:
            q, q_cut = self.vectors(queries, "query", bar)
            p, p_cut = self.vectors(passages, "passage", bar)
        finally:
            if bar is not None:
                bar.close()
        z = self.spec.similarity_scale * np.einsum("ij,ij->i", q.astype(np.float64), p.astype(np.float64)) \
            if len(queries) else np.zeros(0)
        stats = EncodeStats(len(queries), int(p_cut.sum()), int(q_cut.sum()))
        self.stats.add(stats)
        return z, stats


def new_engine(model, tokenizer, spec: ModelSpec, device: torch.device, label_ids: tuple[int, int] | None = None,
               autocast_dtype: torch.dtype | None = None, batch_tokens: int | None = None, **kwargs) -> ScoringEngine:
    """The engine ``spec``'s head needs: :class:`BiEncoderEngine` for ``bi-encoder``, else
    :class:`ScoringEngine` (``kwargs``: that class's options; the cross-encoder shortcuts are
    ignored by the bi-encoder)."""
    if spec.head == "bi-encoder":
        return BiEncoderEngine(model, tokenizer, spec, device, autocast_dtype, batch_tokens,
                               cpu_fast_path=kwargs.get("cpu_fast_path", False))
    return ScoringEngine(model, tokenizer, spec, device, label_ids, autocast_dtype, batch_tokens, **kwargs)
