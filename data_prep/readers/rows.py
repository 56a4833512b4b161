"""Any input as (query, passage, ids, optional label) rows: what ``python -m inference score`` and
``evaluate`` read, and what a labeller in ``data_prep`` reads the same way.

:func:`open_pair_rows` takes every format of :func:`~data_prep.readers.simple.detect_format`
(``pairs``, ``simple``, ``crag-evaluator``) and every reader format by name (``popqa``, ``beir``
with ``split``, ...: positives label 1, negatives label 0), and yields
:class:`~data_prep.readers.simple.PairRow`. The ``sentences`` format (gold key sentences) holds no
pairs: read it with :func:`~data_prep.readers.simple.read_sentence_rows`.

Empty passages: only CRAG's evaluator file has them on purpose (retrieval returned nothing; the
official test file has many). ``empty_passages`` says what becomes of them: ``"error"`` (a bad row,
kind ``empty-passage``: what training and dataset building use), ``"keep"`` (a row whose passage
is ``""``, with the passage id :data:`EMPTY_PASSAGE_ID`: a retrieval failure to score) or
``"skip"`` (left out). Kept or skipped, they are counted in :attr:`PairRows.empty_passages`. In
every other format an empty passage stays a bad row whatever the policy.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from ..io import Rejects, require_path
from ..records import LabelledPair, Passage
from .common import stable_id, text_query_id
from .crag import EMPTY_PASSAGES, check_empty_passages, read_evaluator_lines
from .simple import SENTENCES, SIMPLE, PairRow, detect_format, read_simple

__all__ = ["EMPTY_PASSAGES", "EMPTY_PASSAGE_ID", "READER_OPTIONS", "PairRow", "PairRows", "open_pair_rows",
           "resolve_format"]

CRAG_EVALUATOR = "crag-evaluator"
#: the reader options ``open_pair_rows`` passes on (as the ``data_prep convert`` options)
READER_OPTIONS = ("corpus", "queries", "qrels", "split", "rule", "fix_mojibake")
#: the passage id of a kept empty passage: the content id of no title and no text
EMPTY_PASSAGE_ID = stable_id("", "")


class PairRows(Iterator[PairRow]):
    """The rows of one input, read once as they are iterated; :attr:`empty_passages` counts the
    empty passages met so far (kept or skipped, by :attr:`policy`)."""

    def __init__(self, fmt: str, policy: str, make: Callable[["PairRows"], Iterator[PairRow]]):
        self.format = fmt
        self.policy = policy
        self.empty_passages = 0
        self._rows = make(self)

    def __next__(self) -> PairRow:
        return next(self._rows)


def resolve_format(path: str | os.PathLike, fmt: str = "auto") -> str:
    """``fmt``, or the format :func:`~data_prep.readers.simple.detect_format` reads off the first
    line when ``fmt == "auto"``; a missing ``path`` is a :class:`~data_prep.io.MissingInputError`."""
    path = require_path(path, "input file")
    return fmt if fmt != "auto" else detect_format(path)


def _check_options(fmt: str, options: dict[str, Any]) -> None:
    """An option the format's reader does not take is an error, not silently ignored."""
    from . import FORMATS, PAIR_READERS

    reader = PAIR_READERS[fmt] if fmt in PAIR_READERS else FORMATS[fmt][0]
    accepted = set(inspect.signature(reader).parameters)
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise ValueError(f"format {fmt!r} does not take {', '.join('--' + k.replace('_', '-') for k in unknown)}")


def _crag_rows(path: Path, rejects: Rejects | None, out: PairRows) -> Iterator[PairRow]:
    for ln in read_evaluator_lines(path, rejects, "error" if out.policy == "error" else "keep"):
        qid = text_query_id(ln.question)
        if ln.passage:  # as read_evaluator_pairs gives it
            pid = stable_id("", ln.passage)
            yield PairRow(ln.question, Passage(pid, ln.passage), qid, pid, ln.label)
            continue
        out.empty_passages += 1
        if out.policy == "keep":
            yield PairRow(ln.question, "", qid, EMPTY_PASSAGE_ID, ln.label)


def _pair_row(p: LabelledPair) -> PairRow:
    """A labelled pair as a row (the passage stays a :class:`~data_prep.records.Passage`)."""
    return PairRow(p.query, p.passage, p.query_id, p.passage.id, p.label)


def open_pair_rows(path: str | os.PathLike, fmt: str = "auto", rejects: Rejects | None = None, *,
                   empty_passages: str = "error", **reader_options: Any) -> tuple[str, PairRows]:
    """The input's format (resolved when ``fmt == "auto"``, via
    :func:`~data_prep.readers.simple.detect_format`) and its rows.

    ``reader_options``: ``corpus``, ``queries``, ``qrels``, ``split``, ``rule``, ``fix_mojibake``
    (``None`` and ``False`` mean not given); one the format does not take is a ``ValueError``.
    ``empty_passages``: ``"error"``, ``"keep"`` or ``"skip"`` (see the module docstring).
    Bad rows go to ``rejects`` (strict when ``None``).
    """
    check_empty_passages(empty_passages)
    unknown = sorted(set(reader_options) - set(READER_OPTIONS))
    if unknown:
        raise TypeError(f"open_pair_rows() got unexpected options: {', '.join(unknown)}")
    options = {k: v for k, v in reader_options.items() if v is not None and v is not False}
    path = Path(path)
    fmt = resolve_format(path, fmt)
    if fmt == SENTENCES:
        raise ValueError(f"{path}: format 'sentences' (gold key sentences) holds no (query, passage) pairs")
    if fmt == SIMPLE:
        if options:
            raise ValueError(f"format {fmt!r} does not take {', '.join('--' + k.replace('_', '-') for k in options)}")
        return fmt, PairRows(fmt, empty_passages, lambda _: read_simple(path, rejects))
    from . import FORMATS, load_all, open_pairs

    load_all()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known formats: auto, {SIMPLE}, {', '.join(sorted(FORMATS))}")
    _check_options(fmt, options)
    if fmt == CRAG_EVALUATOR:
        return fmt, PairRows(fmt, empty_passages, lambda out: _crag_rows(path, rejects, out))
    kwargs: dict[str, Any] = {"input": str(path), **options}
    if rejects is not None:
        kwargs["rejects"] = rejects
    return fmt, PairRows(fmt, empty_passages, lambda _: (_pair_row(p) for p in open_pairs(fmt, **kwargs)))
