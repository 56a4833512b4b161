"""Evidence credibility and conflicts between evidence sentences.

Credibility (:class:`CredibilityTable`)
---------------------------------------
Each source has a static score in [0, 1]; a lookup tries the exact source name, then (for URLs and
host names) the domain without ``www.`` (``https://www.example.com/x`` -> ``example.com``) and its
parent domains (``forum.example.com`` -> ``example.com``), then ``default``. With a half-life set
and a ``published`` ISO date, the score *decays toward the floor*: the part above ``floor`` halves
every ``half_life_days``::

    credibility = floor + (score - floor) * 0.5 ** (age_days / half_life_days)

(a future date counts as age 0; an unparseable date means no decay). The result is always clipped
to [``floor``, ``ceiling``] - [0.1, 0.95] by default, the seed design's range, so no source is ever
fully trusted or fully ignored. :meth:`CredibilityTable.calibrate` fits the scores from labelled
validation records (per-source accuracy smoothed toward a prior).

Conflicts (:func:`detect_conflicts`)
------------------------------------
The evidence texts are split into sentences and two kinds of *mentions* are read from them:

1. **Quantities** - a number with a unit (``5 kg``, ``5,000 g``, ``12 V``, ``3.7 GHz``, ``45 %``,
   ``$300``, ``€1.2 million``, ``10 hours``, ``-5 °C``) or with a scale word (``8.7 million``).
   Units are normalised to one base per dimension (mass, length, area, volume, temperature, percent,
   voltage, current, power, energy, charge, frequency, data, data rate, time, speed, pressure, count,
   one currency each), so ``1 km`` equals ``1000 m`` and ``5 kg`` equals ``11 lb``; data sizes are
   equal under either the decimal or the binary reading (``1 GB`` = ``1000 MB`` = ``1024 MB``).
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

import json
import logging
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from data_prep.text import split_sentences
from pipeline.types import Conflict, Evidence
from pipeline.web import STOPWORDS, domain_of, is_code_like, norm_term

logger = logging.getLogger(__name__)

FLOOR = 0.1
CEILING = 0.95

# =============================================================================================
# Credibility
# =============================================================================================


def parse_date(value: Any) -> date | None:
    """An ISO date (``2024-03-05``, ``2024-03-05T10:00:00Z``, ``2024-03``, ``2024``) as a
    :class:`~datetime.date`; ``None`` when it is not one."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    s = str(value).strip()
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).date()
    except ValueError:
        pass
    m = re.fullmatch(r"(\d{4})(?:-(\d{1,2}))?(?:-(\d{1,2}))?", s)
    if not m:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
    except ValueError:
        return None


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


class CredibilityTable:
    """Per-source credibility in [``floor``, ``ceiling``] with optional time decay (see the module
    docstring for the lookup order and the decay formula).

    ``now`` fixes "today" for the decay (a date, datetime or ISO string; ``None``: the current UTC
    date at each lookup). ``calibration_report`` holds the per-source counts when the table came
    from :meth:`calibrate`.
    """

    def __init__(
        self,
        scores: Mapping[str, float] | None = None,
        default: float = 0.5,
        half_life_days: float | None = None,
        floor: float = FLOOR,
        ceiling: float = CEILING,
        now: date | datetime | str | None = None,
    ):
        self.floor = _number(floor, "floor")
        self.ceiling = _number(ceiling, "ceiling")
        if not 0.0 <= self.floor <= self.ceiling <= 1.0:
            raise ValueError(f"need 0 <= floor <= ceiling <= 1, got floor={floor}, ceiling={ceiling}")
        self.default = _number(default, "default")
        if half_life_days is not None and _number(half_life_days, "half_life_days") <= 0:
            raise ValueError(f"half_life_days must be > 0 or None, got {half_life_days}")
        self.half_life_days = None if half_life_days is None else float(half_life_days)
        self.scores: dict[str, float] = {}
        for k, v in (scores or {}).items():
            self.scores[str(k)] = _number(v, f"the score of source {k!r}")
        self._lower = {k.lower(): v for k, v in self.scores.items()}
        if now is not None and parse_date(now) is None:
            raise ValueError(f"now must be an ISO date, got {now!r}")
        self.now = now
        self.calibration_report: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return (f"CredibilityTable({len(self.scores)} sources, default={self.default}, "
                f"half_life_days={self.half_life_days}, range=[{self.floor}, {self.ceiling}])")

    # -- lookups ---------------------------------------------------------------------------------
    def clip(self, x: float) -> float:
        return min(self.ceiling, max(self.floor, x))

    def static_score(self, source: str) -> float:
        """The table's score for ``source`` before decay and clipping (exact name, then domain and
        parent domains, then ``default``)."""
        source = source or ""
        if source in self.scores:
            return self.scores[source]
        if source.lower() in self._lower:
            return self._lower[source.lower()]
        looks_like_host = "://" in source or re.fullmatch(r"[\w-]+(?:\.[\w-]+)+(?::\d+)?(?:/\S*)?", source) is not None
        if looks_like_host:
            host = domain_of(source)
            labels = host.split(".") if host else []
            for i in range(len(labels) - 1):  # example.co.uk: tries co.uk last, harmless
                cand = ".".join(labels[i:])
                if cand in self._lower:
                    return self._lower[cand]
        return self.default

    def credibility(self, source: str, published: str | date | None = None) -> float:
        """The source's credibility in [``floor``, ``ceiling``], decayed by the age of ``published``
        when the table has a half-life."""
        score = self.static_score(source)
        if self.half_life_days is not None and published is not None:
            pub = parse_date(published)
            if pub is not None:
                today = parse_date(self.now) if self.now is not None else datetime.now(timezone.utc).date()
                age = max(0, (today - pub).days)
                score = self.floor + (score - self.floor) * 0.5 ** (age / self.half_life_days)
            else:
                logger.debug("credibility: unparseable published date %r for %s; no decay", published, source)
        return self.clip(score)

    def annotate(self, evidence: list[Evidence]) -> list[Evidence]:
        """Set each evidence item's ``credibility`` from its source and published date (in place)."""
        for ev in evidence:
            ev.credibility = self.credibility(ev.source, ev.published)
        return evidence

    # -- persistence -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"sources": dict(self.scores), "default": self.default,
                             "half_life_days": self.half_life_days, "floor": self.floor, "ceiling": self.ceiling}
        if self.calibration_report is not None:
            d["calibration"] = self.calibration_report
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "<dict>", now=None) -> "CredibilityTable":
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping with 'sources', got {type(data).__name__}")
        known = {"sources", "default", "half_life_days", "floor", "ceiling", "calibration"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
        sources = data.get("sources") or {}
        if not isinstance(sources, Mapping):
            raise ValueError(f"{where}: 'sources' must map source names to scores")
        try:
            table = cls(sources, default=data.get("default", 0.5), half_life_days=data.get("half_life_days"),
                        floor=data.get("floor", FLOOR), ceiling=data.get("ceiling", CEILING), now=now)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        table.calibration_report = data.get("calibration")
        return table

    @classmethod
    def from_file(cls, path: str | Path, now=None) -> "CredibilityTable":
        """Read ``{sources: {name: score}, default, half_life_days[, floor, ceiling]}`` from JSON or
        YAML (``.yaml``/``.yml``; needs PyYAML)."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"credibility table not found: {p}")
        text = p.read_text(encoding="utf-8")
        if p.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:  # pragma: no cover - pyyaml is in every extra
                raise ValueError(f"{p}: reading YAML needs PyYAML (pip install pyyaml)") from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ValueError(f"{p}: not valid YAML ({e.__class__.__name__})") from None
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_dict(data, where=str(p), now=now)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    # -- calibration -----------------------------------------------------------------------------
    @classmethod
    def calibrate(
        cls,
        records: Iterable[Any],
        prior_strength: float = 5,
        prior: float | None = None,
        half_life_days: float | None = None,
        floor: float = FLOOR,
        ceiling: float = CEILING,
    ) -> "CredibilityTable":
        """Fit per-source scores from labelled validation records.

        ``records``: ``(source, correct)`` pairs or mappings with ``source`` and ``correct`` (or
        ``label``), e.g. "was this source's chunk relevant". Each source's score is its accuracy
        smoothed toward ``prior`` with the weight of ``prior_strength`` pseudo-records,
        ``(correct + prior * m) / (n + m)``, clipped to [``floor``, ``ceiling``]. ``prior=None``
        uses the pooled accuracy of all records; the prior is also the table's ``default`` (what an
        unseen source gets). The per-source ``n``, ``correct``, raw ``accuracy`` and
        ``credibility`` are in :attr:`calibration_report`.
        """
        m = _number(prior_strength, "prior_strength")
        if m < 0:
            raise ValueError(f"prior_strength must be >= 0, got {prior_strength}")
        n_by: Counter = Counter()
        ok_by: Counter = Counter()
        for i, rec in enumerate(records):
            if isinstance(rec, Mapping):
                if "source" not in rec or ("correct" not in rec and "label" not in rec):
                    raise ValueError(f"record {i}: needs 'source' and 'correct' (or 'label'), got keys {sorted(rec)}")
                source, correct = rec["source"], rec.get("correct", rec.get("label"))
            elif isinstance(rec, (tuple, list)) and len(rec) == 2:
                source, correct = rec
            else:
                raise ValueError(f"record {i}: expected (source, correct) or a mapping, got {rec!r}")
            if isinstance(correct, bool) or correct in (0, 1):
                correct = bool(correct)
            else:
                raise ValueError(f"record {i}: 'correct' must be a bool or 0/1, got {correct!r}")
            n_by[str(source)] += 1
            ok_by[str(source)] += int(correct)
        total = sum(n_by.values())
        if prior is None:
            if total == 0:
                raise ValueError("calibrate() needs at least one record, or an explicit prior")
            prior = sum(ok_by.values()) / total
        prior = _number(prior, "prior")
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must be in [0, 1], got {prior}")
        scores: dict[str, float] = {}
        report: dict[str, Any] = {}
        for src in sorted(n_by):
            n, c = n_by[src], ok_by[src]
            s = min(ceiling, max(floor, (c + prior * m) / (n + m)))
            scores[src] = s
            report[src] = {"n": n, "correct": c, "accuracy": c / n, "credibility": s}
        table = cls(scores, default=min(ceiling, max(floor, prior)), half_life_days=half_life_days,
                    floor=floor, ceiling=ceiling)
        table.calibration_report = {"prior": prior, "prior_strength": m, "n": total, "sources": report}
        return table


# =============================================================================================
# Conflicts: units and vocabulary
# =============================================================================================

# (spellings, dimension, factor to the base unit, offset, case-sensitive)
_UNIT_SPECS: list[tuple[tuple[str, ...], str, float, float, bool]] = [
    # mass (g)
    (("mg",), "mass", 1e-3, 0, True),
    (("g",), "mass", 1.0, 0, True),
    (("gram", "grams", "gramme", "grammes"), "mass", 1.0, 0, False),
    (("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos"), "mass", 1e3, 0, False),
    (("tonne", "tonnes", "metric ton", "metric tons"), "mass", 1e6, 0, False),
    (("lb", "lbs", "pound", "pounds"), "mass", 453.59237, 0, False),
    (("oz", "ounce", "ounces"), "mass", 28.349523125, 0, False),
    # length (m)
    (("mm", "millimetre", "millimetres", "millimeter", "millimeters"), "length", 1e-3, 0, False),
    (("cm", "centimetre", "centimetres", "centimeter", "centimeters"), "length", 1e-2, 0, False),
    (("m",), "length", 1.0, 0, True),
    (("metre", "metres", "meter", "meters"), "length", 1.0, 0, False),
    (("km", "kilometre", "kilometres", "kilometer", "kilometers"), "length", 1e3, 0, False),
    (("in",), "length", 0.0254, 0, True),  # only when no word follows (see _unit_at)
    (("inch", "inches", "\u2033"), "length", 0.0254, 0, False),
    (("ft", "foot", "feet"), "length", 0.3048, 0, False),
    (("yd", "yard", "yards"), "length", 0.9144, 0, False),
    (("mi",), "length", 1609.344, 0, True),
    (("mile", "miles"), "length", 1609.344, 0, False),
    # area (m2)
    (("m\u00b2", "m2", "sq m", "square metre", "square metres", "square meter", "square meters"), "area", 1.0, 0, False),
    (("km\u00b2", "km2", "sq km", "square kilometre", "square kilometres", "square kilometer", "square kilometers"),
     "area", 1e6, 0, False),
    (("sq ft", "square foot", "square feet", "ft\u00b2"), "area", 0.09290304, 0, False),
    (("acre", "acres"), "area", 4046.8564224, 0, False),
    (("ha", "hectare", "hectares"), "area", 1e4, 0, False),
    # volume (L)
    (("ml", "mL", "millilitre", "millilitres", "milliliter", "milliliters"), "volume", 1e-3, 0, False),
    (("L", "l"), "volume", 1.0, 0, True),
    (("litre", "litres", "liter", "liters"), "volume", 1.0, 0, False),
    (("gal", "gallon", "gallons"), "volume", 3.785411784, 0, False),
    # temperature (degrees C; F converted)
    (("\u00b0C", "\u2103", "\u00b0 C", "degrees C", "degree C", "deg C", "degrees Celsius", "degree Celsius", "Celsius",
      "degrees centigrade"), "temperature", 1.0, 0, False),
    (("\u00b0F", "\u2109", "\u00b0 F", "degrees F", "degree F", "deg F", "degrees Fahrenheit", "degree Fahrenheit",
      "Fahrenheit"), "temperature", 5 / 9, -160 / 9, False),
    (("kelvin", "kelvins"), "temperature", 1.0, -273.15, False),
    # percent
    (("%", "percent", "per cent", "pct"), "percent", 1.0, 0, False),
    # electricity
    (("mV",), "voltage", 1e-3, 0, True),
    (("V", "volt", "volts"), "voltage", 1.0, 0, False),
    (("kV",), "voltage", 1e3, 0, True),
    (("mA", "milliamp", "milliamps"), "current", 1e-3, 0, False),
    (("A",), "current", 1.0, 0, True),
    (("amp", "amps", "ampere", "amperes"), "current", 1.0, 0, False),
    (("mW",), "power", 1e-3, 0, True),
    (("W", "watt", "watts"), "power", 1.0, 0, False),
    (("kW", "kilowatt", "kilowatts"), "power", 1e3, 0, False),
    (("MW", "megawatt", "megawatts"), "power", 1e6, 0, False),
    (("hp", "horsepower"), "power", 745.69987, 0, False),
    (("Wh", "watt-hour", "watt-hours", "watt hours"), "energy", 1.0, 0, False),
    (("kWh", "kilowatt-hour", "kilowatt-hours", "kilowatt hours"), "energy", 1e3, 0, False),
    (("MWh",), "energy", 1e6, 0, True),
    (("J", "joule", "joules"), "energy", 1 / 3600, 0, False),
    (("kJ",), "energy", 1 / 3.6, 0, True),
    (("kcal",), "energy", 4184 / 3600, 0, False),
    (("mAh",), "charge", 1e-3, 0, True),
    (("Ah",), "charge", 1.0, 0, True),
    (("Hz", "hertz"), "frequency", 1.0, 0, False),
    (("kHz",), "frequency", 1e3, 0, False),
    (("MHz",), "frequency", 1e6, 0, False),
    (("GHz",), "frequency", 1e9, 0, False),
    # data (bytes, decimal; binary readings are alternatives)
    (("bytes", "byte"), "data", 1.0, 0, False),
    (("KB", "kB"), "data", 1e3, 0, True),
    (("MB", "megabyte", "megabytes"), "data", 1e6, 0, False),
    (("GB", "gigabyte", "gigabytes"), "data", 1e9, 0, False),
    (("TB", "terabyte", "terabytes"), "data", 1e12, 0, False),
    (("PB", "petabyte", "petabytes"), "data", 1e15, 0, False),
    (("KiB",), "data", 1024.0, 0, True),
    (("MiB",), "data", 1024.0 ** 2, 0, True),
    (("GiB",), "data", 1024.0 ** 3, 0, True),
    (("TiB",), "data", 1024.0 ** 4, 0, True),
    (("kbps", "kbit/s", "kb/s"), "data rate", 1e3, 0, False),
    (("Mbps", "Mbit/s", "Mb/s"), "data rate", 1e6, 0, False),
    (("Gbps", "Gbit/s", "Gb/s"), "data rate", 1e9, 0, False),
    # time (s)
    (("ms", "millisecond", "milliseconds"), "time", 1e-3, 0, False),
    (("s",), "time", 1.0, 0, True),
    (("sec", "secs", "second", "seconds"), "time", 1.0, 0, False),
    (("min", "mins", "minute", "minutes"), "time", 60.0, 0, False),
    (("h",), "time", 3600.0, 0, True),
    (("hr", "hrs", "hour", "hours"), "time", 3600.0, 0, False),
    (("day", "days"), "time", 86400.0, 0, False),
    (("week", "weeks"), "time", 604800.0, 0, False),
    (("month", "months"), "time", 2629800.0, 0, False),
    (("yr", "yrs", "year", "years"), "time", 31557600.0, 0, False),
    # speed (m/s), pressure (Pa), others
    (("km/h", "kph", "kmh", "km/hr"), "speed", 1 / 3.6, 0, False),
    (("mph",), "speed", 0.44704, 0, False),
    (("m/s",), "speed", 1.0, 0, True),
    (("Pa", "pascal", "pascals"), "pressure", 1.0, 0, False),
    (("kPa",), "pressure", 1e3, 0, False),
    (("MPa",), "pressure", 1e6, 0, False),
    (("bar",), "pressure", 1e5, 0, False),
    (("psi",), "pressure", 6894.757293168, 0, False),
    (("rpm",), "rotation", 1.0, 0, False),
    (("dB", "decibels"), "sound", 1.0, 0, False),
    # currencies written after the number
    (("USD", "dollars", "dollar", "US dollars"), "currency:USD", 1.0, 0, False),
    (("EUR", "euros", "euro", "\u20ac"), "currency:EUR", 1.0, 0, False),
    (("GBP",), "currency:GBP", 1.0, 0, False),
    (("CHF", "Swiss francs"), "currency:CHF", 1.0, 0, False),
    (("JPY", "yen"), "currency:JPY", 1.0, 0, False),
]

_UNITS_CS: dict[str, tuple[str, float, float]] = {}
_UNITS_CI: dict[str, tuple[str, float, float]] = {}
for _spellings, _dim, _factor, _offset, _cs in _UNIT_SPECS:
    for _s in _spellings:
        (_UNITS_CS if _cs else _UNITS_CI)[_s if _cs else _s.lower()] = (_dim, _factor, _offset)


def _unit_pattern() -> re.Pattern:
    alts = [(s, True) for s in _UNITS_CS] + [(s, False) for s in _UNITS_CI]
    alts.sort(key=lambda a: -len(a[0]))
    parts = []
    for s, cs in alts:
        body = re.escape(s).replace(r"\ ", r"\s")
        parts.append(body if cs else f"(?i:{body})")
    return re.compile(r"[ \u00a0\u202f-]?(" + "|".join(parts) + r")(?![^\W_]|[\u00b2\u00b3])")


_UNIT_RE = _unit_pattern()
_CURRENCY_PREFIX = {"US$": "USD", "$": "USD", "\u20ac": "EUR", "\u00a3": "GBP", "\u00a5": "JPY", "C$": "CAD", "A$": "AUD",
                    "USD": "USD", "EUR": "EUR", "GBP": "GBP", "CHF": "CHF", "JPY": "JPY", "CAD": "CAD", "AUD": "AUD"}
_NUM_RE = re.compile(
    r"(?P<cur>US\$|C\$|A\$|\$|\u20ac|\u00a3|\u00a5|\b(?:USD|EUR|GBP|CHF|JPY|CAD|AUD)[ \u00a0]?)?"
    r"(?P<sign>[-\u2212])?"
    r"(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
)
_SCALE_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "bn": 1e9, "mn": 1e6}
_SCALE_LETTERS = {"k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "b": 1e9, "B": 1e9}
_SCALE_RE = re.compile(r"[ \u00a0]?(thousand|million|billion|trillion|bn|mn|k|K|m|M|b|B)(?![^\W_])")
_RANGE_BEFORE = re.compile(r"(?:\d(?:[.,]\d+)?\s*(?:%|[^\W\d_]{1,12}\s*)?(?:-|\u2013|\u2014|to|or|through)\s*"
                           r"(?:US\$|\$|\u20ac|\u00a3)?|\bbetween\s+|\bbetween\s+\S+(?:\s+\S+)?\s+and\s+(?:US\$|\$|\u20ac|\u00a3)?)$",
                           re.IGNORECASE)
_RANGE_AFTER = re.compile(r"^\s*(?:-|\u2013|\u2014|to|or|through|and)\s*(?:US\$|\$|\u20ac|\u00a3)?\s?[-\u2212]?\d", re.IGNORECASE)
_BOUND_BEFORE = re.compile(
    r"(?:\bup\s+to|\bmore\s+than|\bless\s+than|\bfewer\s+than|\bgreater\s+than|\bat\s+least|\bat\s+most|\bover|\bunder"
    r"|\babove|\bbelow|\bexceeding|\bexceeds|\bbeyond|\bupwards\s+of|\bin\s+excess\s+of|[<>\u2264\u2265])\s*$",
    re.IGNORECASE,
)
_APPROX_BEFORE = re.compile(
    r"(?:\babout|\bapproximately|\bapprox\.?|\baround|\broughly|\bnearly|\balmost|\bsome|\bcirca|\bca\.|\bestimated"
    r"|\best\.|[~\u2248])\s*$", re.IGNORECASE)
_PER_AFTER = re.compile(r"\s*(?:(per\b|/)\s*|(an?)\s+)(?:an?\s+)?([^\W\d_]+)\b", re.IGNORECASE)
_PER_WORDS = frozenset("day week month year hour minute second night person piece unit".split())
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


# =============================================================================================
# Conflicts: mentions
# =============================================================================================


@dataclass
class _Tok:
    text: str
    start: int
    end: int
    word: bool


@dataclass
class _Quantity:
    start: int
    end: int
    dim: str
    value: float
    alts: tuple[float, ...]
    display: str
    approx: bool
    unit_factor: float = 1.0
    skip: bool = False  # a range end or a bound: kept until lists are found, then dropped


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


def _find_quantities(sentence: str) -> list[_Quantity]:
    out: list[_Quantity] = []
    for m in _NUM_RE.finditer(sentence):
        s = m.start()
        before_char = sentence[s - 1] if s > 0 else " "
        if before_char.isalnum() or before_char in "._/" or (before_char == "," and s > 1 and sentence[s - 2].isdigit()):
            continue  # part of a code (E-204, v2.1) or of a bigger number
        value = float(m.group("num").replace(",", ""))
        if m.group("sign"):
            value = -value
        pos = m.end()
        if pos < len(sentence) and sentence[pos] == "+":
            continue  # 5+ kg: a bound
        if re.match(r"[-_/.][^\W_]", sentence[pos: pos + 2]) and not _UNIT_RE.match(sentence, pos):
            continue  # 204-B, 3.x: a code
        cur = m.group("cur")
        currency = _CURRENCY_PREFIX.get(cur.strip()) if cur else None
        scale = 1.0
        sm = _SCALE_RE.match(sentence, pos)
        if sm and (sm.group(1) in _SCALE_WORDS or currency):
            scale = _SCALE_WORDS.get(sm.group(1)) or _SCALE_LETTERS[sm.group(1)]
            pos = sm.end()
        elif sm and sm.group(1) in _SCALE_LETTERS and not currency:
            sm = None  # 5 m is metres, not millions
        dim, factor, offset, alts_factors = None, 1.0, 0.0, ()
        um = _UNIT_RE.match(sentence, pos) if not currency else None
        if um:
            spelled = um.group(1)
            spec = _UNITS_CS.get(spelled) or _UNITS_CI.get(" ".join(spelled.lower().split()))
            if spec is None:
                spec = _UNITS_CI.get(spelled.lower())
            if spec is not None and spelled == "in" and re.match(r"\s+[^\W\d_]", sentence[um.end():]) \
                    and um.group(0)[0].isspace():
                spec = None  # "5 in the box" (but "6ft 1in Coltrane" is a length)
            if spec is not None and spelled == "s" and not um.group(0)[0].isspace():
                spec = None  # "1970s", "10s": not seconds
            if spec is not None:
                dim, factor, offset = spec
                pos = um.end()
                if dim == "data":
                    low = spelled.upper()
                    power = {"KB": 1, "MB": 2, "GB": 3, "TB": 4, "PB": 5}.get(low)
                    if power and "I" not in low:
                        alts_factors = (1024.0 ** power,)
        if currency:
            dim = f"currency:{currency}"
        elif dim is None:
            if sm is None:
                continue  # a plain number: not a quantity
            dim = "count"
        # ranges, bounds, rates
        head = sentence[max(0, s - 40): s]
        skip = bool(_RANGE_BEFORE.search(head) or _BOUND_BEFORE.search(head) or _RANGE_AFTER.match(sentence[pos: pos + 20])
                    or _RANGE_AFTER.match(sentence[m.end(): m.end() + 20]))
        pm = _PER_AFTER.match(sentence, pos)
        if pm and (pm.group(1) or pm.group(3).lower() in _PER_WORDS):
            dim = f"{dim}/per {norm_term(pm.group(3))}"  # $5 per kg, 3 V per cell, 2 hours a day
        base = value * scale * factor + offset
        alts = tuple(value * scale * f for f in alts_factors)
        out.append(_Quantity(s, pos, dim, base, alts, sentence[s:pos].strip(), bool(_APPROX_BEFORE.search(head)),
                             scale * factor, skip))
    return _merge_quantities(sentence, out)


def _merge_quantities(sentence: str, qs: list[_Quantity]) -> list[_Quantity]:
    """Join compound quantities (``6 ft 1 in``, ``2 h 30 min``, ``1 lb 4 oz``) and drop lists
    (``$1, $2, $5 and $10``, ``5 kg or 7 kg``): a list holds several values, not one disagreeing."""
    merged: list[_Quantity] = []
    for q in qs:
        if merged:
            p = merged[-1]
            gap = sentence[p.end: q.start]
            if (p.dim == q.dim and p.dim in ("length", "mass", "time") and q.unit_factor < p.unit_factor
                    and re.fullmatch(r"\s*(?:and\s+)?", gap)):
                merged[-1] = _Quantity(p.start, q.end, p.dim, p.value + q.value, (), sentence[p.start: q.end].strip(),
                                       p.approx or q.approx, q.unit_factor, p.skip or q.skip)
                continue
        merged.append(q)
    in_list: set[int] = set()
    for k in range(len(merged) - 1):
        gap = sentence[merged[k].end: merged[k + 1].start]
        if merged[k].dim.split("/")[0] == merged[k + 1].dim.split("/")[0] and re.fullmatch(r"\s*(?:,|,?\s*and|,?\s*or|&)\s*", gap):
            in_list.update((k, k + 1))
    return [q for k, q in enumerate(merged) if k not in in_list and not q.skip]


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
        self.quantities = _find_quantities(sentence)

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
        if low in _UNITS_CI or t.text in _UNITS_CS or low in _SCALE_WORDS or low in _CLAUSE_WORDS:
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
        if low in _UNITS_CI or t.text in _UNITS_CS or low in _SCALE_WORDS:
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
