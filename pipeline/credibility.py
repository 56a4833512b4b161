"""Source credibility: a static score per source, decayed by the age of what it published.

:class:`CredibilityTable` gives every evidence item a credibility in [0, 1]. Each source has a static
score; a lookup tries the exact source name, then (for URLs and host names) the host without
``www.`` (``https://www.example.com/x`` -> ``example.com``) and its parent domains down to the
*registered* domain (``forum.example.com`` -> ``example.com``; ``news.bbc.co.uk`` -> ``bbc.co.uk``,
never the public suffix ``co.uk``), then ``default``. Where a registered domain ends is read from
the Public Suffix List snapshot bundled with ``tldextract``, private suffixes included
(``alice.github.io`` is not credited with a ``github.io`` entry: github.io's users are not GitHub);
nothing is fetched at run time. Hosts under no known suffix (``wiki.intranet``, ``localhost``) try
their parents down to two labels; IP addresses only themselves.

With a half-life set and a ``published`` date (ISO 8601 - ``2024-03-05``,
``2024-03-05T10:00:00Z``, ``2024-03``, ``2024`` - or any date ``python-dateutil`` reads that names
a four-digit year, such as ``Tue, 05 Mar 2024 10:00:00 GMT`` or ``March 5, 2024``), the score
*decays toward the floor*: the part above ``floor`` halves every ``half_life_days``::

    credibility = floor + (score - floor) * 0.5 ** (age_days / half_life_days)

(a future date counts as age 0; an unparseable date means no decay). The result is always clipped
to [``floor``, ``ceiling``] - [0.1, 0.95] by default, the seed design's range, so no source is ever
fully trusted or fully ignored. :meth:`CredibilityTable.calibrate` fits the scores from labelled
validation records (per-source accuracy smoothed toward a prior). Tables are read from and written
to JSON (or read from YAML): ``{sources: {name: score}, default, half_life_days, floor, ceiling}``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import math
import re
from collections import Counter
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from pipeline.types import Evidence
from pipeline.web import domain_of

logger = logging.getLogger(__name__)

FLOOR = 0.1
CEILING = 0.95

_HOST_LIKE = re.compile(r"[\w-]+(?:\.[\w-]+)+(?::\d+)?(?:/\S*)?")
_YEAR = re.compile(r"(?<!\d)\d{4}(?!\d)")


@functools.cache
def _suffix_extractor():
    """tldextract on its bundled Public Suffix List snapshot: no download, no cache directory."""
    try:
        import tldextract
    except ImportError:
        raise ImportError("domain lookups need tldextract: pip install 'crag-evaluators[pipeline]'") from None

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def registered_domain(host: str) -> str:
    """The registrable part of a host name (``news.bbc.co.uk`` -> ``bbc.co.uk``,
    ``alice.github.io`` -> ``alice.github.io``); ``""`` when the host is under no known public
    suffix (``localhost``, ``wiki.intranet``), is an IP address, or is itself a public suffix."""
    parts = _suffix_extractor()(host)
    return f"{parts.domain}.{parts.suffix}" if parts.domain and parts.suffix else ""


def lookup_domains(host: str) -> list[str]:
    """The names a host's credibility is looked up by, most specific first: the host, then its
    parents down to the registered domain (see the module docstring)."""
    if not host:
        return []
    try:
        ipaddress.ip_address(host.strip("[]"))
        return [host]
    except ValueError:
        pass
    labels = host.split(".")
    registered = registered_domain(host)
    last = len(labels) - len(registered.split(".")) if registered else len(labels) - 2
    return [".".join(labels[i:]) for i in range(max(0, last) + 1)] if len(labels) > 1 else [host]


def parse_date(value: Any) -> date | None:
    """A date as a :class:`~datetime.date`: ISO 8601 (``2024-03-05``, ``2024-03-05T10:00:00Z``,
    ``2024-03``, ``2024``; missing parts are the first month or day), else any date
    ``python-dateutil`` reads that names a four-digit year (``Tue, 05 Mar 2024 10:00:00 GMT``,
    ``March 5, 2024``); ``None`` when it is neither (``"not a date"``, ``"March 5"``)."""
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
        from dateutil import parser as date_parser
    except ImportError:
        raise ImportError("dates need python-dateutil: pip install 'crag-evaluators[pipeline]'") from None
    try:
        return date_parser.isoparse(s).date()
    except (ValueError, OverflowError):
        pass
    if not _YEAR.search(s):
        return None  # "March 5", "5": the parser would fill in the current year or month
    try:
        return date_parser.parse(s, default=datetime(2000, 1, 1)).date()
    except (ValueError, OverflowError):
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
        """The table's score for ``source`` before decay and clipping (exact name, then the host and
        its parent domains down to the registered domain, then ``default``)."""
        source = source or ""
        if source in self.scores:
            return self.scores[source]
        if source.lower() in self._lower:
            return self._lower[source.lower()]
        if "://" in source or _HOST_LIKE.fullmatch(source):
            for cand in lookup_domains(domain_of(source)):
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
