"""Conflict detection: evidence items that state different values for the same thing.

:func:`detect_conflicts` turns disagreements between evidence sentences into
:class:`~pipeline.types.Conflict` notes for the generator (``Sources disagree on weight: 5 kg
(manual-v1.pdf) vs 7 kg (forum.example.com)``). Quantities are spotted and converted by
:mod:`pipeline.quantities`; this module reads what each one is about and compares them.

The evidence texts are split into sentences and two kinds of *mentions* are read from them:

1. **Quantities** - what :func:`pipeline.quantities.find_quantities` reads: a number with a unit
   (``5 kg``, ``12 V``, ``45 %``, ``-5 °C``), a currency (``$300``, ``€1.2 million``) or a scale
   word (``8.7 million``), in one base unit per dimension (converted with pint), so ``1 km``
   equals ``1000 m`` and ``5 kg`` equals ``11 lb``; data sizes are equal under either the decimal
   or the binary reading (``1 GB`` = ``1000 MB`` = ``1024 MB``).
   Currencies are never converted into each other. Its *attribute words* are the content words of
   its clause near the number (up to 6 before it, 3 after it; a clause ends at ``,`` ``;`` a dash,
   another quantity, or ``and``/``but``/``which``/``while``/...), mapped to a canonical word
   (``weighs``/``weighed``/``mass``/``heavy`` -> ``weight``, ``tall``/``high`` -> ``height``,
   ``costs``/``priced`` -> ``price``, ``lasts``/``life`` -> ``duration``, ``inhabitants`` ->
   ``population``, ...). Its *subjects* are the clause's (else the sentence's) code-like tokens and
   capitalised names (``E-204``, ``Switzerland``); *qualifiers* (``maximum``, ``minimum``,
   ``typical``, ``net``, ``gross``, ``input``, ``output``, ``idle``, ...) are kept apart.
2. **Named values** - ``<attribute> is/was/are/were <Value>`` and ``<attribute>: <Value>``
   (``The capital of Switzerland is Bern``, ``Default password: admin``). The attribute is the
   phrase before the verb or colon within its clause, at most 6 words (subjects set apart as above:
   ``capital`` about ``Switzerland``); a colon counts only as a label at the start of a sentence or
   after ``;``/a bullet (``Weight: 7 kg``), not mid-sentence (``singular: meninx``). Skipped: a
   pronoun right before the verb (``she was happy``), conditional clauses (``if``, ``when``), and
   generic or ordinal attributes (``Note:``, ``The first was ...``). The value must look like one:
   a quoted string, a run of capitalised words not followed by more words (``Bern``,
   ``Tim Cook``), a code-like token, a number, one to four words after a label colon, or one plain
   word when the attribute is a secret or identifier (password, username, login, PIN, code, key,
   port, id). Lists (``are Iraq, Syria and Jordan``) and possessives (``is Instagram's own
   account``) are skipped. Values are compared case- and accent-insensitively, numbers
   numerically - except for identifier-like attributes (password, code, version, model, ...),
   where ``1234`` must match exactly. A value that is itself a quantity (``Weight: 7 kg``) is left
   to the quantity rules.

Two mentions from different evidence items are *about the same thing* when they are of the same
kind and dimension, have the same qualifiers, do not name disjoint subjects (``E-204`` vs
``X-300``), are not dated by disjoint years (``in 2019`` vs ``in 2023``: a change over time), and
share an attribute word while not both having attribute words the other lacks (``battery weight``
vs ``device weight`` are different things; ``weight`` vs ``E-204 weight`` are not). A quantity with
no attribute word at all matches one about the same subject. They *disagree* when their values
differ by more than the relative tolerance (1%; 10% when either says ``about``/``approximately``;
temperatures: 0.5 degrees, 2 when approximate). Mentions about the same thing are grouped (each
joins the first group whose first mention it matches); a group whose members come from at least
two evidence items and hold at least two different values is one :class:`~pipeline.types.Conflict`
with a note such as ``Sources disagree on weight: 5 kg (manual-v1.pdf) vs 7 kg (forum.example.com)``.

Precision over recall, so these are skipped: ranges (``5-7 kg``, ``between 5 and 7 kg``), bounds
(``up to``, ``more than``, ``under``, ``5+``), lists of the same kind of quantity (``$1, $2 and
$5``), negated clauses (``not``, ``never``, ``no``, ``n't``),
rates (``$5 per kg`` is compared only with other per-kg prices), plain numbers without unit or scale
word outside the named-value patterns, and values that are long phrases. Known limits: no
coreference (``it`` is not resolved, it just names no subject), no paraphrase beyond the synonym
table (``measures 30 cm`` has no attribute word), a sentence-initial capitalised word counts as a
name only when the evidence never uses it in lower case, dates and years are not compared as
values, plain numbers read by the named-value rules are compared only with each other (not with
``8.7 million`` quantities), a 1% tolerance cannot tell rounding from disagreement for coarse figures, and conditions the
rules do not read (``with`` / ``without the battery``) can make two true statements look
contradictory. Compound quantities are joined first (``6 ft 1 in``, ``2 h 30 min``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from data_prep.text import split_sentences
from pipeline.quantities import find_quantities, is_unit_word
from pipeline.types import Conflict, Evidence
from pipeline.web import STOPWORDS, is_code_like, norm_term

_NEGATION = re.compile(r"\b(?:not|never|no|neither|nor|cannot|none)\b|n['\u2019]t\b", re.IGNORECASE)
_YEAR_RE = re.compile(r"(?<![\w.,\-/])(1[5-9]\d\d|20\d\d)(?![\w\-/]|[.,]\d)")
_WORD_RE = re.compile(r"[^\W_]+(?:[-_./'\u2019][^\W_]+)*|[^\w\s]")

#: words mapped to the attribute they name
ATTRIBUTE_SYNONYMS: dict[str, str] = {}
for _canon, _words in {
    "weight": "weight weights weigh weighs weighed weighing mass heavy heft",
    "height": "height heights tall high",
    "length": "length lengths long",
    "width": "width widths wide",
    "depth": "depth deep",
    "thickness": "thickness thick",
    "diameter": "diameter diameters",
    "distance": "distance distances away far",
    "price": "price prices priced cost costs costing retails retail sells msrp",
    "capacity": "capacity capacities holds",
    "voltage": "voltage voltages",
    "current": "current amperage",
    "power": "power wattage",
    "speed": "speed speeds fast velocity",
    "temperature": "temperature temperatures temp",
    "duration": "duration lasts last life runtime lifetime",
    "population": "population inhabitants residents people citizens populace",
    "age": "age aged old",
    "area": "area surface",
    "volume": "volume",
    "frequency": "frequency clock clocked",
    "resolution": "resolution",
    "storage": "storage",
    "memory": "memory ram",
}.items():
    for _w in _words.split():
        ATTRIBUTE_SYNONYMS[_w] = _canon

#: qualifiers: the same attribute under different qualifiers is a different quantity
QUALIFIERS: dict[str, str] = {}
for _canon, _words in {
    "max": "max maximum maximal peak highest top",
    "min": "min minimum minimal lowest",
    "typical": "average avg mean typical nominal median",
    "net": "net", "gross": "gross", "input": "input", "output": "output", "idle": "idle standby",
    "empty": "empty dry unloaded", "full": "full loaded laden",
}.items():
    for _w in _words.split():
        QUALIFIERS[_w] = _canon

#: words that say who said it or how, not what was measured
NOISE_WORDS = frozenset(
    "says said say states stated state report reports reported according claims claim claimed lists listed list "
    "shows show shown mentions mentioned notes noted note manual documentation doc docs spec specs specification "
    "specifications datasheet website site page source sources user users forum review reviews article officially "
    "official approximately approx about around roughly nearly almost exactly precisely just only total overall "
    "stands measures measure measured measuring rated comes come reaches reach reached amounts amount equals equal "
    "value figure number new current currently now today actual real true advertised quoted also still even "
    "roughly estimated estimate per each unit units around some".split()
)
_CLAUSE_WORDS = frozenset("and but while whereas although though however which who that because since so yet "
                          "whereas unlike compared".split())
_BOUNDARY_PUNCT = frozenset(",;\u2013\u2014")
IDENTIFIER_ATTRS = frozenset(
    "password passwords passcode username user login pin code codes name key port id identifier version firmware "
    "mode setting default value color colour language currency model type format protocol channel status address "
    "ssid sku".split()
)
_GENERIC_ATTRS = frozenset(
    "note warning caution tip example update edit summary source answer question reply re q a step result thing one "
    "reason problem issue fact truth point goal aim idea difference plan solution rule important info information "
    "details detail tl dr ps nb see also disclaimer first second third fourth fifth last next latter former other "
    "both another rest".split()
)
_DETERMINERS = frozenset("the a an its their his her our your this that these those".split())
_NAME_CONNECTORS = frozenset("of de da del della von van der du la le y".split())
_SECRET_ATTRS = frozenset("password passwords passcode username login pin code key ssid sku id port".split())
_PRONOUNS = frozenset("i you he she it we they this that these those there here who which what one".split())
_CONDITIONAL = frozenset("if when unless whether once until whenever".split())
_LINE_STARTS = frozenset(";|\u2022*-")
_PLAIN_NUMBER = re.compile(r"[-\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w,.]\w|[-/_]\w)")
_LIST_AFTER = re.compile(r"\s*(?:,|and\b|or\b|&)\s*(?:and\s+|or\s+)?(?:[A-Z]|\d)")
_QUOTES = {'"': '"', "\u201c": "\u201d", "'": "'", "\u2018": "\u2019"}


def _fold(s: str) -> str:
    s = unicodedata.normalize("NFKD", s)
    s = "".join(c for c in s if not unicodedata.combining(c))
    return " ".join(s.casefold().split())


def _canon_attr(tok: str) -> str:
    low = tok.lower()
    if low in ATTRIBUTE_SYNONYMS:
        return ATTRIBUTE_SYNONYMS[low]
    return norm_term(low)



# ---------------------------------------------------------------------------------------------
# Mentions
# ---------------------------------------------------------------------------------------------


@dataclass
class _Tok:
    text: str
    start: int
    end: int
    word: bool


@dataclass
class Mention:
    """One value read from an evidence sentence (exposed for debugging and tests)."""

    evidence: int
    kind: str  # "quantity" or "value"
    dim: str
    value: float | str
    display: str
    attrs: tuple[str, ...]
    label: str
    subjects: frozenset[str] = frozenset()
    qualifiers: frozenset[str] = frozenset()
    years: frozenset[str] = frozenset()
    approx: bool = False
    alts: tuple[float, ...] = ()
    exact: bool = False
    sentence: str = ""
    numeric: bool = False


def _tokens(sentence: str) -> list[_Tok]:
    out = []
    for m in _WORD_RE.finditer(sentence):
        t = m.group(0)
        if t.endswith(("'s", "\u2019s")) and len(t) > 2:
            t = t[:-2]
        out.append(_Tok(t, m.start(), m.start() + len(t), t[0].isalnum()))
    return out


def _clause_bounds(toks: list[_Tok], i: int, j: int, blockers: list[tuple[int, int]]) -> tuple[int, int]:
    """Token index range [a, b) of the clause around tokens i..j-1."""
    def blocked(t: _Tok) -> bool:
        return any(bs <= t.start < be for bs, be in blockers)

    a = i
    while a > 0:
        t = toks[a - 1]
        if (not t.word and t.text in _BOUNDARY_PUNCT) or (t.word and t.text.lower() in _CLAUSE_WORDS) or blocked(t):
            break
        a -= 1
    b = j
    while b < len(toks):
        t = toks[b]
        if (not t.word and (t.text in _BOUNDARY_PUNCT or t.text in ".!?")) or (t.word and t.text.lower() in _CLAUSE_WORDS) \
                or blocked(t):
            break
        b += 1
    return a, b


class _SentenceInfo:
    """Tokens, names and years of one sentence."""

    def __init__(self, sentence: str, known_lower: set[str]):
        self.text = sentence
        self.toks = _tokens(sentence)
        self.first_word = next((k for k, t in enumerate(self.toks) if t.word), None)
        self.known_lower = known_lower
        self.quantities = find_quantities(sentence)

    def is_name(self, k: int) -> bool:
        t = self.toks[k]
        if not t.word:
            return False
        if any(q.start <= t.start < q.end for q in self.quantities):
            return False  # "25-kilogram" is a quantity, not a code
        if is_code_like(t.text):
            return True
        low = t.text.lower()
        if not t.text[0].isupper() or low in STOPWORDS or low in NOISE_WORDS or low in QUALIFIERS or low in ATTRIBUTE_SYNONYMS:
            return False
        if is_unit_word(t.text) or low in _CLAUSE_WORDS:
            return False
        if k == self.first_word:
            if t.text.isupper() and len(t.text) > 1:
                return True
            return low not in self.known_lower and not low.endswith("ing")
        return True

    def names(self, a: int, b: int, exclude: tuple[int, int] | None = None) -> frozenset[str]:
        """Names (runs of capitalised words, codes) among tokens a..b-1, folded."""
        out, run = set(), []
        for k in range(a, b):
            inside = exclude is not None and exclude[0] <= self.toks[k].start < exclude[1]
            if not inside and self.is_name(k) and not is_code_like(self.toks[k].text):
                run.append(self.toks[k].text)
                continue
            if run:
                out.add(_fold(" ".join(run)))
                run = []
            if not inside and self.toks[k].word and is_code_like(self.toks[k].text):
                out.add(_fold(self.toks[k].text))
        if run:
            out.add(_fold(" ".join(run)))
        return frozenset(out)

    def years(self, exclude: tuple[int, int]) -> frozenset[str]:
        ys = set()
        for m in _YEAR_RE.finditer(self.text):
            if exclude[0] <= m.start() < exclude[1]:
                continue
            if any(q.start <= m.start() < q.end for q in self.quantities):
                continue
            ys.add(m.group(1))
        return frozenset(ys)


def _attr_words(info: _SentenceInfo, idx: list[int]) -> tuple[list[str], set[str]]:
    """Canonical attribute words and qualifier groups among the given token indices."""
    attrs: list[str] = []
    quals: set[str] = set()
    for k in idx:
        t = info.toks[k]
        if not t.word:
            continue
        low = t.text.lower()
        if low in QUALIFIERS:
            quals.add(QUALIFIERS[low])
            continue
        if info.is_name(k) or low in STOPWORDS or low in NOISE_WORDS or low in _DETERMINERS:
            continue
        if any(c.isdigit() for c in low) or len(low) < 2:
            continue
        if is_unit_word(t.text):
            continue
        a = _canon_attr(low)
        if a not in attrs:
            attrs.append(a)
    return attrs, quals


def _quantity_mentions(ev_i: int, info: _SentenceInfo) -> list[Mention]:
    out = []
    qspans = [(q.start, q.end) for q in info.quantities]
    for q in info.quantities:
        inside = [k for k, t in enumerate(info.toks) if q.start <= t.start < q.end]
        if not inside:
            continue
        i, j = inside[0], inside[-1] + 1
        others = [sp for sp in qspans if sp != (q.start, q.end)]
        a, b = _clause_bounds(info.toks, i, j, others)
        clause = info.text[info.toks[a].start: info.toks[b - 1].end] if b > a else ""
        if _NEGATION.search(clause):
            continue
        before = [k for k in range(a, i) if info.toks[k].word][-6:]
        after = [k for k in range(j, b) if info.toks[k].word][:3]
        attrs, quals = _attr_words(info, before + after)
        subjects = info.names(a, b, (q.start, q.end)) or info.names(0, len(info.toks), (q.start, q.end))
        out.append(Mention(
            evidence=ev_i, kind="quantity", dim=q.dim, value=q.value, display=q.display, attrs=tuple(attrs),
            label=" ".join(attrs) if attrs else q.dim.split(":")[0], subjects=subjects, qualifiers=frozenset(quals),
            years=info.years((q.start, q.end)), approx=q.approx, alts=q.alts, sentence=info.text, numeric=True,
        ))
    return out


def _value_mentions(ev_i: int, info: _SentenceInfo) -> list[Mention]:
    out = []
    toks = info.toks
    text = info.text
    for c, t in enumerate(toks):
        colon = not t.word and t.text == ":"
        copula = t.word and t.text.lower() in ("is", "was", "are", "were")
        if not (colon or copula) or c == 0 or c + 1 >= len(toks):
            continue
        if colon and toks[c - 1].text.isdigit() and toks[c + 1].text.isdigit():
            continue  # 10:30
        # -- the attribute phrase: back to the clause start, 6 tokens at most
        a = c
        while a > 0 and c - a < 6:
            p = toks[a - 1]
            if (not p.word and p.text not in "'\u2019-") or (p.word and p.text.lower() in _CLAUSE_WORDS):
                break
            a -= 1
        at_start = a == 0 or (not toks[a - 1].word and toks[a - 1].text in _LINE_STARTS)
        if colon and (not at_start or c - a > 4 or info.is_name(c - 1)):
            continue  # "Label: value" only as a spec line, not mid-sentence ("singular: meninx")
        if toks[c - 1].text.lower() in _PRONOUNS:
            continue  # "she was ...", "it is ..."
        if any(toks[k].text.lower() in _CONDITIONAL for k in range(a, c)):
            continue
        phrase_idx = list(range(a, c))
        while phrase_idx and (toks[phrase_idx[0]].text.lower() in _DETERMINERS or toks[phrase_idx[0]].text.lower()
                              in STOPWORDS or toks[phrase_idx[0]].text.lower() in NOISE_WORDS):
            phrase_idx.pop(0)
        if not phrase_idx:
            continue
        if any(q.start <= toks[k].start < q.end for k in phrase_idx for q in info.quantities):
            continue
        attrs, quals = _attr_words(info, phrase_idx)
        head = toks[phrase_idx[-1]]
        name_end = c
        if not attrs and head.word and head.text.isupper() and len(head.text) > 1 and not is_code_like(head.text):
            attrs = [head.text.lower()]  # "The CEO is ...": an acronym naming a role, not a subject
            name_end = phrase_idx[-1]
        if not attrs or set(attrs) & _GENERIC_ATTRS:
            continue
        phrase_words = {toks[k].text.lower() for k in phrase_idx}
        identifier = bool(phrase_words & IDENTIFIER_ATTRS)
        secret_like = bool(phrase_words & _SECRET_ATTRS)
        # -- the value
        v0 = c + 1
        vstart = toks[v0].start
        if any(q.start <= vstart < q.end or vstart <= q.start < vstart + 2 for q in info.quantities):
            continue  # a quantity: handled by _quantity_mentions
        first = toks[v0]
        value_disp: str | None = None
        vend = vstart
        numm = _PLAIN_NUMBER.match(text, vstart)
        if not first.word and first.text in _QUOTES:
            close = text.find(_QUOTES[first.text], first.end)
            if close > first.end and close - first.end <= 80:
                value_disp, vend = text[first.end: close].strip(), close + 1
        elif numm:
            value_disp, vend = numm.group(0), numm.end()
        else:
            e = v0
            while e < len(toks):
                tt = toks[e]
                if not tt.word and (tt.text in _BOUNDARY_PUNCT or tt.text in ".!?():;"):
                    break
                if tt.word and tt.text.lower() in _CLAUSE_WORDS | {"according", "as", "if", "when"}:
                    break
                e += 1
            words = [toks[k] for k in range(v0, e)]
            if not words or not all(w.word or w.text in "-/&" for w in words):
                continue
            ok = False
            if colon:
                ok = len(words) <= 4
            elif len(words) == 1 and is_code_like(words[0].text):
                ok = True
            else:
                run = 0  # a run of capitalised words (with connectors) from the start of the value
                while run < len(words) and run < 5 and (
                        (words[run].word and words[run].text[0].isupper()) or is_code_like(words[run].text)
                        or (run > 0 and words[run].text.lower() in _NAME_CONNECTORS)):
                    run += 1
                while run > 0 and words[run - 1].text.lower() in _NAME_CONNECTORS:
                    run -= 1
                if run >= 1 and words[0].text.lower() not in _DETERMINERS:
                    rest = words[run:]
                    if not rest or rest[0].text.lower() in STOPWORDS:
                        words, ok = words[:run], True
                if not ok and secret_like and len(words) == 1 and not words[0].text.lower().endswith(("ed", "ing", "ly")):
                    ok = True  # "The default password is admin."
            if not ok:
                continue
            value_disp, vend = text[words[0].start: words[-1].end], words[-1].end
        if value_disp is None:
            continue  # an unclosed quote
        value_disp = value_disp.strip(" .,;:'\"\u201c\u201d\u2018\u2019")
        if not value_disp:
            continue
        tail = text[vend: vend + 40]
        if re.match(r"['\u2019]s\b", tail):
            continue  # "is Instagram's own account": not the value itself
        if _LIST_AFTER.match(tail):
            continue  # "are Iraq, Syria, ..." / "were A and B": a list, not one value
        clause_a, _ = _clause_bounds(toks, a, c + 1, [])
        if _NEGATION.search(text[toks[clause_a].start: vend]):
            continue
        numeric = _PLAIN_NUMBER.fullmatch(value_disp) is not None and not identifier
        value: float | str = float(value_disp.replace(",", "").replace("\u2212", "-")) if numeric else _fold(value_disp)
        subjects = (info.names(phrase_idx[0], name_end) or info.names(0, name_end)
                    or info.names(c, len(toks), (vstart, vend)))
        label = text[toks[phrase_idx[0]].start: toks[c - 1].end]
        out.append(Mention(
            evidence=ev_i, kind="value", dim="value", value=value, display=value_disp, attrs=tuple(attrs), label=label,
            subjects=subjects, qualifiers=frozenset(quals), years=info.years((vstart, vend)), exact=identifier,
            sentence=text, numeric=numeric,
        ))
    return out


def extract_mentions(evidence: list[Evidence]) -> list[Mention]:
    """Every quantity and named value in the evidence texts, in order (see the module docstring)."""
    known_lower: set[str] = set()
    sentences: list[tuple[int, str]] = []
    for i, ev in enumerate(evidence):
        for s in split_sentences(ev.text or ""):
            sentences.append((i, s))
            for t in _tokens(s):
                if t.word and t.text.islower():
                    known_lower.add(t.text)
    out: list[Mention] = []
    for i, s in sentences:
        info = _SentenceInfo(s, known_lower)
        out.extend(_quantity_mentions(i, info))
        out.extend(_value_mentions(i, info))
    return out


def same_thing(a: Mention, b: Mention) -> bool:
    """Whether two mentions from different evidence items state the same attribute of the same thing."""
    if a.evidence == b.evidence or a.kind != b.kind or a.dim != b.dim or a.qualifiers != b.qualifiers:
        return False
    if a.subjects and b.subjects and not (a.subjects & b.subjects):
        return False
    if a.years and b.years and not (a.years & b.years):
        return False
    sa, sb = set(a.attrs), set(b.attrs)
    shared = sa & sb
    if shared:
        return not (sa - shared and sb - shared)
    if a.kind == "quantity" and (not sa or not sb):
        return bool(a.subjects & b.subjects)
    return False


def same_value(a: Mention, b: Mention, rel_tol: float = 0.01) -> bool:
    """Whether two comparable mentions state the same value (see the module docstring)."""
    if not (a.numeric and b.numeric) or a.exact or b.exact:
        return a.value == b.value if not (a.numeric and b.numeric) else float(a.value) == float(b.value)
    approx = a.approx or b.approx
    if a.dim == "temperature":
        return abs(float(a.value) - float(b.value)) <= (2.0 if approx else 0.5)
    tol = max(rel_tol, 0.10) if approx else rel_tol
    for x in (float(a.value), *a.alts):
        for y in (float(b.value), *b.alts):
            if abs(x - y) <= tol * max(abs(x), abs(y)) + 1e-12:
                return True
    return False


def _source_name(ev: Evidence, i: int) -> str:
    return ev.source or ev.chunk_id or f"evidence {i}"


def detect_conflicts(evidence: list[Evidence], rel_tol: float = 0.01) -> list[Conflict]:
    """Conflicts between evidence items: the same quantity (``kind="number"``) or named attribute
    (``kind="value"``; ``"number"`` when every value is a number) stated with different values.
    ``Conflict.evidence`` holds indices into ``evidence`` and ``values`` the values as written, in
    the same order. The rules and their limits are in the module docstring."""
    mentions = extract_mentions(evidence)
    groups: list[list[Mention]] = []
    for m in mentions:
        for g in groups:
            if same_thing(g[0], m):
                if not any(x.evidence == m.evidence for x in g):
                    g.append(m)
                break
        else:
            groups.append([m])
    conflicts: list[Conflict] = []
    for g in groups:
        if len(g) < 2:
            continue
        # distinct values (a mention equal to an earlier one joins its class)
        classes: list[list[Mention]] = []
        for m in g:
            for cls_ in classes:
                if same_value(cls_[0], m, rel_tol):
                    cls_.append(m)
                    break
            else:
                classes.append([m])
        if len(classes) < 2:
            continue
        members = sorted(g, key=lambda x: x.evidence)
        first = g[0]
        if first.kind == "quantity":
            richest = max(g, key=lambda x: len(x.attrs))
            attribute = " ".join(richest.attrs) if richest.attrs else first.label
        else:
            attribute = first.label
        kind = "number" if all(x.numeric for x in g) else "value"
        parts = []
        for cls_ in sorted(classes, key=lambda c: min(x.evidence for x in c)):
            srcs = list(dict.fromkeys(_source_name(evidence[x.evidence], x.evidence) for x in sorted(cls_, key=lambda x: x.evidence)))
            parts.append(f"{cls_[0].display} ({', '.join(srcs)})")
        note = f"Sources disagree on {attribute}: " + " vs ".join(parts)
        conflicts.append(Conflict(kind=kind, attribute=attribute, values=[x.display for x in members],
                                  evidence=[x.evidence for x in members], note=note))
    return conflicts
