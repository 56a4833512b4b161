"""The one way a (query, passage) becomes model input, at training time and at serving time.

* :func:`passage_text` - a passage (a string, or a :class:`~data_prep.records.Passage` with a
  title) as the text the model sees, by the spec's ``passage_format`` (default
  ``"{title}. {text}"``, recorded in every manifest);
* :class:`PairEncoder` - texts to token ids under a :class:`~inference.modeling.ModelSpec`:
  the query is capped at ``max_query_length`` tokens first, then the passage is truncated so the
  pair fits ``max_length`` (never the query), and truncations are counted;
  for the bi-encoder head, the query and the passage are two sequences (``input_ids`` and
  ``p_input_ids``), each with the tokenizer's single-sequence special tokens, the query capped at
  ``max_query_length`` content tokens and the passage at ``max_length`` tokens in all;
* :func:`pad_batch` - dynamic padding of encoded features (training batches and tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from data_prep.records import Passage

from .modeling import DEFAULT_PASSAGE_FORMAT, ModelSpec


def passage_text(passage: str | Passage, passage_format: str = DEFAULT_PASSAGE_FORMAT) -> str:
    """The text the model sees for ``passage``: a string as it is; a :class:`Passage` with a title
    through ``passage_format`` (``{title}`` and ``{text}``), without one as its text."""
    if isinstance(passage, str):
        return passage
    if isinstance(passage, Passage):
        return passage_format.format(title=passage.title, text=passage.text) if passage.title else passage.text
    raise TypeError(f"a passage must be a str or Passage, got {type(passage).__name__}")


@dataclass
class EncodeStats:
    pairs: int = 0
    passages_truncated: int = 0
    queries_truncated: int = 0

    def add(self, other: "EncodeStats") -> None:
        self.pairs += other.pairs
        self.passages_truncated += other.passages_truncated
        self.queries_truncated += other.queries_truncated


#: pairs on which the tokenizer's own pair encoding is compared with the assembled one
PROBE_PAIRS = (
    ("who won the first nobel prize in physics?", "Wilhelm Conrad Röntgen won it in 1901, for X-rays."),
    ("E-204 error code", "The E-204 fault (code 0x2F) means: check the pump; see §4.2 \u2014 \u201cmaintenance\u201d."),
    ("q", "a"),
)


class PairEncoder:
    """Turns (query, passage) texts into token ids under a :class:`ModelSpec`.

    Queries and passages are tokenised once each, separately, and joined by the tokenizer's pair
    template (for BERT ``[CLS] q [SEP] p [SEP]`` with token types), which is read off the tokenizer
    and checked against its own pair encoding on probe pairs; a tokenizer whose pairs do not
    decompose that way is used through its pair encoding instead (slower: three passes)."""

    def __init__(self, tokenizer, spec: ModelSpec):
        self.tokenizer = tokenizer
        self.spec = spec
        self.template: dict[str, list[int]] | None = None
        # passages are tokenised whole and cut here (never the query), so the tokenizer's warning about
        # sequences longer than the model is expected noise
        warned = getattr(tokenizer, "deprecation_warnings", None)
        if isinstance(warned, dict):
            warned["sequence-length-is-longer-than-the-specified-maximum"] = True
        if spec.head == "bi-encoder":
            self._single = self._single_template()
        elif spec.head != "cross-encoder":
            t = spec.input_template
            i = t.index("{passage}")
            self._before, self._after = t[:i], t[i + len("{passage}") :]
            self._after_ids = tokenizer(self._after, add_special_tokens=False)["input_ids"] if self._after.strip() else []
            self._eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        else:
            self.template = self._pair_template()

    # -- the bi-encoder's single-sequence template ----------------------------------------------
    def _single_template(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts around one sequence (BERT: ``[CLS]`` and ``[SEP]``),
        read off its own encoding of a probe text and checked on every probe."""
        tok = self.tokenizer
        q = PROBE_PAIRS[0][0]
        bare = tok(q, add_special_tokens=False)["input_ids"]
        full = tok(q)["input_ids"]
        try:
            a = next(i for i in range(len(full)) if full[i : i + len(bare)] == bare)
        except StopIteration:
            raise ValueError("the tokenizer's encoding of one sequence does not contain its bare tokens; "
                             "it cannot serve the bi-encoder head") from None
        prefix, suffix = full[:a], full[a + len(bare) :]
        for pair in PROBE_PAIRS:
            for text in pair:
                if prefix + tok(text, add_special_tokens=False)["input_ids"] + suffix != tok(text)["input_ids"]:
                    raise ValueError("the tokenizer's single-sequence encoding is not prefix + tokens + suffix; "
                                     "it cannot serve the bi-encoder head")
        return prefix, suffix

    def encode_texts(self, texts: Sequence[str], max_tokens: int) -> tuple[list[list[int]], list[bool]]:
        """Bi-encoder: each text as ``prefix + tokens + suffix`` with at most ``max_tokens`` ids in
        all (the same ids as ``tokenizer(text, truncation=True, max_length=max_tokens)``), and which
        of them were cut."""
        prefix, suffix = self._single
        budget = max(max_tokens - len(prefix) - len(suffix), 0)
        out, cut = [], []
        for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []:
            cut.append(len(ids) > budget)
            out.append(prefix + ids[:budget] + suffix)
        return out, cut

    def query_tokens(self) -> int:
        """Bi-encoder: a query's length limit with its special tokens."""
        prefix, suffix = self._single
        return self.spec.max_query_length + len(prefix) + len(suffix)

    # -- the cross-encoder pair template --------------------------------------------------------
    def _pair_template(self) -> dict[str, list[int]] | None:
        tok = self.tokenizer
        try:
            q, p = PROBE_PAIRS[0]
            qi = tok(q, add_special_tokens=False)["input_ids"]
            pi = tok(p, add_special_tokens=False)["input_ids"]
            joint = tok(q, p)
            ids = joint["input_ids"]
            a = next(i for i in range(len(ids)) if ids[i : i + len(qi)] == qi)
            b = next(i for i in range(a + len(qi), len(ids)) if ids[i : i + len(pi)] == pi)
            types = joint.get("token_type_ids")
            t = {"prefix": ids[:a], "middle": ids[a + len(qi) : b], "suffix": ids[b + len(pi) :]}
            if types is not None:
                t["types"] = [types[0] if a == 0 else types[a], types[b]]
            for q, p in PROBE_PAIRS:
                want = tok(q, p)
                got = self._assemble(tok(q, add_special_tokens=False)["input_ids"], tok(p, add_special_tokens=False)["input_ids"], t)
                if got["input_ids"] != want["input_ids"] or ("token_type_ids" in got and
                                                            got["token_type_ids"] != want.get("token_type_ids")):
                    return None
            return t
        except (StopIteration, KeyError, TypeError, ValueError, IndexError):
            return None

    @staticmethod
    def _assemble(q: list[int], p: list[int], t: dict[str, list[int]]) -> dict[str, list[int]]:
        first = t["prefix"] + q + t["middle"]
        out = {"input_ids": first + p + t["suffix"]}
        if "types" in t:
            out["token_type_ids"] = [t["types"][0]] * len(first) + [t["types"][1]] * (len(p) + len(t["suffix"]))
        return out

    def _cap_queries(self, queries: Sequence[str], stats: EncodeStats) -> tuple[list[str], list[list[int]]]:
        enc = self.tokenizer(list(queries), add_special_tokens=False, return_offsets_mapping=True)
        texts, ids_out = [], []
        for q, ids, offs in zip(queries, enc["input_ids"], enc["offset_mapping"]):
            if len(ids) > self.spec.max_query_length:
                stats.queries_truncated += 1
                q = q[: offs[self.spec.max_query_length - 1][1]]
                ids = ids[: self.spec.max_query_length]
            texts.append(q)
            ids_out.append(ids)
        return texts, ids_out

    def encode(self, queries: Sequence[str], passages: Sequence[str]) -> tuple[dict[str, list[list[int]]], EncodeStats]:
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries but {len(passages)} passages")
        stats = EncodeStats(pairs=len(queries))
        if not queries:
            return {"input_ids": []}, stats
        L = self.spec.max_length
        if self.spec.head == "bi-encoder":
            q_ids, q_cut = self.encode_texts(queries, self.query_tokens())
            p_ids, p_cut = self.encode_texts(passages, L)
            stats.queries_truncated, stats.passages_truncated = sum(q_cut), sum(p_cut)
            return {"input_ids": q_ids, "p_input_ids": p_ids}, stats
        queries, q_ids = self._cap_queries(queries, stats)
        if self.spec.head == "cross-encoder":
            if self.template is None:
                enc = self.tokenizer(list(queries), list(passages), truncation="only_second", max_length=L,
                                     return_overflowing_tokens=False)
                full = self.tokenizer(list(queries), list(passages), truncation=False)["input_ids"]
                stats.passages_truncated += sum(len(f) > L for f in full)
                out = {"input_ids": enc["input_ids"]}
                if "token_type_ids" in enc:
                    out["token_type_ids"] = enc["token_type_ids"]
                return out, stats
            t = self.template
            fixed = len(t["prefix"]) + len(t["middle"]) + len(t["suffix"])
            p_ids = self.tokenizer(list(passages), add_special_tokens=False)["input_ids"]
            ids, types = [], []
            for q, p in zip(q_ids, p_ids):
                budget = L - fixed - len(q)
                if len(p) > budget:
                    stats.passages_truncated += 1
                    p = p[: max(budget, 0)]
                one = self._assemble(q, p, t)
                ids.append(one["input_ids"])
                if "token_type_ids" in one:
                    types.append(one["token_type_ids"])
            return ({"input_ids": ids, "token_type_ids": types} if types else {"input_ids": ids}), stats
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


def pad_batch(features: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Dynamic padding to the longest sequence in the batch (a bi-encoder's passages, ``p_input_ids``,
    to their own longest, as ``p_input_ids`` and ``p_attention_mask``)."""
    out = _pad_ids(features, pad_id)
    if features and "p_input_ids" in features[0]:
        p = _pad_ids([{"input_ids": f["p_input_ids"]} for f in features], pad_id)
        out["p_input_ids"], out["p_attention_mask"] = p["input_ids"], p["attention_mask"]
    return out


def _pad_ids(features: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
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
