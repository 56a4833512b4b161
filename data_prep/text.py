"""Text utilities: SQuAD answer normalisation, answer containment, sentence splitting."""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def normalize_answer(s: str) -> str:
    """The SQuAD v1.1 evaluation normalisation: lower case, drop punctuation, articles and extra
    whitespace (plus NFKC so full-width and composed characters compare equal)."""
    s = unicodedata.normalize("NFKC", s).lower()
    s = "".join(ch if ch not in _PUNCT else " " for ch in s)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def contains_answer(text: str, answers: Iterable[str], normalized_text: str | None = None) -> bool:
    """True when any gold answer occurs in ``text`` as a whole-token sequence after normalisation."""
    hay = " " + (normalized_text if normalized_text is not None else normalize_answer(text)) + " "
    for a in answers:
        na = normalize_answer(a)
        if na and f" {na} " in hay:
            return True
    return False


_SENT_END = re.compile(
    r"""(?<=[.!?])["')\]]*\s+(?=["'(\[]?[A-Z0-9])   # latin sentence end followed by a capital/digit
      | (?<=[。！？；])                             # CJK full stops
      | \n+""",
    re.VERBOSE,
)
_ABBREV = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|No|Fig|U\.S|Inc|Ltd|Co)\.$")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences (rule based; keeps abbreviations such as "Dr." together)."""
    parts = [p for p in _SENT_END.split(text) if p is not None]
    out: list[str] = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        if out and (_ABBREV.search(out[-1]) or re.search(r"\b[A-Z]\.$", out[-1])):
            out[-1] = f"{out[-1]} {p}"
        else:
            out.append(p)
    return out
