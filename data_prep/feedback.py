"""``python -m data_prep feedback``: logged user feedback (thumbs up/down) to labelled pairs.

    python -m data_prep feedback --input logs/feedback.jsonl --output out/feedback.pairs.jsonl \\
        [--corpus FILE --corpus-format passages|FORMAT] [--half-life-days 30] [--min-margin 0.2] \\
        [--min-votes 1] [--keep-conflicts] [--hard-labels] [--skip-bad] [--overwrite]

Input: JSONL (``.gz`` allowed), one feedback record a line::

    {"query": "who got the first nobel prize in physics",
     "passage": "text" | {"id", "title", "text"},   # or only "passage_id", looked up in --corpus
     "vote": "up", "timestamp": "2026-11-30T12:00:00Z", "user_id": "u17", "session_id": "s9",
     "correction": "Wilhelm Conrad Röntgen" | {"passage": ...} | {"passage_id": "..."}}

* ``vote``: ``"up"``/``"down"``, ``"thumbs_up"``/``"thumbs_down"``, ``"+1"``/``"-1"`` (strings, any
  case), the numbers ``1``/``-1`` and ``true``/``false``. Anything else is a bad row (kind
  ``invalid-vote``).
* ``timestamp`` (optional): an ISO 8601 string (``datetime.fromisoformat``; ``Z`` or an offset,
  none means UTC) or Unix seconds (a number). Anything else is a bad row (``invalid-timestamp``).
* ``user_id``, else ``session_id``, names the voter (``null`` or ``""`` count as absent); without
  either, the record is a voter of its own.
* ``passage``: its text (a string, title ``""``) or an object with ``text`` and optional ``title``
  and ``id``. A passage without an id gets :func:`~data_prep.readers.common.stable_id` of its title
  and text; ``passage_id`` alone is looked up in the corpus (``--corpus``).
* ``correction`` (optional): a string is the right answer, collected (de-duplicated after SQuAD
  normalisation) into ``metadata["answers"]`` of every pair of the query; an object
  ``{"passage": ...}`` or ``{"passage_id": ...}`` names a better passage, which gets an up vote from
  the same voter at the same time (a vote like any other: it can supersede or be superseded).

Merge rule (:func:`merge_votes`). Votes are grouped by the normalised query (NFC, lower case,
whitespace collapsed) and the passage id. In a group each voter has one vote: the latest (by
timestamp, then by line; an undated vote is older than any dated one), the earlier ones count as
``superseded``. Each remaining vote weighs ``w = 0.5 ** (age_days / half_life_days)``, its age
measured from the newest timestamp of the whole input (not the clock, so a rerun gives the same
labels); an undated vote is as old as the oldest dated vote of the input (all weights are 1 when
no record is dated), and ``half_life_days`` 0 or ``inf`` means no decay. The soft label is
``w_up / (w_up + w_down)``. A group with fewer than ``min_votes`` voters is dropped; one with
``|label - 0.5| < min_margin`` is a conflict: left out (unless ``keep_conflicts``), counted, and
written to ``<output>.conflicts.jsonl``. ``hard_labels`` writes 1 for labels >= 0.5, else 0.

Output: :class:`~data_prep.records.LabelledPair` JSONL (``label_source="feedback"``, sorted by
query id then passage id; ``query_id`` is ``text_query_id`` of the query as first written) with
``<output>.meta.json``. An existing output is refused unless ``--overwrite``; ``--skip-bad`` keeps
bad rows in ``<output>.rejects/``. An input with no valid record, or with no group left to write,
is an error (exit code 2) and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .io import DataError, Rejects, iter_json_lines, no_records_error, parse_rows, rejected_line, require_path, write_json, write_jsonl
from .locking import locks_output
from .readers import FORMATS, load_all, open_source
from .readers.common import check_text, id_str, stable_id, text_query_id
from .records import LabelledPair, Passage
from .text import normalize_answer

logger = logging.getLogger(__name__)

#: ``vote`` strings (compared lower-cased and stripped) and what they mean: True is an up vote
VOTE_STRINGS = {"up": True, "thumbs_up": True, "+1": True, "down": False, "thumbs_down": False, "-1": False}
VOTES_ACCEPTED = "up/down, thumbs_up/thumbs_down, +1/-1, 1/-1 or true/false"
#: ``--corpus-format`` of a Passage JSONL file (any other value is a reader format)
PASSAGES = "passages"
#: how many conflict keys ``meta.json`` lists
FIRST = 5
#: a margin this close to ``min_margin`` counts as reaching it (0.7 - 0.5 is 0.19999999999999996)
MARGIN_TOLERANCE = 1e-9
DAY = 86400.0
# datetime's range in Unix seconds: 0001-01-01 .. 9999-12-31T23:59:59
_MIN_TS, _MAX_TS = -62135596800.0, 253402300799.0


@dataclass
class MergeRule:
    """How votes become a label (see the module docstring)."""

    half_life_days: float = field(
        default=30.0, metadata={"help": "a vote this many days older than the newest one weighs half; 0 or inf: no decay"}
    )
    min_margin: float = field(default=0.2, metadata={"help": "|label - 0.5| below this is a conflict (0 to 0.5)"})
    min_votes: int = field(default=1, metadata={"help": "groups with fewer distinct voters are dropped"})
    keep_conflicts: bool = field(default=False, metadata={"help": "write conflicts (with their soft label) to the output too"})
    hard_labels: bool = field(default=False, metadata={"help": "write 1 for labels >= 0.5, else 0, instead of the soft label"})

    def __post_init__(self) -> None:
        h = self.half_life_days
        if isinstance(h, bool) or not isinstance(h, (int, float)) or math.isnan(h) or h < 0:
            raise ValueError(f"half_life_days must be a number >= 0 (0 or inf: no decay), got {h!r}")
        m = self.min_margin
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0.0 <= m <= 0.5:
            raise ValueError(f"min_margin must be between 0 and 0.5, got {m!r}")
        v = self.min_votes
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"min_votes must be an integer >= 1, got {v!r}")
        self.half_life_days = float(h)
        self.min_margin = float(m)

    @property
    def decays(self) -> bool:
        return 0.0 < self.half_life_days < math.inf

    def to_dict(self) -> dict[str, Any]:
        h = self.half_life_days
        return {
            "half_life_days": h if math.isfinite(h) else "inf",
            "min_margin": self.min_margin,
            "min_votes": self.min_votes,
            "keep_conflicts": self.keep_conflicts,
            "hard_labels": self.hard_labels,
        }


@dataclass
class Vote:
    """One voter's vote on one (query, passage), from a record or from its correction."""

    qkey: str  # normalised query
    query: str  # as written
    passage: Passage
    voter: str
    up: bool
    time: float | None  # Unix seconds, None when undated
    order: int  # the record's line (input order)
    answer: str | None = None  # a correction's answer text
    correction: bool = False  # the up vote a correction gives its better passage


@dataclass
class Merged:
    """What :func:`merge_votes` makes: the pairs to write, the conflicts (soft labels), counts."""

    pairs: list[LabelledPair]
    conflicts: list[LabelledPair]
    stats: dict[str, Any]


# --------------------------------------------------------------------------------------------
# parsing one record


def normalize_query(query: str) -> str:
    """The grouping key of a query: NFC, lower case, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", query).lower().split())


def parse_vote(path, line: int, value: Any) -> bool:
    """True for an up vote, False for a down vote (accepted values: :data:`VOTES_ACCEPTED`)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (1, -1):
        return value == 1
    if isinstance(value, str) and value.strip().lower() in VOTE_STRINGS:
        return VOTE_STRINGS[value.strip().lower()]
    raise DataError(path, line, f"invalid vote {value!r}: expected {VOTES_ACCEPTED}", "invalid-vote")


def parse_timestamp(path, line: int, value: Any) -> float | None:
    """Unix seconds from an ISO 8601 string (no offset: UTC) or a number; ``None`` when absent."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        t = float(value)
        if not math.isfinite(t) or not _MIN_TS <= t <= _MAX_TS:
            raise DataError(path, line, f"invalid timestamp {value!r}: out of range for Unix seconds (milliseconds?)",
                            "invalid-timestamp")
        return t
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            return dt.timestamp()
    raise DataError(path, line, f"invalid timestamp {value!r}: expected an ISO 8601 date-time or Unix seconds",
                    "invalid-timestamp")


def format_timestamp(t: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC with ``Z``."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def _voter(path, line: int, obj: dict) -> str:
    for key, tag in (("user_id", "user"), ("session_id", "session")):
        v = obj.get(key)
        if v is None or (isinstance(v, str) and not v.strip()):
            continue
        return f"{tag}:{id_str(path, line, v, key)}"
    return f"record:{line}"


def _passage(path, line: int, value: Any, pid: Any, corpus: Mapping[str, Passage] | None, corpus_name: str,
             prefix: str = "") -> Passage:
    """The passage of ``passage`` (text or object) and/or ``passage_id`` (looked up in ``corpus``)."""
    field_ = f"{prefix}passage"
    pid = id_str(path, line, pid, f"{prefix}passage_id") if pid is not None else None
    if value is None:
        if pid is None:
            raise DataError(path, line, f"neither '{field_}' nor '{field_}_id' given", "missing-passage")
        if corpus is None:
            raise DataError(path, line, f"passage id {pid!r} cannot be looked up without a corpus (pass --corpus)",
                            "no-corpus")
        if pid not in corpus:
            raise DataError(path, line, f"passage id {pid!r} is not in {corpus_name}", "unknown-passage")
        return corpus[pid]
    if isinstance(value, str):
        title, text, own = "", check_text(path, line, value, "passage"), None
    elif isinstance(value, dict):
        if value.get("text") is None:
            raise DataError(path, line, f"missing field '{field_}.text'", "missing-field")
        text = check_text(path, line, value["text"], "passage")
        title = value.get("title") or ""
        if not isinstance(title, str):
            raise DataError(path, line, f"field '{field_}.title' must be a string, got {type(title).__name__}", "invalid-type")
        own = id_str(path, line, value["id"], f"{field_}.id") if value.get("id") is not None else None
        if own is not None and pid is not None and own != pid:
            raise DataError(path, line, f"'{field_}.id' {own!r} and '{field_}_id' {pid!r} differ", "invalid-passage")
    else:
        raise DataError(path, line, f"field '{field_}' must be a string or an object, got {type(value).__name__}",
                        "invalid-type")
    return Passage(id=own or pid or stable_id(title, text), text=text, title=title)


def _correction(path, line: int, value: Any, voted: Passage, corpus: Mapping[str, Passage] | None,
                corpus_name: str) -> tuple[str | None, Passage | None]:
    """``(answer, better passage)`` of a ``correction``; any problem is kind ``invalid-correction``."""
    if value is None:
        return None, None
    if isinstance(value, str):
        if not value.strip():
            raise DataError(path, line, "correction: empty answer", "invalid-correction")
        return value.strip(), None
    if not isinstance(value, dict):
        raise DataError(path, line, "correction must be a string (the answer) or an object with 'passage' or "
                        f"'passage_id', got {type(value).__name__}", "invalid-correction")
    unknown = sorted(k for k in value if k not in ("passage", "passage_id"))
    if unknown:
        raise DataError(path, line, f"correction: unknown field {', '.join(map(repr, unknown))} (expected 'passage' or "
                        "'passage_id')", "invalid-correction")
    try:
        better = _passage(path, line, value.get("passage"), value.get("passage_id"), corpus, corpus_name, "correction.")
    except DataError as e:
        raise DataError(path, line, f"correction: {e.reason}", "invalid-correction") from None
    if better.id == voted.id:
        raise DataError(path, line, f"correction: names the passage voted on ({better.id!r})", "invalid-correction")
    return None, better


def parse_record(path, line: int, obj: dict, corpus: Mapping[str, Passage] | None = None,
                 corpus_name: str = "the corpus") -> list[Vote]:
    """The votes of one feedback record (one, or two with a better passage); a bad record raises
    :class:`DataError` ``path:line: what is wrong``."""
    if obj.get("query") is None:
        raise DataError(path, line, "missing field 'query'", "missing-field")
    query = check_text(path, line, obj["query"], "query")
    if obj.get("vote") is None:
        raise DataError(path, line, "missing field 'vote'", "missing-field")
    up = parse_vote(path, line, obj["vote"])
    passage = _passage(path, line, obj.get("passage"), obj.get("passage_id"), corpus, corpus_name)
    when = parse_timestamp(path, line, obj.get("timestamp"))
    voter = _voter(path, line, obj)
    answer, better = _correction(path, line, obj.get("correction"), passage, corpus, corpus_name)
    qkey = normalize_query(query)
    votes = [Vote(qkey, query, passage, voter, up, when, line, answer)]
    if better is not None:
        votes.append(Vote(qkey, query, better, voter, True, when, line, correction=True))
    return votes


# --------------------------------------------------------------------------------------------
# the merge rule


def merge_votes(votes: Iterable[Vote], rule: MergeRule | None = None) -> Merged:
    """Apply the merge rule (module docstring) to parsed votes."""
    rule = rule or MergeRule()
    votes = sorted(votes, key=lambda v: (v.order, v.correction))
    dated = [v.time for v in votes if v.time is not None]
    newest = max(dated) if dated else None
    oldest = min(dated) if dated else None

    def weight(t: float | None) -> float:
        if newest is None or not rule.decays:
            return 1.0
        age_days = (newest - (t if t is not None else oldest)) / DAY
        return 0.5 ** (age_days / rule.half_life_days)

    spelling: dict[str, str] = {}
    answers: dict[str, dict[str, str]] = {}  # qkey -> normalised answer -> first spelling
    passages: dict[str, Passage] = {}
    groups: dict[tuple[str, str], dict[str, Vote]] = {}
    superseded = 0
    for v in votes:
        spelling.setdefault(v.qkey, v.query)
        passages.setdefault(v.passage.id, v.passage)
        if v.answer is not None:
            answers.setdefault(v.qkey, {}).setdefault(normalize_answer(v.answer) or v.answer, v.answer)
        group = groups.setdefault((v.qkey, v.passage.id), {})
        prev = group.get(v.voter)
        if prev is not None:
            superseded += 1
            if _when(v) < _when(prev):
                continue
        group[v.voter] = v

    pairs: list[LabelledPair] = []
    conflicts: list[LabelledPair] = []
    dropped_min_votes = used = 0
    for (qkey, pid), by_voter in groups.items():
        counted = sorted(by_voter.values(), key=lambda v: v.order)
        if len(counted) < rule.min_votes:
            dropped_min_votes += 1
            continue
        ups = [v for v in counted if v.up]
        downs = [v for v in counted if not v.up]
        w_up = sum((weight(v.time) for v in ups), 0.0)
        w_down = sum((weight(v.time) for v in downs), 0.0)
        if w_up + w_down > 0:
            label = w_up / (w_up + w_down)
        else:  # every weight underflowed: the same ratio, ages taken from the group's newest vote
            ref = max(v.time if v.time is not None else oldest for v in counted)
            rel = [0.5 ** ((ref - (v.time if v.time is not None else oldest)) / DAY / rule.half_life_days) for v in counted]
            label = sum(r for r, v in zip(rel, counted) if v.up) / sum(rel)
        times = [v.time for v in counted if v.time is not None]
        meta: dict[str, Any] = {
            "votes_up": len(ups),
            "votes_down": len(downs),
            "voters": len(counted),
            "weight_up": w_up,
            "weight_down": w_down,
            "first_timestamp": format_timestamp(min(times)) if times else None,
            "last_timestamp": format_timestamp(max(times)) if times else None,
        }
        if qkey in answers:
            meta["answers"] = list(answers[qkey].values())
        query = spelling[qkey]
        conflict = abs(label - 0.5) < rule.min_margin - MARGIN_TOLERANCE
        if conflict:
            conflicts.append(LabelledPair(text_query_id(query), query, passages[pid], label, "feedback",
                                          {**meta, "conflict": True}))
            if not rule.keep_conflicts:
                continue
            meta["conflict"] = True
        if rule.hard_labels:
            label = 1.0 if label >= 0.5 else 0.0
        pairs.append(LabelledPair(text_query_id(query), query, passages[pid], label, "feedback", meta))
        used += len(counted)

    def key(p: LabelledPair) -> tuple[str, str]:
        return p.query_id, p.passage.id

    pairs.sort(key=key)
    conflicts.sort(key=key)
    positive = sum(1 for p in pairs if p.label >= 0.5)
    stats = {
        "records": len({v.order for v in votes}),
        "votes": {
            "read": len(votes),
            "from_corrections": sum(1 for v in votes if v.correction),
            "undated": len(votes) - len(dated),
            "superseded": superseded,
            "counted": len(votes) - superseded,
            "used": used,
        },
        "reference_time": format_timestamp(newest),
        "queries": len(spelling),
        "groups": len(groups),
        "pairs": {"written": len(pairs), "positive": positive, "negative": len(pairs) - positive},
        "conflicts": {
            "count": len(conflicts),
            "kept": rule.keep_conflicts,
            "first": [{"query_id": p.query_id, "query": p.query, "passage_id": p.passage.id, "label": p.label}
                      for p in conflicts[:FIRST]],
        },
        "dropped": {"min_votes": dropped_min_votes, "conflicts": 0 if rule.keep_conflicts else len(conflicts)},
        "queries_with_answers": len(answers),
        "parameters": rule.to_dict(),
    }
    return Merged(pairs, conflicts, stats)


def _when(v: Vote) -> tuple[float, int]:
    """Which of one voter's votes is later: the timestamp (undated first), then the line."""
    return (v.time if v.time is not None else -math.inf, v.order)


def merge_feedback(
    records: Iterable[dict],
    half_life_days: float = 30.0,
    min_margin: float = 0.2,
    min_votes: int = 1,
    keep_conflicts: bool = False,
    hard_labels: bool = False,
    corpus: Mapping[str, Passage] | None = None,
    rejects: Rejects | None = None,
    path: str | None = None,
) -> tuple[list[LabelledPair], dict[str, Any]]:
    """Feedback records (dicts, as in the input file) to ``(pairs, stats)`` without files.

    Record ``i`` (1-based) is reported as ``line i`` of ``path`` (``<input>`` when None); bad
    records raise unless ``rejects`` skips them. ``corpus`` maps passage ids to passages for
    records that give only ``passage_id``. The conflicts are in ``stats["conflicts"]``.
    """
    rule = MergeRule(half_life_days, min_margin, min_votes, keep_conflicts, hard_labels)
    rows = ((i, obj, json.dumps(obj, ensure_ascii=False, default=str)) for i, obj in enumerate(records, 1))
    votes = list(parse_rows(path, rows, lambda n, obj: parse_record(path, n, obj, corpus), rejects))
    merged = merge_votes(votes, rule)
    return merged.pairs, merged.stats


# --------------------------------------------------------------------------------------------
# files


def corpus_passages(path: str | Path, fmt: str = PASSAGES, rejects: Rejects | None = None) -> Iterator[Passage]:
    """The passages of a corpus: a Passage JSONL file (``passages``), a BEIR ``corpus.jsonl`` or
    MS MARCO ``collection.tsv`` file (``beir``/``msmarco`` given a file), else ``Source.corpus()``
    of any reader format opened with ``input=path``."""
    from .readers import beir, msmarco
    from .readers.ours import read_passages

    load_all()
    if fmt != PASSAGES and fmt not in FORMATS:
        raise ValueError(f"unknown corpus format {fmt!r}; known: {PASSAGES}, {', '.join(sorted(FORMATS))}")
    p = require_path(path, "corpus")
    if fmt == PASSAGES:
        return read_passages(p, rejects)
    if fmt == "beir" and p.is_file():
        return beir.read_corpus(p, rejects)
    if fmt == "msmarco" and p.is_file():
        return msmarco.read_collection(p, rejects)
    return open_source(fmt, input=p, rejects=rejects).corpus()


def _wanted_ids(path: Path) -> set[str]:
    """Every ``passage_id`` (and correction ``passage_id``) of the input, read leniently: the
    corpus is then loaded for these ids only; the rows are checked properly afterwards."""
    ids: set[str] = set()
    for _, obj, _ in iter_json_lines(path, Rejects(skip_bad=True)):
        corr = obj.get("correction")
        for v in (obj.get("passage_id"), corr.get("passage_id") if isinstance(corr, dict) else None):
            if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip():
                ids.add(str(v).strip())
    return ids


def load_corpus(path: str | Path, fmt: str, wanted: set[str], rejects: Rejects | None = None) -> dict[str, Passage]:
    """The passages of the corpus whose ids are in ``wanted`` (the first one of each id)."""
    out: dict[str, Passage] = {}
    for p in corpus_passages(path, fmt, rejects):
        if p.id in wanted and p.id not in out:
            out[p.id] = p
    return out


@locks_output("args.output", "feedback pairs")  # one run per output (data_prep.locking)
def feedback(args: argparse.Namespace) -> dict[str, Any]:
    """Run the command; returns what is written to ``<output>.meta.json``."""
    rule = MergeRule(args.half_life_days, args.min_margin, args.min_votes, args.keep_conflicts, args.hard_labels)
    if args.corpus_format is not None and args.corpus is None:
        raise ValueError("--corpus-format needs --corpus")
    fmt = args.corpus_format or PASSAGES
    out = Path(args.output)
    if out.exists() and not args.overwrite:
        raise ValueError(f"output exists: {out} (pass --overwrite to replace it)")
    inp = require_path(args.input)
    if args.corpus is not None:
        require_path(args.corpus, "corpus")
    conflicts_path = out.parent / f"{out.name}.conflicts.jsonl"
    rejects_dir = out.parent / f"{out.name}.rejects"
    rejects = None
    if args.skip_bad:
        if rejects_dir.is_dir():  # left by an earlier run of this output: start clean
            shutil.rmtree(rejects_dir)
        rejects = Rejects(skip_bad=True, out_dir=rejects_dir)
    t0 = time.time()
    corpus: dict[str, Passage] | None = None
    wanted: set[str] = set()
    try:
        if args.corpus is not None:
            wanted = _wanted_ids(inp)
            corpus = load_corpus(args.corpus, fmt, wanted, rejects) if wanted else {}
        corpus_name = str(args.corpus)
        rows = iter_json_lines(inp, rejects)
        votes = list(parse_rows(inp, rows, lambda n, obj: parse_record(inp, n, obj, corpus, corpus_name), rejects))
    finally:
        if rejects is not None:
            rejects.close()
    if not votes:
        raise no_records_error(inp, rejects, "feedback records")
    merged = merge_votes(votes, rule)
    st = merged.stats
    if not merged.pairs:
        why = f"{st['groups']} groups: {st['conflicts']['count']} conflicts, {st['dropped']['min_votes']} below --min-votes"
        hint = "; pass --keep-conflicts to write the conflicts" if st["conflicts"]["count"] else ""
        raise DataError(inp, None, f"no pairs to write ({why}){hint}", "no-records")
    n = write_jsonl(out, merged.pairs)
    if merged.conflicts:
        write_jsonl(conflicts_path, merged.conflicts)
    elif conflicts_path.exists():  # left by an earlier run of this output
        conflicts_path.unlink()
    summary = {
        "command": "feedback",
        "input": str(inp),
        "output": str(out),
        "corpus": {"path": str(args.corpus), "format": fmt, "ids_looked_up": len(wanted), "found": len(corpus or {})}
        if args.corpus is not None else None,
        "written": n,
        **st,
        "conflicts_file": str(conflicts_path) if merged.conflicts else None,
        "rejected": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
        "rejects_dir": str(rejects_dir) if rejects is not None and rejects.total else None,
        "seconds": round(time.time() - t0, 3),
    }
    summary["parameters"] = {**summary["parameters"], "skip_bad": bool(args.skip_bad)}
    write_json(out.parent / f"{out.name}.meta.json", summary)
    logger.info("wrote %d feedback pairs to %s", n, out)
    return summary


def run(args: argparse.Namespace) -> int:
    s = feedback(args)
    p, v, c = s["pairs"], s["votes"], s["conflicts"]
    print(f"wrote {p['written']} feedback pairs ({p['positive']} positive, {p['negative']} negative) to {s['output']} "
          f"from {s['records']} records ({v['counted']} votes counted, {v['superseded']} superseded)")
    if c["count"]:
        what = "kept with their soft label" if c["kept"] else "not written"
        print(f"{c['count']} conflicts (|label - 0.5| < {args.min_margin}) {what}; listed in {s['conflicts_file']}")
    if s["dropped"]["min_votes"]:
        print(f"dropped {s['dropped']['min_votes']} groups with fewer than {args.min_votes} voters")
    if args.skip_bad:
        print(rejected_line(s["rejected"], s.get("rejects_dir")))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    load_all()
    p = subparsers.add_parser(
        "feedback",
        help="turn logged user feedback (thumbs up/down) into labelled pairs",
        description="Merge logged feedback votes into LabelledPair JSONL (label_source feedback); "
        "the merge rule is in docs/data.md.",
    )
    p.add_argument("--input", required=True, help="feedback JSONL(.gz), one record a line")
    p.add_argument("--output", required=True, help="LabelledPair JSONL output (.gz compresses)")
    p.add_argument("--corpus", help="corpus to look up records that give only passage_id")
    p.add_argument("--corpus-format", choices=[PASSAGES, *sorted(FORMATS)], metavar="FORMAT",
                   help=f"corpus format: {PASSAGES} (Passage JSONL, the default) or any convert --format "
                   "(its corpus; beir/msmarco also take the corpus file alone)")
    for f in MergeRule.__dataclass_fields__.values():
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, action="store_true", help=f.metadata["help"])
        else:
            kind = int if f.type in ("int", int) else float
            p.add_argument(flag, type=kind, default=f.default, help=f"{f.metadata['help']} (default {f.default})")
    p.add_argument("--skip-bad", action="store_true", help="skip bad rows; keep them in <output>.rejects/")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.set_defaults(func=run)
