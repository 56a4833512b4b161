"""The settings of a mining run: :class:`MiningConfig`, validated in ``__post_init__``, whose
:meth:`~MiningConfig.fingerprint` a resumed run must match; and the ``--window`` and ``--shard`` specs.

Why the default window 3:100: on the bundled NQ-open sample, BM25 hits other than the gold passage
contain a gold answer 13%, 7% and 4% of the time at ranks 1, 2 and 3, against 2.8% at ranks 4-5 and
under 2% from rank 6 (docs/benchmarks.md, "Mining"). The answer filter drops those wherever they
are; skipping ranks 1-3 also avoids the ranks where relevant passages that word the answer
differently are most likely (sentence-transformers #2639, FlagEmbedding #826).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..bm25 import BACKENDS, ENGINES, BM25Params
from ..tokenization import TokenizerConfig

SAMPLING = ("top", "random")
#: --bm25-backend: our engine's backends, or an existing Lucene index searched through Anserini
MINING_BACKENDS = BACKENDS + ("lucene",)
LUCENE_TEXTS = ("index", "corpus")
DEFAULT_WINDOW = (3, 100)


def parse_window(spec: str) -> tuple[int, int | None]:
    """``"3:100"`` -> ``(3, 100)``; ``"3:"`` -> ``(3, None)`` (to the depth)."""
    try:
        a, b = spec.split(":")
        start = int(a) if a.strip() else 0
        end = int(b) if b.strip() else None
    except ValueError:
        raise ValueError(f"--window must look like START:END (e.g. 3:100), got {spec!r}") from None
    return start, end


def parse_shard(spec: str) -> tuple[int, int]:
    """``"2/8"`` -> ``(2, 8)`` (shard 2 of 8, counting from 0)."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like i/N (e.g. 0/8), got {spec!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {spec}: need 0 <= i < N")
    return i, n


@dataclass
class MiningConfig:
    """What to mine and how. Every field except the run-only ones is part of the run fingerprint."""

    depth: int = 100  # BM25 hits retrieved per query
    window: tuple[int, int | None] = DEFAULT_WINDOW  # slice of the ranked hits to draw hard negatives from
    negatives: int = 7  # negatives per query (hard + easy); 7 + 1 positive = a group of 8
    sampling: str = "top"  # "top": best-ranked valid hits of the window; "random": uniform over it
    easy_ratio: float = 0.0  # share of the negatives drawn at random from the whole corpus
    seed: int = 13
    exclude_answers: bool = True  # drop hits that contain a gold answer string (likely false negatives)
    answer_hits: int = 0  # keep the top K hits (positives aside) in metadata["answer_hits"] for the answer task
    dense_model: str | None = None  # local sentence-embedding folder for the margin filter ("default": MiniLM)
    dense_margin: float = 0.05  # drop a candidate whose dense similarity >= best positive's - margin
    engine: str = "bm25s"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    bm25: BM25Params = field(default_factory=BM25Params)
    num_shards: int = 1
    bm25_backend: str = "auto"  # bm25s retrieval: pruned, numpy, numba, or auto (pruned); in run.json as resolved
    exhaustive: bool = False  # score every posting (the old path, for comparison): auto -> numpy or numba
    lucene_index: str | None = None  # --bm25-backend lucene: the Lucene index folder to search
    lucene_texts: str = "index"  # lucene: passages from the index's stored raw documents, or from the source's corpus
    lucene_pretokenized: bool = False  # lucene: the index holds our tokens (-pretokenized); tokenise queries alike
    # run-only settings: they change speed, never the output
    batch_size: int = 256
    n_threads: int = 0  # retrieval threads (0: all cores)
    dense_batch_size: int = 64
    show_progress: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")
        if self.depth < 1:
            raise ValueError(f"--depth must be >= 1, got {self.depth}")
        start, end = self.window
        end = self.depth if end is None else end
        if not 0 <= start < end <= self.depth:
            raise ValueError(f"--window {start}:{end} must satisfy 0 <= START < END <= depth ({self.depth})")
        self.window = (start, end)
        if self.negatives < 1:
            raise ValueError(f"--negatives must be >= 1, got {self.negatives}")
        if self.sampling not in SAMPLING:
            raise ValueError(f"--sampling must be one of {', '.join(SAMPLING)}, got {self.sampling!r}")
        if not 0.0 <= self.easy_ratio <= 1.0:
            raise ValueError(f"--easy-ratio must be in [0, 1], got {self.easy_ratio}")
        if self.dense_margin < 0:
            raise ValueError(f"--dense-margin must be >= 0, got {self.dense_margin}")
        if self.num_shards < 1:
            raise ValueError(f"--num-shards must be >= 1, got {self.num_shards}")
        if self.bm25_backend not in MINING_BACKENDS:
            raise ValueError(f"--bm25-backend must be one of {', '.join(MINING_BACKENDS)}, got {self.bm25_backend!r}")
        if self.bm25_backend == "lucene":
            if not self.lucene_index:
                raise ValueError("--bm25-backend lucene needs --lucene-index DIR (an Anserini/Pyserini index folder)")
            if self.lucene_texts not in LUCENE_TEXTS:
                raise ValueError(f"--lucene-texts must be one of {', '.join(LUCENE_TEXTS)}, got {self.lucene_texts!r}")
            if self.exhaustive:
                raise ValueError("--exhaustive is a path of our engine; it does not apply to --bm25-backend lucene")
            if self.n_easy and self.lucene_texts != "corpus":
                raise ValueError("--easy-ratio draws random corpus passages: with --bm25-backend lucene use "
                                 "--lucene-texts corpus (the index's stored documents are read only for hits)")
        elif self.lucene_index:
            raise ValueError("--lucene-index is for --bm25-backend lucene")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.answer_hits < 0 or self.answer_hits > self.depth:
            raise ValueError(f"--answer-hits must be in 0..depth ({self.depth}), got {self.answer_hits}")

    @property
    def n_easy(self) -> int:
        return int(round(self.negatives * self.easy_ratio))

    @property
    def n_hard(self) -> int:
        return self.negatives - self.n_easy

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide the output (compared on resume)."""
        d = asdict(self)
        for k in ("batch_size", "n_threads", "dense_batch_size", "show_progress", "bm25_backend", "exhaustive", "lucene_index"):
            d.pop(k)  # (a Lucene index is in run.json by its fingerprint, not by its path)
        if self.bm25_backend != "lucene":
            for k in ("lucene_texts", "lucene_pretokenized"):
                d.pop(k)
        d["window"] = list(self.window)
        if self.dense_model is None:
            d.pop("dense_margin")
        return d
