"""Tokenisation for BM25: one configurable tokenizer whose tokens feed every engine.

* :class:`TokenizerConfig` - serialisable settings (language ``en``/``zh``/``none``, lower case,
  English stopwords, Snowball stemming through PyStemmer, code tokens). An index stores its config
  and refuses queries tokenised differently.
* :func:`build_tokenizer` - a fast callable ``tokenizer(text) -> list[str]``.

Code-like tokens (product codes, versions, identifiers) are indexed whole *and* split:
``E-204`` gives ``e``, ``204`` and ``e-204``; ``v2.1`` gives ``v2``, ``1``, ``v2.1``;
``ISO_9001`` gives ``iso``, ``9001``, ``iso_9001``; ``A/B`` gives ``b`` and ``a/b`` (``a`` is a
stopword). A query that names the exact code then matches it exactly, and one that names a part
still matches. The whole token is only lower-cased, never stemmed or stopword-filtered. (Tokens
come out as the text's words in order, then its whole codes: BM25 ignores order.)

Chinese (``language="zh"``) is segmented with jieba (``cut_for_search`` by default, which also
emits the sub-words of long words, or ``lcut``); latin letters, digits and codes inside Chinese
text are cut out before jieba sees them, so ``E-204`` stays intact.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from itertools import filterfalse
from typing import Any, Callable, Iterable

logger = logging.getLogger(__name__)

LANGUAGES = ("en", "zh", "none")
JIEBA_MODES = ("search", "accurate")

#: Lucene's English stopword list (the default of Lucene, Elasticsearch and Pyserini), 33 words.
ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)

# A word is a run of letters/digits (underscore is a connector, not a letter); a code joins words
# with - _ . / and nothing else (no spaces), e.g. E-204, v2.1, ISO_9001, A/B.
_ALNUM = r"[^\W_]+"
_CODE_RE = re.compile(rf"{_ALNUM}(?:[-_./]{_ALNUM})*")
_WORD_RE = re.compile(_ALNUM)
_CONNECTORS = "-_./"
# CJK ideographs (basic, extension A, compatibility) - the spans handed to jieba.
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


@dataclass(frozen=True)
class TokenizerConfig:
    """How text becomes BM25 tokens. Stored with every index; an index refuses a different one."""

    language: str = "en"  # en: latin words; zh: jieba for CJK spans + latin words; none: words only
    lowercase: bool = True  # lower-case every token (codes included)
    stopwords: bool = True  # drop Lucene's 33 English stopwords (whole codes are never dropped)
    stem: bool = False  # Snowball stemming of latin words (PyStemmer); never applied to codes or CJK
    stemmer_language: str = "english"  # PyStemmer algorithm name
    code_tokens: bool = True  # also index E-204 / v2.1 / ISO_9001 / A/B as one token
    jieba_mode: str = "search"  # zh only: "search" (cut_for_search) or "accurate" (lcut)

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"tokenizer language {self.language!r} is not one of {', '.join(LANGUAGES)}")
        if self.jieba_mode not in JIEBA_MODES:
            raise ValueError(f"jieba_mode {self.jieba_mode!r} is not one of {', '.join(JIEBA_MODES)}")
        if self.stem:
            _stemmer(self.stemmer_language)  # fail early on an unknown stemmer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TokenizerConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown tokenizer setting(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def fingerprint(self) -> str:
        """A short stable hash of the settings (equal configs, equal fingerprints)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@lru_cache(maxsize=None)
def _stemmer(language: str):
    import Stemmer  # PyStemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ValueError(
            f"PyStemmer has no stemmer {language!r}; available: {', '.join(Stemmer.algorithms())}"
        ) from None


@lru_cache(maxsize=1)
def _jieba():
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


class Tokenizer:
    """``Tokenizer(config)(text) -> list[str]``; picklable (rebuilds its helpers lazily)."""

    def __init__(self, config: TokenizerConfig | None = None):
        self.config = config or TokenizerConfig()
        c = self.config
        self._stop = ENGLISH_STOPWORDS if c.stopwords else frozenset()
        self._stem = _stemmer(c.stemmer_language).stemWords if c.stem else None
        self._split_latin: Callable[[str], list[str]] = self._latin_codes if c.code_tokens else self._latin_words

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])

    def __call__(self, text: str) -> list[str]:
        if self.config.lowercase:
            text = text.lower()
        if self.config.language == "zh":
            return self._chinese(text)
        return self._split_latin(text)

    def many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self(t) for t in texts]

    # -- latin text ---------------------------------------------------------------------------
    def _filter(self, words: list[str]) -> list[str]:
        stop = self._stop
        if stop:
            words = list(filterfalse(stop.__contains__, words))
        if self._stem is not None:
            words = self._stem(words)
        return words

    def _latin_words(self, text: str) -> list[str]:
        return self._filter(_WORD_RE.findall(text))

    def _latin_codes(self, text: str) -> list[str]:
        # one pass finds words and whole codes; only text with codes needs a second pass for the parts
        toks = _CODE_RE.findall(text)
        joined = "".join(toks)  # only a code holds a connector; most texts have none (one C-speed scan)
        if not any(c in joined for c in _CONNECTORS):
            return self._filter(toks)
        return self._filter(_WORD_RE.findall(text)) + [t for t in toks if not t.isalnum()]

    # -- Chinese text -------------------------------------------------------------------------
    def _chinese(self, text: str) -> list[str]:
        jieba = _jieba()
        cut = jieba.cut_for_search if self.config.jieba_mode == "search" else jieba.lcut
        out: list[str] = []
        pos = 0
        for m in _CJK_RE.finditer(text):
            if m.start() > pos:
                out.extend(self._split_latin(text[pos : m.start()]))
            out.extend(w for w in cut(m.group()) if w.strip())
            pos = m.end()
        if pos < len(text):
            out.extend(self._split_latin(text[pos:]))
        return out


def build_tokenizer(config: TokenizerConfig | None = None) -> Tokenizer:
    """The tokenizer for ``config`` (English, lower case, stopwords, codes, no stemming by default)."""
    return Tokenizer(config)
