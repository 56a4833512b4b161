"""Text utilities: SQuAD answer normalisation, answer containment, sentence splitting with offsets."""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
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


# --------------------------------------------------------------------------------------------
# Sentence splitting with character offsets
#
# A deterministic, rule-based splitter (stdlib only) shared by extractor training-data building
# and key-sentence serving. It finds *cut points* in the source string and never rewrites text:
# every returned sentence is a slice ``source[start:end]`` stripped of surrounding whitespace.


@dataclass(frozen=True)
class Sentence:
    """One sentence of a source string: ``text == source[start:end]``, with no surrounding
    whitespace. ``forced`` is True for a piece cut out of an over-long sentence."""

    text: str
    start: int
    end: int
    forced: bool = False


# Latin sentence terminators (a run such as "?!" or "..." counts as one) and CJK ones (which need
# no whitespace after them).
_LATIN_TERM = frozenset(".!?\u2026")  # … is an ellipsis
_CJK_TERM = frozenset("\u3002\uff01\uff1f\uff1b\uff61")  # 。！？；｡
# line breaks (the characters str.splitlines() breaks at)
_NEWLINES = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_CANDIDATE = re.compile("[" + re.escape("".join(sorted(_LATIN_TERM | _CJK_TERM | _NEWLINES))) + "]")
# closing quotes/brackets allowed right after a terminator (ASCII quotes: see _skip_closers)
_CLOSERS = frozenset("\u201d\u2019)]}\u00bb\u203a\u300d\u300f\uff09\u3011\u300b\u3009\u3015\uff3d\uff5d\u301e\u3017\u3019")
_AMBIGUOUS_QUOTES = frozenset("\"'")
# opening quotes/brackets that may begin a sentence
_OPENERS = frozenset("\"'\u201c\u2018([{\u00ab\u2039\u00bf\u00a1\u300c\u300e\uff08\u3010\u300a\u3008\u3014\uff3b\uff5b\u301d\u3016\u3018")
_CJK_OPENERS = frozenset("\u300c\u300e\uff08\u3010\u300a\u3008\u3014\uff3b\uff5b\u301d\u3016\u3018")
_CITATION = re.compile(r"(?:\[\d{1,4}\])+")  # Wikipedia-style "[12]" right after a full stop
_SOFT_BREAKS = frozenset(",;\uff0c\u3001\uff1b")  # where an over-long piece may be cut: , ; ， 、 ；

# Abbreviations after which "." does not end a sentence. Title-like ones match as written or in
# capitals ("Dr", "DR"); lower-case ones ("etc", "vs") also capitalised, but not in capitals ("EST"
# is a time zone); the numeric ones only when a number follows ("No. 5", "pp. 12", "c. 1900",
# "c. AD 400") since "no." is also a word. Dotted initialisms ("U.S.", "e.g.") never end a
# sentence, except "a.m."/"p.m.", which usually do when a capital follows.
_ABBREV_TITLE = frozenset(
    """Mr Mrs Ms Mx Messrs Mme Mlle Dr Drs Prof Sr Jr Sra Srta St Ste Rev Hon Fr Br Sen Rep Gov Pres
    Gen Col Lt Sgt Capt Cpt Maj Adm Cmdr Cdr Cpl Pvt Brig Insp Supt Mt Ft Ave Blvd Rd Hwy Inc Ltd Co
    Corp Bros Assn Dept Univ Plc Fig Figs Tab Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
    Ph.D Ed.D Vol Vols Esq Pub""".split()
)
_ABBREV_TITLE_UPPER = frozenset(a.upper() for a in _ABBREV_TITLE)
_ABBREV_LOWER = frozenset("vs etc cf approx viz esp incl ibid resp misc lit translit transl tr abbr pron orig var".split())
_ABBREV_NUMERIC = frozenset("no nos vol vols pp p c ca art ch chap sec fig figs eq eqs op nr tab est b d r fl".split())
_ERA = re.compile(r"(?:AD|BC|BCE|CE)\b")
_CLOCK = frozenset({"a.m", "p.m"})
_WORD_SEP = re.compile("[-\u2010-\u2015/]")
_INITIALISM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]\Z")  # U.S, U.K, e.g, i.e, a.m, D.C, U.S.A
_ENUMERATOR = re.compile(r"\d{1,3}\Z")  # "1." at the start of a line/sentence: a list item


def _is_cjk(c: str) -> bool:
    o = ord(c)
    return (
        0x2E80 <= o <= 0x2FDF  # radicals
        or 0x3040 <= o <= 0x31FF  # kana, bopomofo, hangul compatibility jamo, kana extensions
        or 0x3400 <= o <= 0x4DBF  # CJK extension A
        or 0x4E00 <= o <= 0x9FFF  # CJK unified ideographs
        or 0xAC00 <= o <= 0xD7AF  # hangul syllables
        or 0xF900 <= o <= 0xFAFF  # compatibility ideographs
        or 0xFF66 <= o <= 0xFF9F  # half-width katakana
        or 0x20000 <= o <= 0x3FFFF  # extensions B-H
    )


def _skip_closers(text: str, k: int, seg_start: int, cjk: bool) -> int:
    """Index just past the closing quotes/brackets that directly follow a terminator ending at k.
    After a CJK terminator an ASCII quote closes only when the sentence has an open one (odd
    count), because no whitespace tells "好。"然后" from "好。"Hi"" apart."""
    n = len(text)
    while k < n:
        c = text[k]
        if c in _CLOSERS:
            k += 1
        elif c in _AMBIGUOUS_QUOTES and (not cjk or text.count(c, seg_start, k) % 2 == 1):
            k += 1
        else:
            break
    return k


def _keeps_going(text: str, i: int, seg_start: int, w: int) -> bool:
    """True when the single "." at ``text[i]`` belongs to an abbreviation, initial or list number
    rather than ending the sentence (``text[w]``: the first character after the whitespace)."""
    j = i
    while j > seg_start and not text[j - 1].isspace():
        j -= 1
    # the word before the stop, without opening quotes/brackets or CJK text glued in front
    while j < i and (text[j] in _OPENERS or _is_cjk(text[j])):
        j += 1
    word = text[j:i]
    if not word:
        return False
    number_follows = text[w].isdecimal() or _ERA.match(text, w) is not None  # "c. 1900", "c. AD 400"
    # the word itself, and its last part after a dash or stop: "ex-Gov.", "Minneapolis–St.", "Pub.L."
    for part in {word, _WORD_SEP.split(word)[-1], word.rsplit(".", 1)[-1]}:
        if not part:
            continue
        if part in _ABBREV_TITLE or (part.isupper() and part in _ABBREV_TITLE_UPPER):  # "Dr", "DR"
            return True
        if (part.lower() in _ABBREV_LOWER and not part.isupper()) or part == "al":  # "etc.", "et al."
            return True
        if part.lower() in _ABBREV_NUMERIC and number_follows:  # "No. 1", but "No. He refused."
            return True
        if len(part) == 1 and part.isupper():  # an initial: "J. R. R. Tolkien", "George W. Bush"
            return True
    if _INITIALISM.match(word):  # "U.S.", "e.g." - but "a.m."/"p.m." end a sentence before a capital
        return word.lower() not in _CLOCK
    # "1. Introduction": a list number that opens the line/sentence
    k = seg_start
    while k < j and text[k].isspace():
        k += 1
    return k == j and bool(_ENUMERATOR.match(word))


def _cut_points(text: str) -> list[int]:
    """Positions where one sentence ends and the next may begin (in increasing order)."""
    cuts: list[int] = []
    n = len(text)
    seg_start = 0  # where the current sentence began (after the previous cut)
    pos = 0
    while True:
        m = _CANDIDATE.search(text, pos)
        if m is None:
            break
        i = m.start()
        c = text[i]
        if c in _NEWLINES:
            cuts.append(i)
            seg_start = pos = i + 1
            continue
        j = i + 1
        while j < n and (text[j] in _LATIN_TERM or text[j] in _CJK_TERM):
            j += 1
        run = text[i:j]
        cjk = any(ch in _CJK_TERM for ch in run)
        k = _skip_closers(text, j, seg_start, cjk)
        cite = _CITATION.match(text, k)
        if cite:
            k = _skip_closers(text, cite.end(), seg_start, cjk)
        pos = k
        if cjk:
            cuts.append(k)
            seg_start = k
            continue
        w = k
        while w < n and text[w].isspace() and text[w] not in _NEWLINES:
            w += 1
        if w >= n or text[w] in _NEWLINES:
            continue  # the end of the text or line is a boundary anyway
        nxt = text[w]
        ellipsis = run == "\u2026" or (len(run) > 1 and set(run) <= {".", "\u2026"})
        if w > k:  # whitespace, then something that can begin a sentence
            starts = nxt.isupper() or nxt.isdecimal() or nxt in _OPENERS or unicodedata.category(nxt) == "Lt"
            if not starts and not ellipsis:
                starts = unicodedata.category(nxt) == "Lo"  # a caseless script, e.g. Chinese
        else:  # no whitespace: only a CJK sentence may follow directly ("in 2019.它很好")
            starts = not ellipsis and (_is_cjk(nxt) or nxt in _CJK_OPENERS)
        if not starts:
            continue
        if run == "." and _keeps_going(text, i, seg_start, w):
            continue
        cuts.append(k)
        seg_start = k
    return cuts


def _strip(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _force_cut(text: str, a: int, b: int, max_chars: int) -> list[Sentence]:
    """Cut the stripped span [a, b) into pieces of at most ``max_chars`` characters: at the last
    whitespace before the limit, else after the last , ; ， 、 ；, else hard at the limit (never
    between a character and a combining mark that follows it)."""
    out: list[Sentence] = []
    pos = a
    while b - pos > max_chars:
        limit = pos + max_chars
        end = nxt = -1
        for w in range(limit, pos, -1):  # text[limit] being whitespace means a full-length piece
            if text[w].isspace():
                end, nxt = w, w
                break
        if end < 0:
            for w in range(limit - 1, pos, -1):
                if text[w] in _SOFT_BREAKS:
                    end = nxt = w + 1
                    break
        if end < 0:
            end = limit
            while end > pos and unicodedata.category(text[end]).startswith("M"):
                end -= 1
            if end == pos:  # nothing but combining marks: cut anyway
                end = limit
            nxt = end
        s, e = _strip(text, pos, end)
        if s < e:
            out.append(Sentence(text[s:e], s, e, True))
        pos, _ = _strip(text, nxt, b)
    if pos < b:
        out.append(Sentence(text[pos:b], pos, b, True))
    return out


def sentence_spans(text: str, max_chars: int | None = 600) -> list[Sentence]:
    """Split ``text`` into sentences that keep their character offsets into it.

    Boundaries: ``.``/``!``/``?``/``…`` (a run of them, then any closing quotes/brackets) followed
    by whitespace and a capital letter, digit, opening quote/bracket or a caseless-script letter
    (e.g. Chinese) - except after abbreviations ("Dr.", "e.g.", "U.S."), initials ("George W.
    Bush") and list numbers, and an ellipsis only before a capital/digit/quote; a Latin terminator
    directly followed by CJK text; each of 。！？；｡ with the closing quotes/brackets after it; one or
    more line breaks. A sentence longer than ``max_chars`` is cut into pieces marked ``forced``
    (``None``: never cut). Deterministic; ``text[s.start:s.end] == s.text`` for every sentence.
    """
    if not isinstance(text, str):
        raise TypeError(f"sentence_spans() needs a str, not {type(text).__name__}")
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 20):
        raise ValueError(f"max_chars must be an integer >= 20 or None, got {max_chars!r}")
    out: list[Sentence] = []
    prev = 0
    for cut in [*_cut_points(text), len(text)]:
        a, b = _strip(text, prev, cut)
        prev = cut
        if a >= b:
            continue
        if max_chars is not None and b - a > max_chars:
            out.extend(_force_cut(text, a, b, max_chars))
        else:
            out.append(Sentence(text[a:b], a, b))
    return out


def split_sentences(text: str) -> list[str]:
    """Split text into sentences (rule based; see :func:`sentence_spans`)."""
    return [s.text for s in sentence_spans(text)]
