"""Documents into :class:`~pipeline.types.Chunk` s: paragraphs, then sentence-aware windows.

How a document is cut (defaults from the seed: at most 256 characters, 32 of overlap):

1. **Paragraphs** are separated by blank lines (a line holding only whitespace counts as blank).
   Each paragraph is stripped of surrounding whitespace; its index is its position among the
   non-empty paragraphs of the document, and chunk offsets (``start``/``end``) are offsets into
   that stripped paragraph, so ``chunk.text == paragraph[chunk.start:chunk.end]`` always.
2. **Atoms.** A chunk starts and ends on an atom: a run of non-space characters (a word, a number,
   a code such as ``E-204``, a URL), except that each CJK character is an atom of its own, so
   Chinese or Japanese text without spaces can be cut between characters but a Latin word or code
   inside it stays whole. No chunk ever cuts inside a word.
3. **Packing.** Sentences come from :func:`data_prep.text.sentence_spans`. A chunk takes whole
   sentences while they fit in ``max_chars``; when the next sentence does not fit, the chunk ends at
   the last sentence end. A sentence longer than ``max_chars`` is cut into windows at atom
   boundaries (as many atoms as fit). A single atom longer than ``max_chars`` (a long URL) is a
   chunk of its own - the one case where a chunk is longer than ``max_chars``.
4. **Overlap.** The next chunk of the same paragraph starts with the tail of the previous one: the
   longest run of its last whole atoms that spans at most ``overlap`` characters. When the
   previous chunk ended at a sentence end, the tail is shortened (or dropped) if keeping it would
   split the next sentence, which fits in a chunk on its own, across two chunks; inside a long
   sentence the tail is always kept. Chunks never overlap across paragraphs.

``unit="words"`` measures ``max_chars`` and ``overlap`` in atoms (words) instead of characters,
which suits English; in CJK text every character is an atom, so there it counts characters.

Ids are ``f"{doc_id}#p{paragraph}c{n}"`` with ``n`` counting the chunks of that paragraph from 0.

Markdown (:func:`chunks_from_files`): ATX headings (``#`` to ``######``, outside code fences) are
never chunk text. A heading ends the paragraph before it; each chunk's ``title`` is the nearest
heading above it and ``metadata["section"]`` the path of headings down to it
(``"XR-7000 manual > Error codes"``), so both retrieval routes and the metadata code map see it.
Setext headings (a line underlined with ``===``/``---``) are treated as text.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from data_prep.io import MissingInputError
from data_prep.readers import open_source
from data_prep.text import sentence_spans

from .types import Chunk

logger = logging.getLogger(__name__)

UNITS = ("chars", "words")
#: file suffixes :func:`chunks_from_files` reads, and which of them are Markdown
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
MARKDOWN_SUFFIXES = (".md", ".markdown")
#: keys that :meth:`Chunk.to_passage` writes itself; a passage's own metadata under these names is
#: kept as ``passage_<key>`` so it cannot overwrite the chunk's position
RESERVED_METADATA = ("doc_id", "paragraph", "start", "end")

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_ATOM = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```+|~~~+)")


def check_chunking(max_chars: int, overlap: int, unit: str) -> None:
    """Raise ``ValueError`` for settings that cannot chunk (shared with the index builder)."""
    if unit not in UNITS:
        raise ValueError(f"chunk unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < max_chars:
        raise ValueError(f"overlap must be an integer in [0, max_chars={max_chars}), got {overlap!r}")


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each non-empty paragraph of ``text`` (split on blank lines, stripped)."""
    spans = []
    pos = 0
    for m in [*_BLANK_LINES.finditer(text), None]:
        stop = m.start() if m is not None else len(text)
        a, b = pos, stop
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            spans.append((a, b))
        if m is not None:
            pos = m.end()
    return spans


def split_paragraph(paragraph: str, max_chars: int = 256, overlap: int = 32, unit: str = "chars") -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of the chunks of one paragraph (see the module doc)."""
    check_chunking(max_chars, overlap, unit)
    atoms: list[tuple[int, int]] = []
    bounds: list[int] = []  # atom indices where a new sentence starts (ascending, > 0), then len(atoms)
    for s in sentence_spans(paragraph, max_chars=None):
        if atoms:
            bounds.append(len(atoms))
        atoms.extend(m.span() for m in _ATOM.finditer(paragraph, s.start, s.end))
    n = len(atoms)
    if n == 0:
        return []
    if not bounds or bounds[-1] != n:
        bounds.append(n)

    if unit == "chars":
        def size(i: int, j: int) -> int:  # characters spanned by atoms i..j-1
            return atoms[j - 1][1] - atoms[i][0]
    else:
        def size(i: int, j: int) -> int:  # atoms i..j-1
            return j - i

    out: list[tuple[int, int]] = []
    start, prev_end = 0, 0
    while True:
        end = start + 1
        while end < n and size(start, end + 1) <= max_chars:
            end += 1
        if end < n:  # end at the last sentence end that fits and adds something new
            k = bisect.bisect_right(bounds, end) - 1
            if k >= 0 and bounds[k] > prev_end:
                end = bounds[k]
        out.append((start, end))
        if end >= n:
            break
        # after a sentence end, the tail must leave room for the whole next sentence when that fits
        # in a chunk alone; inside a long sentence, for the next atom
        k = bisect.bisect_left(bounds, end)
        need = end + 1
        if bounds[k] == end and size(end, bounds[k + 1]) <= max_chars:
            need = bounds[k + 1]
        ns = end
        while ns - 1 > start and size(ns - 1, end) <= overlap and size(ns - 1, need) <= max_chars:
            ns -= 1
        prev_end, start = end, ns
    return [(atoms[i][0], atoms[j - 1][1]) for i, j in out]


def chunk_document(
    doc_id: str,
    text: str,
    title: str = "",
    source: str = "",
    metadata: dict[str, Any] | None = None,
    max_chars: int = 256,
    overlap: int = 32,
    unit: str = "chars",
) -> list[Chunk]:
    """The chunks of one document: paragraphs on blank lines, sentence-aware windows within each.

    Every chunk keeps ``doc_id``, ``title``, ``source`` and a copy of ``metadata``; ``paragraph``
    is the index among non-empty paragraphs and ``start``/``end`` the offsets of ``text`` in it.
    """
    check_chunking(max_chars, overlap, unit)
    if not isinstance(text, str):
        raise TypeError(f"document {doc_id!r}: text must be a str, not {type(text).__name__}")
    paragraphs = [text[a:b] for a, b in paragraph_spans(text)]
    return _chunk_paragraphs(str(doc_id), [(p, title, metadata or {}) for p in paragraphs], source, max_chars, overlap, unit)


def _chunk_paragraphs(
    doc_id: str,
    paragraphs: Sequence[tuple[str, str, dict[str, Any]]],
    source: str,
    max_chars: int,
    overlap: int,
    unit: str,
) -> list[Chunk]:
    """Chunks of ``(paragraph text, title, metadata)`` triples, numbered in order."""
    out: list[Chunk] = []
    for p_idx, (para, title, meta) in enumerate(paragraphs):
        for n, (a, b) in enumerate(split_paragraph(para, max_chars, overlap, unit)):
            out.append(
                Chunk(
                    id=f"{doc_id}#p{p_idx}c{n}", doc_id=doc_id, text=para[a:b], title=title,
                    paragraph=p_idx, start=a, end=b, source=source, metadata=dict(meta),
                )
            )
    return out


def chunks_from_source(
    fmt: str, max_chars: int = 256, overlap: int = 32, unit: str = "chars", **reader_kwargs: Any
) -> Iterator[Chunk]:
    """The chunks of the corpus of any :func:`data_prep.readers.open_source` format.

    Each passage is one document (its id, title and text); ``source`` is ``metadata["source"]``
    when the passage has one, else ``fmt``; the rest of its metadata is kept on every chunk (keys
    in :data:`RESERVED_METADATA` renamed ``passage_<key>``). A bad row of the reader (a PopQA row
    with an empty passage: ``file:line: ctxs[i]: empty passage``) raises, unless ``reader_kwargs``
    holds ``rejects=Rejects(skip_bad=True, out_dir=...)`` (``pipeline index --skip-bad``): then it
    is left out, counted and kept there.
    """
    check_chunking(max_chars, overlap, unit)
    src = open_source(fmt, **reader_kwargs)
    for p in src.corpus():
        meta = dict(p.metadata)
        source = str(meta.pop("source", None) or fmt)
        for key in RESERVED_METADATA:
            if key in meta:
                meta[f"passage_{key}"] = meta.pop(key)
        yield from chunk_document(p.id, p.text, p.title, source, meta, max_chars, overlap, unit)


def markdown_paragraphs(text: str, title: str = "") -> list[tuple[str, str, dict[str, Any]]]:
    """``(paragraph, title, metadata)`` for each paragraph of a Markdown text.

    Heading lines are dropped from the text and end the paragraph before them; ``title`` is the
    nearest heading above (``title`` argument before the first one) and ``metadata["section"]`` the
    heading path (``"Manual > Errors"``). ``#`` lines inside ``` / ~~~ fences are code, not headings.
    """
    out: list[tuple[str, str, dict[str, Any]]] = []
    path: list[tuple[int, str]] = []  # (level, heading) from the top down
    block: list[str] = []
    fence: str | None = None

    def flush() -> None:
        body = "\n".join(block)
        block.clear()
        meta = {"section": " > ".join(h for _, h in path)} if path else {}
        heading = path[-1][1] if path else title
        out.extend((body[a:b], heading, dict(meta)) for a, b in paragraph_spans(body))

    for line in text.splitlines():
        m = _FENCE.match(line)
        if m:
            marker = m.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
            block.append(line)
            continue
        h = _ATX_HEADING.match(line) if fence is None else None
        if h is None:
            block.append(line)
            continue
        flush()
        level, heading = len(h.group(1)), (h.group(2) or "").strip()
        while path and path[-1][0] >= level:
            path.pop()
        if heading:
            path.append((level, heading))
    flush()
    return out


def _walk(paths: Iterable[str | os.PathLike]) -> Iterator[tuple[Path, str]]:
    """``(file, document id)`` for the text/Markdown files named or found under folders."""
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise MissingInputError(p, "document file or folder")
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p)
                if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES and not any(part.startswith(".") for part in rel.parts):
                    yield f, rel.as_posix()
        elif p.suffix.lower() in TEXT_SUFFIXES:
            yield p, p.name
        else:
            raise ValueError(f"{p}: not a text or Markdown file (expected one of {', '.join(TEXT_SUFFIXES)})")


def chunks_from_files(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    max_chars: int = 256,
    overlap: int = 32,
    unit: str = "chars",
    metadata: dict[str, Any] | None = None,
) -> Iterator[Chunk]:
    """The chunks of plain text (``.txt``) and Markdown (``.md``) files; folders are walked
    (sorted, hidden files skipped). One document per file: the doc id is its path relative to the
    folder given (its name for a file given directly), ``source`` its file name. Text files have
    no title; Markdown chunks take the nearest heading as title (see the module doc). ``metadata``
    is added to every chunk."""
    check_chunking(max_chars, overlap, unit)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    seen: set[str] = set()
    for f, doc_id in _walk(paths):
        if doc_id in seen:
            raise ValueError(f"two documents have the id {doc_id!r} (from {f}); give their folders separately named")
        seen.add(doc_id)
        try:
            text = f.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as e:
            raise ValueError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        extra = dict(metadata or {})
        if f.suffix.lower() in MARKDOWN_SUFFIXES:
            paragraphs = [(p, t, {**extra, **m}) for p, t, m in markdown_paragraphs(text)]
        else:
            paragraphs = [(text[a:b], "", extra) for a, b in paragraph_spans(text)]
        if not paragraphs:
            logger.info("%s: no text, skipped", f)
        yield from _chunk_paragraphs(doc_id, paragraphs, f.name, max_chars, overlap, unit)


__all__ = [
    "UNITS",
    "check_chunking",
    "chunk_document",
    "chunks_from_files",
    "chunks_from_source",
    "markdown_paragraphs",
    "paragraph_spans",
    "split_paragraph",
]
