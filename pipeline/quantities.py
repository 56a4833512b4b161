"""Quantity spotting: numbers with units, currencies or scale words in a sentence, in base units.

:func:`find_quantities` reads the point quantities of one sentence - a number with a unit (``5 kg``,
``5,000 g``, ``12 V``, ``3.7 GHz``, ``45 %``, ``10 hours``, ``-5 °C``), a currency (``$300``,
``€1.2 million``, ``300 dollars``) or a scale word (``8.7 million``) - as :class:`Quantity` records
holding the span, the text as written, the dimension and the value in the dimension's base unit.

Units are converted with ``pint``: each spelling in :data:`UNIT_SPELLINGS` names a pint unit, and
the value is stored in the pint unit of its dimension in :data:`BASE_UNITS` (grams, metres,
degrees Celsius, bytes, ...), so ``1 km`` and ``1000 m`` hold the same value and ``5 kg`` is within
1% of ``11 lb``. The dimensions are ours, not pint's dimensionalities, so quantities pint would
call commensurable stay apart when they measure different things (``rpm`` is rotation, ``Hz``
frequency; ``Wh`` energy, ``Ah`` charge). Decimal data sizes written as abbreviations (``KB``,
``MB``, ``GB``, ``TB``, ``PB``) carry the binary reading as an alternative value (``1 GB`` is
both 10^9 and 2^30 bytes), and ``tons`` the short and long ton beside the metric one. Currencies are never converted into each other: each is its own
dimension (``currency:USD``, ``currency:EUR``, ...). A number with a scale word but no unit is a
``count``; a plain number is not a quantity.

Which spellings count, and how ambiguous ones are read, is ours (see ``docs/pipeline-evidence-notes.md``
for why not ``quantulum3``): the spellings are a closed list, case-sensitive where a letter is
ambiguous (``m`` metres vs ``M`` millions, ``s`` seconds vs ``1970s``, ``in`` inches only when no
word follows), and a number that is part of a code (``E-204``, ``v2.1``, ``204-B``) is skipped.
Precision over recall: ranges (``5-7 kg``, ``between 5 and 7 kg``), bounds (``up to``, ``more
than``, ``under``, ``5+``) and lists of the same dimension (``$1, $2 and $5``, ``5 kg or 7 kg``)
are not point values and are dropped; ``about``/``approximately``/``~`` marks a quantity
``approx``; a rate keeps its denominator in the dimension (``$5 per kg`` is ``currency:USD/per kg``,
``2 hours a day`` is ``time/per day``). Compound quantities are joined (``6 ft 1 in``,
``2 h 30 min``, ``1 lb 4 oz``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from pipeline.web import norm_term

#: the pint unit each dimension's values are stored in
BASE_UNITS: dict[str, str] = {
    "mass": "gram", "length": "meter", "area": "meter ** 2", "volume": "liter", "temperature": "degree_Celsius",
    "percent": "percent", "voltage": "volt", "current": "ampere", "power": "watt", "energy": "watt_hour",
    "charge": "ampere_hour", "frequency": "hertz", "data": "byte", "data rate": "bit / second", "time": "second",
    "speed": "meter / second", "pressure": "pascal", "rotation": "revolution / minute", "sound": "decibel",
}

#: (spellings, dimension, pint unit - ``None`` for currencies -, case-sensitive)
UNIT_SPELLINGS: list[tuple[tuple[str, ...], str, str | None, bool]] = [
    # mass
    (("mg",), "mass", "milligram", True),
    (("g",), "mass", "gram", True),
    (("gram", "grams", "gramme", "grammes"), "mass", "gram", False),
    (("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos"), "mass", "kilogram", False),
    (("tonne", "tonnes", "metric ton", "metric tons"), "mass", "tonne", False),
    (("ton", "tons"), "mass", "tonne", False),  # also read as short and long tons (see _AMBIGUOUS)
    (("lb", "lbs", "pound", "pounds"), "mass", "pound", False),
    (("oz", "ounce", "ounces"), "mass", "ounce", False),
    # length
    (("mm", "millimetre", "millimetres", "millimeter", "millimeters"), "length", "millimeter", False),
    (("cm", "centimetre", "centimetres", "centimeter", "centimeters"), "length", "centimeter", False),
    (("m",), "length", "meter", True),
    (("metre", "metres", "meter", "meters"), "length", "meter", False),
    (("km", "kilometre", "kilometres", "kilometer", "kilometers"), "length", "kilometer", False),
    (("in",), "length", "inch", True),  # only when no word follows (see find_quantities)
    (("inch", "inches", "\u2033"), "length", "inch", False),
    (("ft", "foot", "feet"), "length", "foot", False),
    (("yd", "yard", "yards"), "length", "yard", False),
    (("mi",), "length", "mile", True),
    (("mile", "miles"), "length", "mile", False),
    # area
    (("m\u00b2", "m2", "sq m", "square metre", "square metres", "square meter", "square meters"), "area", "meter ** 2",
     False),
    (("km\u00b2", "km2", "sq km", "square kilometre", "square kilometres", "square kilometer", "square kilometers"),
     "area", "kilometer ** 2", False),
    (("sq ft", "square foot", "square feet", "ft\u00b2"), "area", "foot ** 2", False),
    (("acre", "acres"), "area", "international_acre", False),
    (("ha", "hectare", "hectares"), "area", "hectare", False),
    # volume
    (("m\u00b3", "m3", "cu m", "cubic metre", "cubic metres", "cubic meter", "cubic meters"), "volume", "meter ** 3",
     False),
    (("cu ft", "ft\u00b3", "cubic foot", "cubic feet"), "volume", "foot ** 3", False),
    (("ml", "mL", "millilitre", "millilitres", "milliliter", "milliliters"), "volume", "milliliter", False),
    (("L", "l"), "volume", "liter", True),
    (("litre", "litres", "liter", "liters"), "volume", "liter", False),
    (("gal", "gallon", "gallons", "US gal", "US gallon", "US gallons"), "volume", "gallon", False),  # the US gallon
    (("imp gal", "imperial gallon", "imperial gallons"), "volume", "imperial_gallon", False),
    # temperature
    (("\u00b0C", "\u2103", "\u00b0 C", "degrees C", "degree C", "deg C", "degrees Celsius", "degree Celsius", "Celsius",
      "degrees centigrade"), "temperature", "degree_Celsius", False),
    (("\u00b0F", "\u2109", "\u00b0 F", "degrees F", "degree F", "deg F", "degrees Fahrenheit", "degree Fahrenheit",
      "Fahrenheit"), "temperature", "degree_Fahrenheit", False),
    (("kelvin", "kelvins"), "temperature", "kelvin", False),
    # percent
    (("%", "percent", "per cent", "pct"), "percent", "percent", False),
    # electricity
    (("mV",), "voltage", "millivolt", True),
    (("V", "volt", "volts"), "voltage", "volt", False),
    (("kV",), "voltage", "kilovolt", True),
    (("mA", "milliamp", "milliamps"), "current", "milliampere", False),
    (("A",), "current", "ampere", True),
    (("amp", "amps", "ampere", "amperes"), "current", "ampere", False),
    (("mW",), "power", "milliwatt", True),
    (("W", "watt", "watts"), "power", "watt", False),
    (("kW", "kilowatt", "kilowatts"), "power", "kilowatt", False),
    (("MW", "megawatt", "megawatts"), "power", "megawatt", False),
    (("hp", "horsepower"), "power", "horsepower", False),
    (("Wh", "watt-hour", "watt-hours", "watt hours"), "energy", "watt_hour", False),
    (("kWh", "kilowatt-hour", "kilowatt-hours", "kilowatt hours"), "energy", "kilowatt_hour", False),
    (("MWh",), "energy", "megawatt_hour", True),
    (("J", "joule", "joules"), "energy", "joule", False),
    (("kJ",), "energy", "kilojoule", True),
    (("kcal",), "energy", "kilocalorie", False),
    (("mAh",), "charge", "milliampere_hour", True),
    (("Ah",), "charge", "ampere_hour", True),
    (("Hz", "hertz"), "frequency", "hertz", False),
    (("kHz",), "frequency", "kilohertz", False),
    (("MHz",), "frequency", "megahertz", False),
    (("GHz",), "frequency", "gigahertz", False),
    # data (decimal prefixes; the binary reading of the abbreviations is an alternative value)
    (("bytes", "byte"), "data", "byte", False),
    (("KB", "kB"), "data", "kilobyte", True),
    (("MB", "megabyte", "megabytes"), "data", "megabyte", False),
    (("GB", "gigabyte", "gigabytes"), "data", "gigabyte", False),
    (("TB", "terabyte", "terabytes"), "data", "terabyte", False),
    (("PB", "petabyte", "petabytes"), "data", "petabyte", False),
    (("KiB",), "data", "kibibyte", True),
    (("MiB",), "data", "mebibyte", True),
    (("GiB",), "data", "gibibyte", True),
    (("TiB",), "data", "tebibyte", True),
    (("kbps", "kbit/s", "kb/s"), "data rate", "kilobit / second", False),
    (("Mbps", "Mbit/s", "Mb/s"), "data rate", "megabit / second", False),
    (("Gbps", "Gbit/s", "Gb/s"), "data rate", "gigabit / second", False),
    # time (a month is a twelfth and a year 365.25 days, as in pint)
    (("ms", "millisecond", "milliseconds"), "time", "millisecond", False),
    (("s",), "time", "second", True),
    (("sec", "secs", "second", "seconds"), "time", "second", False),
    (("min", "mins", "minute", "minutes"), "time", "minute", False),
    (("h",), "time", "hour", True),
    (("hr", "hrs", "hour", "hours"), "time", "hour", False),
    (("day", "days"), "time", "day", False),
    (("week", "weeks"), "time", "week", False),
    (("month", "months"), "time", "month", False),
    (("yr", "yrs", "year", "years"), "time", "year", False),
    # speed, pressure, others
    (("km/h", "kph", "kmh", "km/hr", "kilometres per hour", "kilometers per hour", "kilometre per hour",
      "kilometer per hour"), "speed", "kilometer / hour", False),
    (("mph", "miles per hour", "mile per hour"), "speed", "mile / hour", False),
    (("m/s",), "speed", "meter / second", True),
    (("metres per second", "meters per second", "metre per second", "meter per second"), "speed", "meter / second",
     False),
    (("Pa", "pascal", "pascals"), "pressure", "pascal", False),
    (("kPa",), "pressure", "kilopascal", False),
    (("MPa",), "pressure", "megapascal", False),
    (("bar",), "pressure", "bar", False),
    (("psi",), "pressure", "psi", False),
    (("rpm",), "rotation", "revolution / minute", False),
    (("dB", "decibels"), "sound", "decibel", False),
    # currencies written after the number: never converted
    (("USD", "dollars", "dollar", "US dollars"), "currency:USD", None, False),
    (("EUR", "euros", "euro", "\u20ac"), "currency:EUR", None, False),
    (("GBP",), "currency:GBP", None, False),
    (("CHF", "Swiss francs"), "currency:CHF", None, False),
    (("JPY", "yen"), "currency:JPY", None, False),
]

#: the binary reading of a decimal data-size abbreviation
_BINARY = {"KB": "kibibyte", "MB": "mebibyte", "GB": "gibibyte", "TB": "tebibyte", "PB": "pebibyte"}
#: the other readings of an ambiguous spelling (its first reading is in UNIT_SPELLINGS)
_AMBIGUOUS = {"ton": ("short_ton", "long_ton"), "tons": ("short_ton", "long_ton")}

_UNITS_CS: dict[str, tuple[str, str | None]] = {}
_UNITS_CI: dict[str, tuple[str, str | None]] = {}
for _spellings, _dim, _unit, _cs in UNIT_SPELLINGS:
    for _s in _spellings:
        (_UNITS_CS if _cs else _UNITS_CI)[_s if _cs else _s.lower()] = (_dim, _unit)

#: scale words after a number (``8.7 million``); the letters only after a currency (``$5M``)
SCALE_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "bn": 1e9, "mn": 1e6}
_SCALE_LETTERS = {"k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "b": 1e9, "B": 1e9}


def is_unit_word(token: str) -> bool:
    """Whether a token is a unit or scale spelling (``kg``, ``hours``, ``million``): not a name, not
    an attribute word."""
    return token.lower() in _UNITS_CI or token in _UNITS_CS or token.lower() in SCALE_WORDS


@functools.cache
def _registry():
    try:
        import pint
    except ImportError:
        raise ImportError("unit conversion needs pint: pip install 'crag-evaluators[pipeline]'") from None

    registry = pint.UnitRegistry()
    registry.define("international_acre = 43560 * foot ** 2")  # pint's acre is the US survey acre
    return registry


@functools.cache
def unit_factor(unit: str, dim: str) -> float:
    """How many of ``dim``'s base units one ``unit`` is (pint; raises pint's ``DimensionalityError``
    when the unit does not measure ``dim``). Not for temperatures, whose scales have offsets."""
    return float(_registry().Quantity(1.0, unit).to(BASE_UNITS[dim]).magnitude)


def to_base(value: float, unit: str | None, dim: str) -> float:
    """``value`` in ``unit`` as a value in ``dim``'s base unit (currencies and counts unchanged)."""
    if unit is None:
        return value
    if dim == "temperature":
        return float(_registry().Quantity(value, unit).to(BASE_UNITS[dim]).magnitude)
    return value * unit_factor(unit, dim)


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


@dataclass
class Quantity:
    """One quantity of a sentence: its character span, dimension, value in the dimension's base unit
    (with alternative readings), the text as written, and whether it is approximate. ``skip``
    marks a range end, a bound or a list member (dropped unless asked for); ``range_after`` that
    the only reason is a number after ``and``/``to``/a dash (undone when it joins a compound)."""

    start: int
    end: int
    dim: str
    value: float
    alts: tuple[float, ...]
    display: str
    approx: bool
    unit_factor: float = 1.0
    skip: bool = False
    range_after: bool = False


def find_quantities(sentence: str, keep_skipped: bool = False) -> list[Quantity]:
    """The point quantities of one sentence, in order (see the module docstring); with
    ``keep_skipped``, also the range ends, bounds and list members, marked ``skip``."""
    out: list[Quantity] = []
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
        if sm and (sm.group(1) in SCALE_WORDS or currency):
            scale = SCALE_WORDS.get(sm.group(1)) or _SCALE_LETTERS[sm.group(1)]
            pos = sm.end()
        elif sm and sm.group(1) in _SCALE_LETTERS and not currency:
            sm = None  # 5 m is metres, not millions
        dim, unit, alt_units = None, None, ()
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
                dim, unit = spec
                pos = um.end()
                if dim == "data" and spelled.upper() in _BINARY:
                    alt_units = (_BINARY[spelled.upper()],)
                alt_units += _AMBIGUOUS.get(spelled.lower(), ())
        if currency:
            dim = f"currency:{currency}"
        elif dim is None:
            if sm is None:
                continue  # a plain number: not a quantity
            dim = "count"
        # ranges, bounds, rates
        head = sentence[max(0, s - 40): s]
        skip = bool(_RANGE_BEFORE.search(head) or _BOUND_BEFORE.search(head))
        range_after = not skip and bool(_RANGE_AFTER.match(sentence[pos: pos + 20])
                                        or _RANGE_AFTER.match(sentence[m.end(): m.end() + 20]))
        base = to_base(value * scale, unit, dim)
        alts = tuple(to_base(value * scale, u, dim) for u in alt_units)
        factor = scale * (unit_factor(unit, dim) if unit is not None and dim != "temperature" else 1.0)
        pm = _PER_AFTER.match(sentence, pos)
        if pm and (pm.group(1) or pm.group(3).lower() in _PER_WORDS):
            dim = f"{dim}/per {norm_term(pm.group(3))}"  # $5 per kg, 3 V per cell, 2 hours a day
        out.append(Quantity(s, pos, dim, base, alts, sentence[s:pos].strip(), bool(_APPROX_BEFORE.search(head)),
                            factor, skip or range_after, range_after))
    return _merge_quantities(sentence, out, keep_skipped)


def _merge_quantities(sentence: str, qs: list[Quantity], keep_skipped: bool) -> list[Quantity]:
    """Join compound quantities (``6 ft 1 in``, ``2 h 30 min``, ``1 lb 4 oz``) and drop lists
    (``$1, $2, $5 and $10``, ``5 kg or 7 kg``): a list holds several values, not one disagreeing."""
    merged: list[Quantity] = []
    for q in qs:
        if merged:
            p = merged[-1]
            gap = sentence[p.end: q.start]
            if (p.dim == q.dim and p.dim in ("length", "mass", "time") and q.unit_factor < p.unit_factor
                    and re.fullmatch(r"\s*(?:and\s+)?", gap)):
                # "26 years and 9 months": the "and 9" after the first part is the compound, not a range
                merged[-1] = Quantity(p.start, q.end, p.dim, p.value + q.value, (), sentence[p.start: q.end].strip(),
                                      p.approx or q.approx, q.unit_factor, (p.skip and not p.range_after) or q.skip,
                                      q.range_after)
                continue
        merged.append(q)
    for k in range(len(merged) - 1):
        gap = sentence[merged[k].end: merged[k + 1].start]
        if merged[k].dim.split("/")[0] == merged[k + 1].dim.split("/")[0] and re.fullmatch(r"\s*(?:,|,?\s*and|,?\s*or|&)\s*", gap):
            merged[k].skip = merged[k + 1].skip = True
    return merged if keep_skipped else [q for q in merged if not q.skip]
