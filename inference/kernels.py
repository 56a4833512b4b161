"""CPU kernels for scoring: exact shortcuts that a cross-encoder's answer allows.

* :class:`FirstTokenLayer` - a sequence-classification head reads one position of the last layer,
  so that layer runs for that position only (exact up to float rounding; about -17% of the compute
  of a 6-layer model).
* :class:`PackedLinear` / :func:`pack_linears` - an opt-in oneDNN path with pre-packed weights
  (and BERT's GELU fused into its matrix product).

:class:`~inference.engine.ScoringEngine` switches them on only after a probe batch scores within
1e-4 of the plain model.
"""

from __future__ import annotations

import torch


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


class UnpaddedBert:
    """A BERT cross-encoder (``BertForSequenceClassification``: BERT, MiniLM) run on the real tokens
    only, with the first-token shortcut in the last layer.

    A padded batch spends the matrix products of every layer on its padding: with a query's top-5
    chunks of unequal lengths, often a quarter of the work. Here the sequences of a batch are packed
    into one ``[tokens, hidden]`` matrix: embeddings, projections, output dense layers and the
    feed-forward blocks (about three quarters of the compute) run once on the packed rows, and only
    attention runs per sequence, without a mask. The last layer computes the first position only,
    with keys and values folded into its query (see :class:`FirstTokenLayer`). Exact up to float
    rounding; :class:`~inference.engine.ScoringEngine` checks it against the padded model on probe
    pairs before using it. Eval mode only (dropout is not applied)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.bert = model.bert
        self.layers = list(self.bert.encoder.layer)
        self.layers[-1] = getattr(self.layers[-1], "layer", self.layers[-1])  # under a FirstTokenLayer

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        if type(model).__name__ != "BertForSequenceClassification" or getattr(model.config, "num_labels", 1) != 1:
            return False
        cfg = model.config
        bert = getattr(model, "bert", None)
        layers = encoder_layers(model)
        if bert is None or layers is None or bert.pooler is None or getattr(cfg, "is_decoder", False):
            return False
        if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
            return False
        last = getattr(layers[-1], "layer", layers[-1])
        return all(FirstTokenLayer.supports(getattr(layer, "layer", layer)) for layer in list(layers[:-1]) + [last])

    def _embed(self, ids: torch.Tensor, types: torch.Tensor | None, lengths: list[int]) -> torch.Tensor:
        emb = self.bert.embeddings
        pos = torch.cat([torch.arange(n, device=ids.device) for n in lengths])
        x = emb.word_embeddings(ids) + emb.position_embeddings(pos)
        x = x + emb.token_type_embeddings(types if types is not None else torch.zeros_like(ids))
        return emb.LayerNorm(x)

    @staticmethod
    def _attention(sa: torch.nn.Module, x: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
        heads, size = sa.num_attention_heads, sa.attention_head_size
        q, k, v = sa.query(x), sa.key(x), sa.value(x)
        ctx = torch.empty_like(q)
        for s, e in spans:
            n = e - s
            qs, ks, vs = (t[s:e].view(1, n, heads, size).transpose(1, 2) for t in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, scale=sa.scaling)
            ctx[s:e] = out.transpose(1, 2).reshape(n, heads * size)
        return ctx

    @staticmethod
    def _first_token(layer: torch.nn.Module, x: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
        att = layer.attention
        sa = att.self
        heads, size, width = sa.num_attention_heads, sa.attention_head_size, x.shape[-1]
        first = x[[s for s, _ in spans]]  # [b, hidden]
        q = sa.query(first).view(-1, heads, size)
        u = torch.einsum("bhd,hdk->bhk", q, sa.key.weight.view(heads, size, width)) * sa.scaling  # [b, heads, hidden]
        mixed = torch.empty_like(u)
        for i, (s, e) in enumerate(spans):
            p = torch.softmax(u[i] @ x[s:e].T, dim=-1)  # [heads, n]
            mixed[i] = p @ x[s:e]
        ctx = torch.einsum("bhk,hdk->bhd", mixed, sa.value.weight.view(heads, size, width)) + sa.value.bias.view(heads, size)
        out = att.output(ctx.reshape(-1, heads * size), first)
        return layer.feed_forward_chunk(out)

    def logits(self, ids: torch.Tensor, types: torch.Tensor | None, lengths: list[int]) -> torch.Tensor:
        """``[len(lengths)]`` logits of the sequences packed (one after another) in ``ids``."""
        spans, at = [], 0
        for n in lengths:
            spans.append((at, at + n))
            at += n
        x = self._embed(ids, types, lengths)
        for layer in self.layers[:-1]:
            ctx = self._attention(layer.attention.self, x, spans)
            x = layer.feed_forward_chunk(layer.attention.output(ctx, x))
        cls = self._first_token(self.layers[-1], x, spans)
        pooled = self.bert.pooler.activation(self.bert.pooler.dense(cls))
        return self.model.classifier(pooled)[:, 0].float()
