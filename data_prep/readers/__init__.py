"""Readers for the common retrieval-training formats.

Each reader streams records (:class:`~data_prep.records.Passage`,
:class:`~data_prep.records.QueryExample` or :class:`~data_prep.records.LabelledPair`) and reports
bad rows through a :class:`~data_prep.io.Rejects` policy as ``file:line: what is wrong``.

:func:`open_source` turns any supported format into a :class:`Source`: a re-iterable corpus of
passages plus re-iterable query examples whose positives are passages of that corpus. Mining and
dataset building only ever see a :class:`Source`.

:func:`open_pairs` turns any format into :class:`~data_prep.records.LabelledPair` objects: through
the format's own pair reader when it registered one with :func:`register_pairs`, else from the
positives (label 1) and negatives (label 0) of its query examples.

The reader modules share the per-row helpers of :mod:`data_prep.readers.common` and the file
parsers of :mod:`data_prep.readers.files`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ..records import LabelledPair, Passage, QueryExample, RecordError


@dataclass
class Source:
    """A corpus and the queries over it, both re-iterable (each call streams from disk again)."""

    name: str
    corpus: Callable[[], Iterator[Passage]]
    queries: Callable[[], Iterator[QueryExample]]
    files: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


#: format name -> (opener, one-line help). Filled by the reader modules below.
FORMATS: dict[str, tuple[Callable[..., Source], str]] = {}


def register_format(name: str, help: str):
    def deco(fn: Callable[..., Source]) -> Callable[..., Source]:
        FORMATS[name] = (fn, help)
        return fn

    return deco


def open_source(fmt: str, **kwargs: Any) -> Source:
    """Open ``fmt`` with the paths and options in ``kwargs`` (``input``, ``corpus``, ``queries``,
    ``qrels``, ``split``, ``rejects``, format-specific options)."""
    import inspect

    load_all()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known formats: {', '.join(sorted(FORMATS))}")
    opener = FORMATS[fmt][0]
    params = inspect.signature(opener).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(k for k, v in kwargs.items() if k not in params and v is not None)
        if unknown:
            takes = ", ".join(p for p in params if p != "rejects")
            raise ValueError(f"format {fmt!r} does not take {', '.join(unknown)} (it takes: {takes})")
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return opener(**kwargs)


def load_all() -> None:
    from . import beir, crag, flagembedding, msmarco, nq, ours, squad  # noqa: F401  (registers formats)


# --------------------------------------------------------------------------------------------
# pairs from any format

#: format name -> function(**kwargs) -> Iterator[LabelledPair], for formats whose rows are pairs.
PAIR_READERS: dict[str, Callable[..., Iterator[LabelledPair]]] = {}


def register_pairs(name: str):
    def deco(fn: Callable[..., Iterator[LabelledPair]]) -> Callable[..., Iterator[LabelledPair]]:
        PAIR_READERS[name] = fn
        return fn

    return deco


def examples_to_pairs(examples: Iterable[QueryExample], label_source: str = "human") -> Iterator[LabelledPair]:
    """Positives as label-1 pairs and negatives as label-0 pairs (label source from the example's
    ``metadata["label_source"]`` when set)."""
    for ex in examples:
        src = ex.metadata.get("label_source", label_source)
        for label, group in ((1.0, ex.positives), (0.0, ex.negatives)):
            for p in group:
                try:
                    yield LabelledPair(ex.id, ex.query, p, label, src)
                except RecordError as e:  # an unknown label source is a programming error
                    raise ValueError(str(e)) from None


def open_pairs(fmt: str, **kwargs: Any) -> Iterator[LabelledPair]:
    """Labelled pairs of ``fmt``: its own pair reader if it has one, else derived from its queries."""
    load_all()
    if fmt in PAIR_READERS:
        return PAIR_READERS[fmt](**kwargs)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known formats: {', '.join(sorted(FORMATS))}")
    src = open_source(fmt, **kwargs)
    return examples_to_pairs(src.queries(), src.info.get("label_source", "human"))
