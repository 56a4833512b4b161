"""Readers for the common retrieval-training formats.

Each reader streams records (:class:`~data_prep.records.Passage`,
:class:`~data_prep.records.QueryExample` or :class:`~data_prep.records.LabelledPair`) and reports
bad rows through a :class:`~data_prep.io.Rejects` policy as ``file:line: what is wrong``.

:func:`open_source` turns any supported format into a :class:`Source`: a re-iterable corpus of
passages plus re-iterable query examples whose positives are passages of that corpus. Mining and
dataset building only ever see a :class:`Source`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..records import Passage, QueryExample


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
