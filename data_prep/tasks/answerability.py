"""Answerability hard negatives for the answer task: passages (or questions) that only the answer
separates from a positive.

The answer task's other negatives are other passages of the question's topic; a classifier can
tell most of them from the gold passage by topic alone. These are made from the gold passage
itself (a positive that holds the answer: SQuAD's annotated paragraph, or a passage containing a
gold answer string), so topic, entities and wording stay and only the answer changes:

``removed`` (``negative_kind`` ``answer-removed``)
    the passage without the sentence(s) that hold an answer: every occurrence of every gold answer
    after SQuAD normalisation (:func:`~data_prep.text.contains_answer`'s), and the annotated
    ``answer_spans``. Passage id ``<origin id>#removed``; label 0, label source ``answer-match``.
``swapped`` (``answer-swapped``)
    every answer occurrence replaced by one span of the same type (:func:`span_type`: a year by a
    year, a date by a date, a number by one of the same magnitude, a name by a name; a name that
    answers a who/where question by another question's who/where answer) drawn from the other
    questions' answers and question entities. The passage still states an answer, but a wrong
    one: **label 0**, since the task is "does this passage hold the answer to this question", and
    a wrong answer is not the answer. Passage id ``<origin id>#swapped``; label source
    ``answer-match``.
``perturbed`` (``question-perturbed``)
    the question's key entity (a capitalised span or a number of the question, not its first word,
    that also occurs in the passage) replaced by an entity of the same type that does not occur in
    the passage, as SQuAD 2.0's writers did by hand; the passage is unchanged and no longer answers
    the new question. Query id ``<question id>#perturbed``; label 0 with the origin pair's label
    source (the record schema has no source for a rule-made question).

Every generated record is checked: a removed or swapped passage (title and text) never contains a
gold answer; a swapped one contains its replacement; a replacement never is or contains a gold
answer (nor is part of one) and never occurs in the original passage; a perturbed question
differs from the original and its new entity occurs neither in the passage nor in the original
question. What cannot be made is skipped and counted, per kind, with one reason a question:

==========================  ===============================================================
``no-answers``              the question has no gold answer (MS MARCO's ``No Answer Present.``)
``no-positive``             the question has no positive passage
``answer-span-mismatch``    ``answer_spans`` offsets whose text is not one of the answers
``answer-not-found``        no gold answer string in the positive's text (e.g. MS MARCO's free
                            text answers; an annotated span inside a word, for swapped)
``answer-in-title``         the title holds the answer (removed, swapped: it would remain)
``too-little-left``         removed: under one sentence or :data:`MIN_REMOVED_CHARS` left
``answer-remains``          the answer is still there after the edit (e.g. across a join)
``untyped-answer``          swapped: the answer is no date, number or name
``no-replacement``          no usable same-type span in the pool
``no-entity``               perturbed: no date, number or capitalised span past the first word
                            (one word seen in lower case elsewhere, "Church", is no name)
``entity-not-in-passage``   perturbed: none of the question's entities occurs in the passage
==========================  ===============================================================

Replacements come from a :class:`SpanPool` of the train split's typed answers and question
entities (dev's are kept out of it), gathered in a first pass over the input, kept as sorted lists
(at most :data:`POOL_CAP` a type: the smallest sha1 hashes, so the pool depends on which spans the
input holds but not on their order); each question draws from it with a generator seeded from the
build's seed and its id.
"""

from __future__ import annotations

import hashlib
import heapq
import re
import string
import unicodedata
from collections import defaultdict
from dataclasses import dataclass
from random import Random
from typing import Callable, Iterable, Sequence

from ..records import LabelledPair, Passage, QueryExample
from ..text import contains_answer, normalize_answer, sentence_spans
from . import real_answers, seeded_rng
from .extractor import answer_spans as checked_answer_spans

#: command-line name -> ``metadata["negative_kind"]``
KINDS = {"removed": "answer-removed", "swapped": "answer-swapped", "perturbed": "question-perturbed"}
#: a removed passage keeps at least this many characters (and one sentence)
MIN_REMOVED_CHARS = 100
#: at most this many spans of one type in the pool
POOL_CAP = 20_000
#: replacement candidates tried per question and kind before giving up (``no-replacement``)
MAX_TRIES = 64


def parse_kinds(value: str | Iterable[str]) -> tuple[str, ...]:
    """``"removed,swapped"`` (or a list, or ``"all"``) as kinds in :data:`KINDS` order."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = {str(v).strip() for v in items if str(v).strip()}
    if "all" in names:
        names = (names - {"all"}) | set(KINDS)
    unknown = sorted(names - set(KINDS))
    if unknown:
        raise ValueError(f"unknown hard-negative kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)} (or all)")
    return tuple(k for k in KINDS if k in names)


# --------------------------------------------------------------------------------------------
# Rule-based span types

_MONTHS = "January February March April May June July August September October November December".split()
_M = "(?:" + "|".join(_MONTHS) + ")"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_NUM = r"[$£€]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_SCALE = r"(?:hundred|thousand|million|billion|trillion)"
_NUM_WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
              "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety").split()
_NUMW = "(?:" + "|".join(_NUM_WORDS) + r")(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?"
_ORD_WORDS = "(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)"

#: (type, full-match pattern), tried in order
_TYPES: list[tuple[str, re.Pattern]] = [
    ("date", re.compile(rf"{_M}\s+{_DAY},?\s+\d{{3,4}}|{_DAY}\s+(?:of\s+)?{_M},?\s+\d{{3,4}}")),
    ("month-year", re.compile(rf"{_M},?\s+\d{{3,4}}")),
    ("month-day", re.compile(rf"{_M}\s+{_DAY}|{_DAY}\s+(?:of\s+)?{_M}")),
    ("month", re.compile(_M)),
    ("year", re.compile(r"1\d{3}|20\d{2}")),
    ("decade", re.compile(r"(?:1\d|20)\d0s")),
    ("century", re.compile(r"\d{1,2}(?:st|nd|rd|th)\s+century", re.I)),
    ("ordinal", re.compile(rf"\d+(?:st|nd|rd|th)|{_ORD_WORDS}", re.I)),
    ("percent", re.compile(rf"(?:{_NUM}|{_NUMW})(?:\s+{_SCALE})?(?:\s?%|\s+per\s?cent)", re.I)),
    ("money", re.compile(rf"[$£€](?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?:\s+{_SCALE})?")),
    ("number", re.compile(rf"{_NUM}")),
    ("number-scaled", re.compile(rf"{_NUM}\s+{_SCALE}|{_NUMW}\s+{_SCALE}", re.I)),
    ("number-word", re.compile(_NUMW, re.I)),
]
_PLAIN_NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_QUANTITY = re.compile(rf"(?:{_NUM}|{_NUMW})(?:\s+{_SCALE})?\s+([a-z]+)")  # a lower-case unit: "19 Management" is a name
_CONNECTORS = frozenset("of the de du da del della der di von van la le and y bin al & upon on".split())
_LEADING_ARTICLE = re.compile(r"(?:the|a|an)\s+", re.I)
_EDGE_PUNCT = "\"'“”‘’()[]{},.;:!?«»"


def _capitalised(word: str) -> bool:
    for ch in word:
        if ch.isalpha():
            return ch.isupper()
    return False


def clean_span(s: str) -> str:
    """``s`` without surrounding whitespace and punctuation and without a leading article (the
    normalised answer has no article either, so the replaced text never holds one)."""
    s = " ".join(s.split()).strip(_EDGE_PUNCT + " ")
    m = _LEADING_ARTICLE.match(s)
    return s[m.end():] if m and m.end() < len(s) else s


def span_type(s: str) -> str | None:
    """A rule-based type of an answer or entity span, or ``None``.

    Dates (``date``, ``month-year``, ``month-day``, ``month``), ``year``, ``decade``, ``century``,
    ``ordinal``, ``percent``, ``money``, ``number:<k>`` (k digits before the decimal point: a
    number of the same magnitude), ``number-scaled`` (``2 million``), ``number-word`` (``six``),
    ``quantity:<unit>`` (a number and one word: ``quantity:miles``), and names: 1-6 words, the first and last
    capitalised, the ones between capitalised, numbers or connectors (``of``, ``de``, ``von``...):
    ``name:1`` (one word) or ``name:n``.
    """
    s = clean_span(s)
    if not s:
        return None
    for name, pattern in _TYPES:
        if pattern.fullmatch(s):
            if name == "number" and _PLAIN_NUMBER.fullmatch(s):  # digits: of the same magnitude
                return f"number:{sum(ch.isdigit() for ch in s.split('.')[0])}"
            return name
    m = _QUANTITY.fullmatch(s)
    if m:
        return f"quantity:{m.group(1).lower()}"
    words = s.split()
    if len(words) > 6 or not _capitalised(words[0]) or not _capitalised(words[-1]):
        return None
    for w in words[1:-1]:
        if not (_capitalised(w) or w.lower() in _CONNECTORS or w.isdigit()):
            return None
    if any((not any(ch.isalpha() for ch in w) and not w.isdigit() and w != "&") or "/" in w for w in words):
        return None
    if len(words) == 1 and sum(ch.isalpha() for ch in s) < 2:
        return None  # an initial
    return "name:1" if len(words) == 1 else "name:n"


# --------------------------------------------------------------------------------------------
# Answer occurrences in raw text (the tokens contains_answer compares, with their offsets)

_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def _is_separator(ch: str) -> bool:
    return ch.isspace() or all(c in _PUNCT or c.isspace() for c in unicodedata.normalize("NFKC", ch))


def normalized_tokens(text: str) -> list[tuple[str, int, int]]:
    """The tokens of ``normalize_answer(text)``, each with the character span of ``text`` it came
    from (a run between whitespace and punctuation; articles give no token)."""
    out: list[tuple[str, int, int]] = []
    start = None
    for i, ch in enumerate(text + " "):
        if i == len(text) or _is_separator(ch):
            if start is not None:
                out.extend((tok, start, i) for tok in normalize_answer(text[start:i]).split())
                start = None
        elif start is None:
            start = i
    return out


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def answer_occurrences(text: str, answers: Iterable[str]) -> list[tuple[int, int]]:
    """Character spans of ``text`` where a gold answer occurs as ``contains_answer`` sees it
    (whole normalised tokens), overlapping ones merged, in order."""
    toks = normalized_tokens(text)
    words = [t[0] for t in toks]
    spans = set()
    for a in answers:
        na = normalize_answer(a).split()
        k = len(na)
        if not k:
            continue
        for i in range(len(words) - k + 1):
            if words[i] == na[0] and words[i:i + k] == na:
                spans.add((toks[i][1], toks[i + k - 1][2]))
    return _merge(spans)


def _replace(text: str, spans: Sequence[tuple[int, int]], by: str) -> str:
    for a, b in sorted(spans, reverse=True):
        text = text[:a] + by + text[b:]
    return text


# --------------------------------------------------------------------------------------------
# Question entities and the pool of typed spans


@dataclass(frozen=True)
class Entity:
    start: int
    end: int
    text: str
    type: str


_QDATE = re.compile(rf"\b(?:{_M}\s+{_DAY},?\s+\d{{3,4}}|{_DAY}\s+(?:of\s+)?{_M},?\s+\d{{3,4}}|{_M},?\s+\d{{3,4}}|{_M}\s+\d{{1,2}}\b)")
_QNUM = re.compile(rf"(?<![\w.,$£€/\-\u2013]){_NUM}(?:\s+{_SCALE})?(?![\w/\-\u2013]|[.,]\d)")
_POSSESSIVE = re.compile(r"['’]s?\Z")
_WORD = re.compile(r"[^\W\d_]+")


def question_entities(question: str) -> list[Entity]:
    """Typed entities of a question, in order: dates, numbers and runs of capitalised words
    (connectors allowed inside), none starting at the question's first word (capitalised anyway)."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", question)]
    if not words:
        return []
    first_end = words[0][1]
    found: list[tuple[int, int]] = []
    for pattern in (_QDATE, _QNUM):
        for m in pattern.finditer(question):
            if m.start() >= first_end and not any(m.start() < b and a < m.end() for a, b in found):
                found.append((m.start(), m.end()))
    # runs of capitalised words: (start, end, ends_run) of each word without edge punctuation
    cores = []
    for a, b in words:
        raw = question[a:b]
        s = a + len(raw) - len(raw.lstrip(_EDGE_PUNCT))
        e = a + len(raw.rstrip(_EDGE_PUNCT))
        bare = _POSSESSIVE.sub("", question[s:e]) if e - s > 2 else question[s:e]
        cores.append((s, max(s, e), s + len(bare), s > a, e < b))
    run: list[tuple[int, int]] = []
    pending: list[tuple[int, int]] = []  # connectors waiting for a capitalised word

    def close() -> None:
        if run:
            found.append((run[0][0], run[-1][1]))
        run.clear()
        pending.clear()

    for k, (s, e, bare_end, opens, punct_after) in enumerate(cores):
        core = question[s:bare_end]
        if k == 0 or not core or any(s < fb and fa < e for fa, fb in found):
            close()
            continue
        if opens:  # an opening quote or bracket starts a new run
            close()
        if _capitalised(core) and core != "I":
            run.extend(pending)
            pending.clear()
            run.append((s, bare_end))
        elif run and core.lower() in _CONNECTORS:
            pending.append((s, e))
            continue
        else:
            close()
            continue
        if bare_end < e:  # a possessive: "Destiny's Child" goes on, "Apple's code name" ends
            following = cores[k + 1] if k + 1 < len(cores) else None
            if not punct_after and following and _capitalised(question[following[0]:following[2]]):
                run[-1] = (s, e)
            else:
                close()
        elif punct_after:
            close()
    close()
    out = []
    for a, b in sorted(set(found)):
        text = question[a:b]
        cleaned = clean_span(text)
        if cleaned != text:
            off = text.find(cleaned)
            a, b, text = a + off, a + off + len(cleaned), cleaned
        t = span_type(text)
        if t is not None and text:
            out.append(Entity(a, b, text, t))
    return out


_PLACES = r"(?:country|countries|city|cities|state|nation|continent|region|town|island|river|province|county|place)"
_WH = (("who", re.compile(r"\b(?:who|whom|whose)\b|\b(?:which|what)\s+(?:person|man|woman|king|queen|president|artist|singer|writer|author|composer|player|company|organi[sz]ation|team|band)\b", re.I)),
       ("where", re.compile(rf"\bwhere\b|\b(?:which|what)\s+(?:\w+\s+)?{_PLACES}\b|\bin\s+what\s+{_PLACES}\b", re.I)))


def answer_role(question: str, type_: str) -> str | None:
    """``who`` or ``where`` for a name answering a who/where question ("who", "which company";
    "where", "which country"): the pool keeps those apart, so that a person is swapped for a
    person, a place for a place. Else ``None``."""
    if not type_.startswith("name:"):
        return None
    for role, pattern in _WH:
        if pattern.search(question):
            return role
    return None


class SpanPool:
    """Typed spans (answers and question entities) that replacements are drawn from.

    :meth:`add_example` the (train) examples, then :meth:`candidates` gives a sorted list per type.
    Per type at most ``cap`` spans are kept, those with the smallest sha1: which ones does not
    depend on the order they were added in.
    """

    def __init__(self, cap: int = POOL_CAP):
        self.cap = cap
        #: words seen in lower case (questions, positives): a one-word "name" among them is a
        #: capitalised common word ("Governor", "Church"), not a name
        self.common: set[str] = set()
        self._heaps: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self._seen: dict[str, set[str]] = defaultdict(set)
        self._frozen: dict[str, list[str]] | None = None

    def add(self, span: str, question: str | None = None) -> None:
        """Add ``span`` under its type, and, as a name answering a who/where ``question``, also under
        ``<type>@who`` / ``<type>@where``."""
        s = clean_span(span)
        t = span_type(s)
        if t is None or not normalize_answer(s):
            return
        role = answer_role(question, t) if question else None
        for key in (t, f"{t}@{role}") if role else (t,):
            self._add(key, s)

    def _add(self, t: str, s: str) -> None:
        if s in self._seen[t]:
            return
        h = int.from_bytes(hashlib.sha1(s.encode("utf-8")).digest()[:8], "big")
        heap = self._heaps[t]
        if len(heap) < self.cap:
            heapq.heappush(heap, (-h, s))
            self._seen[t].add(s)
        elif -heap[0][0] > h:
            _, dropped = heapq.heapreplace(heap, (-h, s))
            self._seen[t].discard(dropped)
            self._seen[t].add(s)
        self._frozen = None

    def add_example(self, example: QueryExample) -> None:
        for text in (example.query, *(p.text for p in example.positives)):
            self.common.update(w for w in _WORD.findall(text) if w.islower())
        for a in real_answers(example.answers)[0]:
            self.add(a, example.query)
        for e in question_entities(example.query):
            self.add(e.text)

    def is_common(self, span: str) -> bool:
        """A one-word span that occurs in lower case in the pool's texts."""
        s = clean_span(span)
        return " " not in s and s.lower() in self.common

    def candidates(self, type_: str) -> list[str]:
        if self._frozen is None:
            self._frozen = {t: sorted(s for _, s in heap if not (t.startswith("name:1") and self.is_common(s)))
                            for t, heap in self._heaps.items()}
        return self._frozen.get(type_, [])

    def sizes(self) -> dict[str, int]:
        return {t: len(self.candidates(t)) for t in sorted(self._heaps)}

    def replacements(self, span: str, question: str) -> tuple[str, list[str]]:
        """The type of an answer ``span`` and the pool's candidates for it: names of the same
        who/where role when there are any, a quantity's own unit with the numbers of its
        magnitude (``12 miles``: every ``quantity:miles`` and ``<2-digit number> miles``)."""
        s = clean_span(span)
        t = span_type(s)
        if t is None:
            return "", []
        if t == "name:1" and self.is_common(s):
            return "", []  # "Floodlights" opening a sentence
        role = answer_role(question, t)
        if role and self.candidates(f"{t}@{role}"):
            return t, self.candidates(f"{t}@{role}")
        if t.startswith("quantity:"):
            number, unit = s.rsplit(None, 1)
            extra = [f"{n} {unit}" for n in self.candidates(span_type(number) or "")]
            return t, sorted({*self.candidates(t), *extra})
        return t, self.candidates(t)


def _picks(rng: Random, candidates: list[str], ok: Callable[[str], bool], n: int) -> list[str]:
    """Up to ``n`` distinct candidates that pass ``ok``, in a seeded order, trying at most
    :data:`MAX_TRIES` of them."""
    if len(candidates) <= MAX_TRIES:
        order: Iterable[str] = rng.sample(candidates, len(candidates))
    else:
        order = (candidates[rng.randrange(len(candidates))] for _ in range(MAX_TRIES))
    out: list[str] = []
    tried: set[str] = set()
    for c in order:
        if c in tried:
            continue
        tried.add(c)
        if ok(c):
            out.append(c)
            if len(out) == n:
                break
    return out


def _shaped_picks(rng: Random, candidates: list[str], like: str, ok: Callable[[str], bool], n: int) -> list[str]:
    """:func:`_picks`, from the candidates with as many words as ``like`` first ("Adam Lambert"
    by a two-word name), then from the others."""
    k = len(like.split())
    same = [c for c in candidates if len(c.split()) == k]
    out = _picks(rng, same, ok, n)
    if len(out) < n and len(same) < len(candidates):
        out += _picks(rng, [c for c in candidates if len(c.split()) != k], ok, n - len(out))
    return out


def _overlaps(x: str, y: str) -> bool:
    """One of the two, normalised, holds the other as whole tokens."""
    return contains_answer(x, [y]) or contains_answer(y, [x])


# --------------------------------------------------------------------------------------------
# The three kinds


class Skip(Exception):
    """A generated record that cannot be made; ``str(e)`` is the reason counted."""


@dataclass
class _Origin:
    """An answer-bearing positive and where its answers are."""

    pair: LabelledPair
    found: list[tuple[int, int]]  # answers in the text as whole normalised tokens
    occurrences: list[tuple[int, int]]  # those and the annotated spans (which may cut a word: "Tibet|an")
    primary: str  # the annotated span's text, else the first occurrence's


def locate(pair: LabelledPair, answers: list[str]) -> _Origin:
    """The answers of a positive, checked: raises :class:`Skip` (``answer-span-mismatch``,
    ``answer-not-found``); malformed ``answer_spans`` raise the extractor's ``RationaleError``
    (a reject, ``invalid-for-build``)."""
    p = pair.passage
    spans = checked_answer_spans(p)
    gold = {normalize_answer(a) for a in answers}
    for a, b in spans or []:
        if normalize_answer(p.text[a:b]) not in gold:
            raise Skip("answer-span-mismatch")
    found = answer_occurrences(p.text, answers)
    if not found and not spans:
        raise Skip("answer-not-found")
    primary = p.text[spans[0][0]:spans[0][1]] if spans else p.text[found[0][0]:found[0][1]]
    return _Origin(pair, found, _merge([*found, *(spans or [])]), primary)


def _full(title: str, text: str) -> str:
    return f"{title} {text}" if title else text


def answer_removed(origin: _Origin, answers: list[str]) -> Passage:
    """The origin passage without the sentences that hold an answer."""
    p = origin.pair.passage
    if contains_answer(p.title, answers):
        raise Skip("answer-in-title")
    sentences = sentence_spans(p.text, None)
    dropped = [k for k, s in enumerate(sentences) if any(a < s.end and s.start < b for a, b in origin.occurrences)]
    kept = [s.text for k, s in enumerate(sentences) if k not in dropped]
    text = " ".join(kept)
    if not kept or len(text) < MIN_REMOVED_CHARS:
        raise Skip("too-little-left")
    if contains_answer(_full(p.title, text), answers):
        raise Skip("answer-remains")
    return Passage(f"{p.id}#removed", text, p.title,
                   {"negative_kind": KINDS["removed"], "origin_id": p.id, "removed_sentences": dropped})


def answer_swapped(origin: _Origin, answers: list[str], question: str, pool: SpanPool, rng: Random,
                   n: int) -> list[Passage]:
    """Up to ``n`` copies of the origin passage with every answer occurrence replaced by one
    same-type span of the pool."""
    p = origin.pair.passage
    if contains_answer(p.title, answers):
        raise Skip("answer-in-title")
    type_, candidates = pool.replacements(origin.primary, question)
    if not type_:
        raise Skip("untyped-answer")
    original = normalize_answer(_full(p.title, p.text))
    found = origin.found  # whole tokens only: an annotated "Tibet" inside "Tibetan" is no answer to swap
    if not found:
        raise Skip("answer-not-found")

    def ok(r: str) -> bool:
        if contains_answer(r, answers) or any(contains_answer(a, [r]) for a in answers):
            return False  # is, contains or is part of a gold answer
        if contains_answer("", [r], original):
            return False  # already in the passage: not a new, wrong answer
        new = _replace(p.text, found, r)
        return not contains_answer(_full(p.title, new), answers) and contains_answer(new, [r])

    picks = _shaped_picks(rng, candidates, clean_span(origin.primary), ok, n)
    if not picks:
        raise Skip("no-replacement")
    replaced = [p.text[a:b] for a, b in found]
    return [Passage(f"{p.id}#swapped" + (f"-{k + 1}" if k else ""), _replace(p.text, found, r), p.title,
                    {"negative_kind": KINDS["swapped"], "origin_id": p.id, "answer_type": type_,
                     "replaced": replaced, "replacement": r})
            for k, r in enumerate(picks)]


def question_perturbed(example: QueryExample, origin: _Origin, answers: list[str], pool: SpanPool,
                       rng: Random, n: int) -> list[tuple[str, Entity, str]]:
    """Up to ``n`` ``(new question, entity, replacement)``: an entity of the question that occurs in
    the passage, replaced by a same-type span that occurs neither in the passage nor in the question."""
    q = example.query
    entities = [e for e in question_entities(q) if not (e.type == "name:1" and pool.is_common(e.text))]
    if not entities:
        raise Skip("no-entity")
    p = origin.pair.passage
    passage = normalize_answer(_full(p.title, p.text))
    usable = [e for e in entities if contains_answer("", [e.text], passage) and not contains_answer(e.text, answers)]
    if not usable:
        raise Skip("entity-not-in-passage")
    out: list[tuple[str, Entity, str]] = []
    used: set[str] = set()
    for e in rng.sample(usable, len(usable)):
        same = [x for x in entities if x.text == e.text]

        def ok(r: str) -> bool:
            return (r not in used and not contains_answer("", [r], passage) and not contains_answer(q, [r])
                    and not _overlaps(r, e.text) and not contains_answer(r, answers))

        for r in _shaped_picks(rng, pool.candidates(e.type), e.text, ok, 1):
            new = _replace(q, [(x.start, x.end) for x in same], r)
            if new != q:
                out.append((new, e, r))
                used.add(r)
        if len(out) == n:
            break
    if not out:
        raise Skip("no-replacement")
    return out


# --------------------------------------------------------------------------------------------
# One question


def hard_negative_pairs(example: QueryExample, pairs: list[LabelledPair], kinds: Sequence[str], per_question: int,
                        pool: SpanPool, seed: int) -> tuple[list[LabelledPair], list[LabelledPair], dict[str, str]]:
    """The answerability negatives of one question from its answer pairs (:func:`answer_pairs`).

    Returns ``(same_question, perturbed, skipped)``: pairs of the question itself (removed,
    swapped), pairs of perturbed questions (their own query ids), and ``{negative_kind: reason}``
    for each kind that gave nothing. At most ``per_question`` of each kind, from the answer-bearing
    positives in order.
    """
    answers = real_answers(example.answers)[0]
    positives = [p for p in pairs if p.metadata.get("role") == "positive"]
    located: list[_Origin | str] = []
    for pair in positives if answers else []:
        try:
            if pair.label < 0.5:  # the positive does not hold a gold answer string
                raise Skip("answer-not-found")
            located.append(locate(pair, answers))
        except Skip as e:
            located.append(str(e))
    no_origin = "no-answers" if not answers else "no-positive"
    same: list[LabelledPair] = []
    perturbed: list[LabelledPair] = []
    skipped: dict[str, str] = {}
    for kind in kinds:
        name = KINDS[kind]
        rng = seeded_rng(seed, example.id, f"hard-negatives:{kind}")
        made: list[LabelledPair] = []
        reason = None
        for origin in located:
            if len(made) >= per_question:
                break
            if isinstance(origin, str):
                reason = reason or origin
                continue
            left = per_question - len(made)
            meta = {"role": "generated", "source": example.source, "negative_kind": name, "origin_id": origin.pair.passage.id}
            try:
                if kind == "removed":
                    made.append(LabelledPair(example.id, example.query, answer_removed(origin, answers), 0.0,
                                             "answer-match", meta))
                elif kind == "swapped":
                    made += [LabelledPair(example.id, example.query, p, 0.0, "answer-match", meta)
                             for p in answer_swapped(origin, answers, example.query, pool, rng, left)]
                else:
                    for new_q, ent, r in question_perturbed(example, origin, answers, pool, rng, left):
                        k = len(made)
                        src = origin.pair.passage
                        passage = Passage(src.id, src.text, src.title,
                                          {"negative_kind": name, "origin_id": src.id, "entity": ent.text,
                                           "entity_type": ent.type, "replacement": r})
                        made.append(LabelledPair(
                            f"{example.id}#perturbed" + (f"-{k + 1}" if k else ""), new_q, passage, 0.0,
                            origin.pair.label_source,
                            {**meta, "origin_query_id": example.id, "original_query": example.query}))
            except Skip as e:
                reason = reason or str(e)
        if not made:
            skipped[name] = reason or no_origin
        (perturbed if kind == "perturbed" else same).extend(made)
    return same, perturbed, skipped

