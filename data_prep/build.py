"""``python -m data_prep build``: turn mined query examples into the three task datasets.

Input: our QueryExample JSONL (the output of ``mine`` or ``convert``) or LabelledPair JSONL with
given labels. Output folder (see docs/data.md)::

    DIR/evaluator/{train,dev}.pairs.jsonl    LabelledPair: positives 1, negatives 0
    DIR/evaluator/{train,dev}.groups.jsonl   QueryExample: 1 positive + (group_size - 1) negatives
    DIR/answer/{train,dev}.pairs.jsonl       LabelledPair: "does this passage contain the answer?"
    DIR/extractor/{train,dev}.pairs.jsonl    LabelledPair: one sentence of a positive passage
    DIR/meta.json, DIR/stats.json            parameters, input sha256, counts, skips; statistics
    DIR/rejects/                             bad input rows (only with --skip-bad)

Everything streams: a query's split comes from a hash of the seed and its id, and every random
choice is seeded from the seed and the query id, so the output depends neither on file order nor
on the other queries in the file. Every file is written atomically; ``meta.json`` is written
last, so a folder without it is incomplete.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import shutil
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Sequence

from tqdm import tqdm

from .io import DataError, Rejects, atomic_write, iter_json_lines, no_records_error, require_nonempty, require_path, write_json
from .locking import locks_output
from .records import LABEL_SOURCES, SCHEMA_VERSION, LabelledPair, Passage, QueryExample, RecordError
from .stats import DatasetStats, format_report
from .tasks import TASK_FILES, TASKS, label_source, seeded_rng
from .tasks.answer import HitsError, answer_groups_example, answer_pairs
from .tasks.answerability import KINDS as HARD_NEGATIVE_KINDS
from .tasks.answerability import SpanPool, hard_negative_pairs, parse_kinds
from .tasks.evaluator import evaluator_groups, evaluator_pairs
from .tasks.extractor import DEFAULT_MAX_CHARS, RationaleError, extractor_pairs

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev")
REJECTS_DIR = "rejects"


class BuildError(ValueError):
    """An input record that is valid JSON and a valid record, but unusable for building."""


@dataclass
class BuildConfig:
    """Parameters of one ``build`` run (recorded verbatim in ``meta.json``)."""

    input: str
    output: str
    #: tasks to build; ``None``: all three for query examples, ``evaluator`` for labelled pairs
    tasks: tuple[str, ...] | None = None
    #: fraction of queries sent to dev (by a hash of the seed and the query id)
    dev_ratio: float = 0.1
    seed: int = 13
    #: evaluator groups: 1 positive + (group_size - 1) negatives
    group_size: int = 8
    #: keep at most this many negatives per query (a seeded sample), for every task
    max_negatives_per_query: int | None = None
    #: a query with fewer than group_size - 1 negatives: ``pad`` (resample) or ``drop`` its groups
    short_groups: str = "pad"
    #: ``query`` (QueryExample), ``pair`` (LabelledPair) or ``auto`` (from the first record)
    input_type: str = "auto"
    #: extractor: sentences longer than this are cut into pieces (as the served extractor does)
    sentence_max_chars: int | None = DEFAULT_MAX_CHARS
    #: answer task: answerability negatives made from each answer-bearing positive, any of
    #: ``removed`` (the answer sentences cut out), ``swapped`` (the answer replaced by a same-type
    #: span: a wrong answer, label 0), ``perturbed`` (the question's entity replaced by one the
    #: passage lacks); a list or a comma string, ``all`` for the three; empty (the default): none,
    #: and the output is what it was without the option (data_prep.tasks.answerability)
    hard_negatives: tuple[str, ...] = ()
    #: answer task: at most this many answerability negatives of each kind per question
    hard_negatives_per_question: int = 1
    skip_bad: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.tasks is not None:
            self.tasks = tuple(self.tasks)
            unknown = [t for t in self.tasks if t not in TASKS]
            if unknown or not self.tasks:
                raise ValueError(f"unknown task(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(TASKS)}")
        if not 0.0 <= self.dev_ratio < 1.0:
            raise ValueError(f"--dev-ratio must be in [0, 1), got {self.dev_ratio}")
        if self.group_size < 2:
            raise ValueError(f"--group-size must be at least 2 (1 positive + 1 negative), got {self.group_size}")
        if self.max_negatives_per_query is not None and self.max_negatives_per_query < 0:
            raise ValueError(f"--max-negatives-per-query must be >= 0, got {self.max_negatives_per_query}")
        if self.short_groups not in ("pad", "drop"):
            raise ValueError(f"--short-groups must be 'pad' or 'drop', got {self.short_groups!r}")
        if self.input_type not in ("auto", "query", "pair"):
            raise ValueError(f"--input-type must be auto, query or pair, got {self.input_type!r}")
        if self.sentence_max_chars is not None and self.sentence_max_chars < 20:
            raise ValueError(f"--sentence-max-chars must be at least 20, got {self.sentence_max_chars}")
        try:
            self.hard_negatives = parse_kinds(self.hard_negatives or ())
        except ValueError as e:
            raise ValueError(f"--hard-negatives: {e}") from None
        if isinstance(self.hard_negatives_per_question, bool) or not isinstance(self.hard_negatives_per_question, int) \
                or self.hard_negatives_per_question < 1:
            raise ValueError(f"--hard-negatives-per-question must be an integer >= 1, got {self.hard_negatives_per_question!r}")


# --------------------------------------------------------------------------------------------
# Deterministic choices


def split_of(query_id: str, seed: int, dev_ratio: float) -> str:
    """``"dev"`` or ``"train"`` from a hash of the seed and the query id (never from file order).

    A query keeps its split when other queries are added or removed; the dev share is
    ``dev_ratio`` in expectation, not exactly.
    """
    digest = hashlib.sha256(f"{seed}\x00{query_id}".encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return "dev" if u < dev_ratio else "train"


def cap_negatives(negatives: list[Passage], limit: int | None, seed: int, query_id: str) -> list[Passage]:
    """At most ``limit`` negatives: a seeded sample that keeps the original (rank) order."""
    if limit is None or len(negatives) <= limit:
        return list(negatives)
    keep = sorted(seeded_rng(seed, query_id, "cap").sample(range(len(negatives)), limit))
    return [negatives[i] for i in keep]


# --------------------------------------------------------------------------------------------
# Reading


def _records_with_lines(path: Path, record_type: type, rejects: Rejects) -> Iterator[tuple[int, bytes, Any]]:
    """Like :func:`data_prep.io.read_records`, but also yields each record's line and raw bytes, so
    that problems found while building are reported as ``file:line`` and rejected unchanged."""
    for n, obj, raw in iter_json_lines(path, rejects):
        try:
            yield n, raw, record_type.from_dict(obj)
        except RecordError as e:
            kind = "missing-field" if "missing field" in str(e) else "invalid-record"
            rejects.reject(DataError(path, n, str(e), kind), raw)


def detect_input_type(path: Path) -> str:
    """``pair`` when the first JSON object has ``query_id`` and ``passage``, else ``query``."""
    peek = Rejects(skip_bad=True)  # bad lines are reported by the real pass, not here
    for _, obj, _ in iter_json_lines(path, peek):
        return "pair" if "query_id" in obj and "passage" in obj else "query"
    return "query"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pair_runs(rows: Iterator[tuple[int, bytes, LabelledPair]]) -> Iterator[list[tuple[int, bytes, LabelledPair]]]:
    """Consecutive rows with the same query id (a query's pairs are expected to be adjacent)."""
    run: list[tuple[int, bytes, LabelledPair]] = []
    for row in rows:
        if run and row[2].query_id != run[0][2].query_id:
            yield run
            run = []
        run.append(row)
    if run:
        yield run


# --------------------------------------------------------------------------------------------
# Writing


class _Sinks:
    """The open output files of one run, with a statistics accumulator per file."""

    def __init__(self, out: Path, tasks: Iterable[str], stack: contextlib.ExitStack):
        self.out = out
        self.files: dict[tuple[str, str, str], IO[str]] = {}
        self.stats: dict[tuple[str, str, str], DatasetStats] = {}
        for task in tasks:
            for kind in TASK_FILES[task]:
                for split in SPLITS:
                    key = (task, kind, split)
                    self.files[key] = stack.enter_context(atomic_write(out / self.relpath(key)))
                    self.stats[key] = DatasetStats()

    @staticmethod
    def relpath(key: tuple[str, str, str]) -> str:
        task, kind, split = key
        return f"{task}/{split}.{kind}.jsonl"

    def write(self, key: tuple[str, str, str], records: Iterable[LabelledPair | QueryExample]) -> None:
        f, acc = self.files[key], self.stats[key]
        for r in records:
            f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
            acc.add(r)

    def nested_stats(self) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        for (task, kind, split), acc in self.stats.items():
            out.setdefault(task, {}).setdefault(kind, {})[split] = acc.result()
        return out


@dataclass
class _Tally:
    """What a run did, for meta.json."""

    records_read: int = 0
    queries: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    skipped: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    groups: Counter[str] = field(default_factory=Counter)
    dropped_negatives: Counter[str] = field(default_factory=Counter)
    #: answerability negatives written, by (negative_kind, split)
    hard_negatives: Counter[tuple[str, str]] = field(default_factory=Counter)
    first_skipped: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def skip(self, task: str, reason: str, query_id: str, n: int = 1) -> None:
        self.skipped[task][reason] += n
        ids = self.first_skipped[f"{task}:{reason}"]
        if len(ids) < 5:
            ids.append(query_id)


def _clean_output(out: Path, overwrite: bool) -> None:
    """Refuse a non-empty folder unless ``overwrite``; then remove only what a build writes."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} exists and is not a folder")
    if not out.exists() or not any(out.iterdir()):
        return
    if not overwrite:
        raise ValueError(f"output folder {out} is not empty; pass --overwrite to replace its dataset files")
    for name in ("meta.json", "stats.json"):
        (out / name).unlink(missing_ok=True)
    for name in (*TASKS, REJECTS_DIR):
        if (out / name).is_dir():
            shutil.rmtree(out / name)


# --------------------------------------------------------------------------------------------
# The run


class _Builder:
    """Routes each example's task records to the right split files."""

    def __init__(self, cfg: BuildConfig, tasks: tuple[str, ...], sinks: _Sinks, tally: _Tally, path: Path,
                 pool: SpanPool | None = None):
        self.cfg, self.tasks, self.sinks, self.tally, self.path = cfg, tasks, sinks, tally, path
        self.pool = pool  # replacements of the answerability negatives (cfg.hard_negatives)

    def _prepare(self, ex: QueryExample) -> QueryExample:
        pos_ids = {p.id for p in ex.positives}
        negs = [p for p in ex.negatives if p.id not in pos_ids]
        if len(negs) < len(ex.negatives):
            self.tally.dropped_negatives["same-id-as-positive"] += len(ex.negatives) - len(negs)
        capped = cap_negatives(negs, self.cfg.max_negatives_per_query, self.cfg.seed, ex.id)
        if len(capped) < len(negs):
            self.tally.dropped_negatives["over-max-negatives-per-query"] += len(negs) - len(capped)
        for p in ex.positives:
            ls = label_source(p, ex)
            if ls not in LABEL_SOURCES:
                raise BuildError(f"passage {p.id!r}: label_source {ls!r} is not one of {', '.join(LABEL_SOURCES)}")
        return QueryExample(ex.id, ex.query, ex.positives, capped, ex.answers, ex.source, ex.metadata)

    def _groups(self, ex: QueryExample, task: str = "evaluator") -> list[QueryExample]:
        groups, notes = evaluator_groups(ex, self.cfg.group_size, self.cfg.seed, self.cfg.short_groups)
        for note, n in notes.items():
            if note.startswith("dropped:"):
                self.tally.skip(f"{task}-groups", note.split(":", 1)[1], ex.id, n)
            else:
                self.tally.groups[note if task == "evaluator" else f"{task}-{note}"] += n
        return groups

    def _answer_outputs(self, pairs: list[LabelledPair], out: dict[tuple[str, str], list],
                        generated: Sequence[LabelledPair] = (), perturbed: Sequence[LabelledPair] = ()) -> None:
        # generated negatives of the question join its groups; perturbed questions (other query
        # ids, no positive) are pairs only, after the question's own pairs
        out[("answer", "pairs")] = [*pairs, *generated, *perturbed]
        if pairs:
            out[("answer", "groups")] = self._groups(answer_groups_example([*pairs, *generated]), "answer")

    def _hard_negatives(self, ex: QueryExample, pairs: list[LabelledPair]) -> tuple[list[LabelledPair], list[LabelledPair]]:
        if not self.cfg.hard_negatives or not pairs:
            return [], []
        same, perturbed, skipped = hard_negative_pairs(ex, pairs, self.cfg.hard_negatives,
                                                       self.cfg.hard_negatives_per_question, self.pool, self.cfg.seed)
        for kind, reason in skipped.items():
            self.tally.skip(kind, reason, ex.id)
        split = split_of(ex.id, self.cfg.seed, self.cfg.dev_ratio)  # the split emit() writes them to
        for p in (*same, *perturbed):
            self.tally.hard_negatives[(p.metadata["negative_kind"], split)] += 1
        return same, perturbed

    def example_outputs(self, ex: QueryExample) -> dict[tuple[str, str], list]:
        """All task records of one query example (computed before anything is written)."""
        ex = self._prepare(ex)
        out: dict[tuple[str, str], list] = {}
        if "evaluator" in self.tasks:
            if ex.positives:
                out[("evaluator", "pairs")] = evaluator_pairs(ex)
            else:
                self.tally.skip("evaluator", "no-positives", ex.id)
            out[("evaluator", "groups")] = self._groups(ex)
        if "answer" in self.tasks:
            pairs, skips = answer_pairs(ex)
            for reason, n in skips.items():
                self.tally.skip("answer", reason, ex.id, n)
            self._answer_outputs(pairs, out, *self._hard_negatives(ex, pairs))
        if "extractor" in self.tasks:
            pairs, skips = extractor_pairs(ex, self.cfg.sentence_max_chars)
            for reason, n in skips.items():
                self.tally.skip("extractor", reason, ex.id, n)
            out[("extractor", "pairs")] = pairs
        return out

    def run_outputs(self, run: list[LabelledPair]) -> dict[tuple[str, str], list]:
        """Task records of one query's given labelled pairs."""
        qid = run[0].query_id
        pos = [p for p in run if p.label >= 0.5]
        neg_pairs = [p for p in run if p.label < 0.5]
        kept = cap_negatives([p.passage for p in neg_pairs], self.cfg.max_negatives_per_query, self.cfg.seed, qid)
        if len(kept) < len(neg_pairs):
            self.tally.dropped_negatives["over-max-negatives-per-query"] += len(neg_pairs) - len(kept)
        kept_ids = {id(p) for p in kept}
        pairs = pos + [p for p in neg_pairs if id(p.passage) in kept_ids]
        out: dict[tuple[str, str], list] = {}
        if "evaluator" in self.tasks:
            out[("evaluator", "pairs")] = pairs
            ex = QueryExample(
                id=qid,
                query=run[0].query,
                positives=[p.passage for p in pos],
                negatives=kept,
                metadata={"label_source": pos[0].label_source if pos else run[0].label_source},
            )
            out[("evaluator", "groups")] = self._groups(ex)
        if "answer" in self.tasks:
            self._answer_outputs(pairs, out)
        return out

    def emit(self, query_id: str, outputs: dict[tuple[str, str], list]) -> None:
        split = split_of(query_id, self.cfg.seed, self.cfg.dev_ratio)
        self.tally.queries[split].add(query_id)
        for (task, kind), records in outputs.items():
            self.sinks.write((task, kind, split), records)

    def guarded(self, line: int, raw: bytes, rejects: Rejects, fn, arg) -> dict | None:
        """``fn(arg)``; a record problem becomes a ``file:line`` reject (raised when strict)."""
        try:
            return fn(arg)
        except (BuildError, RecordError, HitsError, RationaleError) as e:
            rejects.reject(DataError(self.path, line, str(e), "invalid-for-build"), raw)
            return None


@locks_output("cfg.output", "dataset")  # one run per folder (data_prep.locking)
def build(cfg: BuildConfig) -> dict[str, Any]:
    """Build the task datasets described by ``cfg``; returns the content of ``meta.json``."""
    path = require_path(cfg.input, "input file", is_dir=False)
    require_nonempty(path)  # empty-file error (also for a .gz that decompresses to nothing)
    input_type = detect_input_type(path) if cfg.input_type == "auto" else cfg.input_type
    tasks = cfg.tasks or (TASKS if input_type == "query" else ("evaluator",))
    if input_type == "pair" and "extractor" in tasks:
        raise ValueError(
            f"{path}: the extractor task needs query examples (positives and answers); this file holds labelled pairs"
        )
    if cfg.hard_negatives and "answer" not in tasks:
        raise ValueError(f"--hard-negatives makes answer-task negatives; --tasks {','.join(tasks)} has no answer task")
    if cfg.hard_negatives and input_type == "pair":
        raise ValueError(f"{path}: --hard-negatives needs query examples (positives and answers); this file holds labelled pairs")
    out = Path(cfg.output)
    _clean_output(out, cfg.overwrite)
    existed = out.exists()
    logger.info("building %s from %s (%s records) into %s", ",".join(tasks), path, input_type, out)
    try:
        return _build(cfg, path, input_type, tasks, out)
    except BaseException:
        _remove_empty_folders(out, tasks, existed)  # left by the atomic writes; rejects/ stays
        raise


def _remove_empty_folders(out: Path, tasks: Iterable[str], keep_out: bool) -> None:
    for task in tasks:
        with contextlib.suppress(OSError):
            (out / task).rmdir()  # only when empty
    if not keep_out:
        with contextlib.suppress(OSError):
            out.rmdir()


def span_pool(path: Path, cfg: BuildConfig) -> SpanPool:
    """The replacement pool of the answerability negatives: typed answers and question entities of
    the train split's query examples (a first pass; bad rows are left to the real pass)."""
    pool = SpanPool()
    peek = Rejects(skip_bad=True)
    for _, obj, _ in tqdm(iter_json_lines(path, peek), desc="answerability pool", unit="query", disable=None):
        try:
            ex = QueryExample.from_dict(obj)
        except RecordError:
            continue
        if split_of(ex.id, cfg.seed, cfg.dev_ratio) == "train":
            pool.add_example(ex)
    return pool


def _build(cfg: BuildConfig, path: Path, input_type: str, tasks: tuple[str, ...], out: Path) -> dict[str, Any]:
    tally = _Tally()
    pool = span_pool(path, cfg) if cfg.hard_negatives else None
    with Rejects(skip_bad=cfg.skip_bad, out_dir=out / REJECTS_DIR) as rejects, contextlib.ExitStack() as stack:
        sinks = _Sinks(out, tasks, stack)
        builder = _Builder(cfg, tasks, sinks, tally, path, pool)
        record_type = QueryExample if input_type == "query" else LabelledPair
        rows = _records_with_lines(path, record_type, rejects)
        if input_type == "query":
            for n, raw, ex in tqdm(rows, desc="build", unit="query", disable=None):
                tally.records_read += 1
                if not ex.positives and not ex.negatives and not ex.metadata.get("answer_hits"):
                    tally.skip("input", "no-passages", ex.id)  # nothing in it for any task: counted, not emitted
                    continue
                outputs = builder.guarded(n, raw, rejects, builder.example_outputs, ex)
                if outputs is not None:
                    builder.emit(ex.id, outputs)
        else:
            for run in tqdm(_pair_runs(rows), desc="build", unit="query", disable=None):
                tally.records_read += len(run)
                outputs = builder.guarded(run[0][0], run[0][1], rejects, builder.run_outputs, [r[2] for r in run])
                if outputs is not None:
                    builder.emit(run[0][2].query_id, outputs)
        if tally.records_read == 0:  # raised inside the atomic writes: no task file is left
            raise no_records_error(path, rejects)
        stats = sinks.nested_stats()
        file_counts = {sinks.relpath(k): acc.records for k, acc in sinks.stats.items()}
        if not any(file_counts.values()):
            skipped = "; ".join(f"{t}: " + ", ".join(f"{r} {n}" for r, n in sorted(c.items()))
                                for t, c in sorted(tally.skipped.items()))
            raise no_records_error(path, rejects, "task records to write",
                                   f"{tally.records_read} records read, none gave {'/'.join(tasks)} data; skipped: {skipped or 'none'}")
    meta = _meta(cfg, path, input_type, tasks, tally, rejects, stats, file_counts)
    if pool is not None:
        meta["hard_negatives"] = _hard_negatives_meta(cfg, tally, pool)
    _log_summary(tally, cfg)
    write_json(out / "stats.json", stats)
    write_json(out / "meta.json", meta)  # last: its presence marks a complete build
    return meta


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("crag-evaluators")
    except Exception:  # not installed (running from a checkout)
        return "unknown"


def _meta(cfg, path, input_type, tasks, tally, rejects, stats, file_counts) -> dict[str, Any]:
    counts = {
        task: {split: {kind: stats[task][kind][split]["records"] for kind in TASK_FILES[task]} for split in SPLITS}
        for task in tasks
    }
    params = {k: v for k, v in asdict(cfg).items() if k not in ("input", "output", "overwrite")}
    params["tasks"] = list(tasks)
    params["input_type"] = input_type
    if not cfg.hard_negatives:  # off: meta.json as it was before the option existed
        params.pop("hard_negatives")
        params.pop("hard_negatives_per_question")
    else:
        params["hard_negatives"] = list(cfg.hard_negatives)
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "data_prep build",
        "package_version": _package_version(),
        "input": {"path": str(path), "sha256": file_sha256(path), "bytes": path.stat().st_size, "record_type": input_type},
        "parameters": params,
        "records_read": tally.records_read,
        "queries": {s: len(tally.queries[s]) for s in SPLITS},
        "counts": counts,
        "files": file_counts,
        "skipped": {task: dict(sorted(c.items())) for task, c in sorted(tally.skipped.items())},
        "skipped_examples": {k: v for k, v in sorted(tally.first_skipped.items())},
        "groups": {"padded": tally.groups["padded"], "answer_padded": tally.groups["answer-padded"]},
        "dropped_negatives": dict(sorted(tally.dropped_negatives.items())),
        "rejects": {**rejects.summary(), "dir": REJECTS_DIR if rejects.total else None},
    }


def _hard_negatives_meta(cfg: BuildConfig, tally: _Tally, pool: SpanPool) -> dict[str, Any]:
    """``meta["hard_negatives"]``: pairs written per kind and split (the reasons of the questions
    that gave none are in ``skipped[kind]``), and the replacement pool's size per span type."""
    made = {}
    for short in cfg.hard_negatives:
        kind = HARD_NEGATIVE_KINDS[short]
        per_split = {s: tally.hard_negatives[(kind, s)] for s in SPLITS}
        made[kind] = {**per_split, "total": sum(per_split.values())}
    return {"kinds": [HARD_NEGATIVE_KINDS[k] for k in cfg.hard_negatives], "per_question": cfg.hard_negatives_per_question,
            "made": made, "skipped": {HARD_NEGATIVE_KINDS[k]: dict(sorted(tally.skipped.get(HARD_NEGATIVE_KINDS[k], {}).items()))
                                      for k in cfg.hard_negatives},
            "pool": pool.sizes()}


def _log_summary(tally: _Tally, cfg: BuildConfig) -> None:
    for task, reasons in sorted(tally.skipped.items()):
        for reason, n in sorted(reasons.items()):
            ids = ", ".join(tally.first_skipped[f"{task}:{reason}"])
            logger.warning("%s: skipped %d (%s), e.g. %s", task, n, reason, ids)
    for (kind, split), n in sorted(tally.hard_negatives.items()):
        logger.info("answer: %d %s negatives in %s", n, kind, split)
    if tally.groups["padded"]:
        logger.info("evaluator groups: %d padded by resampling negatives", tally.groups["padded"])
    if cfg.dev_ratio > 0 and not tally.queries["dev"]:
        logger.warning("dev split is empty: too few queries for --dev-ratio %s", cfg.dev_ratio)


# --------------------------------------------------------------------------------------------
# CLI


def _tasks_arg(value: str) -> tuple[str, ...]:
    tasks = tuple(t.strip() for t in value.split(",") if t.strip())
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise argparse.ArgumentTypeError(f"unknown task(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(TASKS)}")
    return tasks


def _hard_negatives_arg(value: str) -> tuple[str, ...]:
    try:
        kinds = parse_kinds(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not kinds:
        raise argparse.ArgumentTypeError(f"no kind given; choose from {', '.join(HARD_NEGATIVE_KINDS)} (or all)")
    return kinds


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "build",
        help="build evaluator / answer-existence / extractor datasets from query examples",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("--input", required=True, help="QueryExample or LabelledPair JSONL (.gz allowed)")
    p.add_argument("--output", required=True, help="output folder (must be empty unless --overwrite)")
    p.add_argument("--tasks", type=_tasks_arg, default=None,
                   help="comma list of evaluator,answer,extractor (default: all for query examples, evaluator for pairs)")
    p.add_argument("--dev-ratio", type=float, default=0.1, help="share of queries in dev (by query id hash)")
    p.add_argument("--seed", type=int, default=13, help="seed of the split and of every sample")
    p.add_argument("--group-size", type=int, default=8, help="evaluator groups: 1 positive + group_size-1 negatives")
    p.add_argument("--max-negatives-per-query", type=int, default=None, help="keep a seeded sample of at most N negatives")
    p.add_argument("--short-groups", choices=("pad", "drop"), default="pad",
                   help="queries with too few negatives for a group: pad by resampling (default) or drop")
    p.add_argument("--input-type", choices=("auto", "query", "pair"), default="auto", help="record type of --input")
    p.add_argument("--sentence-max-chars", type=int, default=DEFAULT_MAX_CHARS,
                   help="extractor: cut sentences longer than this into pieces (the served extractor's splitter)")
    p.add_argument("--hard-negatives", type=_hard_negatives_arg, default=(), metavar="KINDS",
                   help="answer task: also make answerability negatives from each answer-bearing positive, a comma list "
                        "of removed (answer sentences cut out), swapped (answer replaced by a same-type span), perturbed "
                        "(the question's entity replaced), or all; label 0 (default: none)")
    p.add_argument("--hard-negatives-per-question", type=int, default=1, metavar="N",
                   help="answer task: at most N answerability negatives of each kind per question (default 1)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count bad rows (written to OUTPUT/rejects/)")
    p.add_argument("--overwrite", action="store_true", help="replace the dataset files of a non-empty OUTPUT")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    cfg = BuildConfig(
        input=args.input,
        output=args.output,
        tasks=args.tasks,
        dev_ratio=args.dev_ratio,
        seed=args.seed,
        group_size=args.group_size,
        max_negatives_per_query=args.max_negatives_per_query,
        short_groups=args.short_groups,
        input_type=args.input_type,
        sentence_max_chars=args.sentence_max_chars,
        hard_negatives=args.hard_negatives,
        hard_negatives_per_question=args.hard_negatives_per_question,
        skip_bad=args.skip_bad,
        overwrite=args.overwrite,
    )
    build(cfg)
    stats = json.loads((Path(cfg.output) / "stats.json").read_text(encoding="utf-8"))
    print(format_report(stats))
    return 0
