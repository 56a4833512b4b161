"""One labelling run: read the pairs, skip what the output folder already holds, ask the backend for
the rest with bounded concurrency, validate each reply (asking again with the error shown when it is
not the requested JSON), append each result as it arrives, and write the summary.

The cache key of an item is ``sha256`` of (backend kind, model, prompt id, prompt version, task,
query, passage title and text, and the given sentences for the ``sentences`` task): the same pair
asked the same way is never asked twice, across reruns and within one input (a repeated pair is
labelled once and counted as a duplicate).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..io import DataError, Rejects
from ..locking import locks_output
from ..records import LabelledPair, Passage
from ..text import Sentence, sentence_spans
from .agreement import agreement
from .answers import Answer, AnswerError, parse_answer
from .backends import BackendError
from .prompts import Prompt, load_prompt, messages, repair
from .store import LabelStore

logger = logging.getLogger(__name__)

READER_OPTIONS = ("corpus", "queries", "qrels", "split", "rule", "fix_mojibake")


@dataclass
class LabelConfig:
    """What ``python -m data_prep label`` takes (see its ``--help``)."""

    input: str
    output: str
    task: str = "relevance"
    format: str = "auto"
    samples: int = 1
    temperature: float | None = None  # None: 0 for one sample, 0.7 for several
    max_answer_retries: int = 2
    prompt_file: str | None = None
    gold: str | None = None
    gold_format: str = "auto"
    use_input_gold: bool = True
    relevant_grade: float = 2.0
    sentence_max_chars: int = 600
    limit: int | None = None
    skip_bad: bool = False
    progress: bool = True
    reader_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"--samples must be at least 1, got {self.samples}")
        if self.max_answer_retries < 0:
            raise ValueError("--max-answer-retries must be >= 0")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ValueError(f"--temperature must be in [0, 2], got {self.temperature}")
        if not 0 <= self.relevant_grade <= 3:
            raise ValueError(f"--relevant-grade must be in [0, 3], got {self.relevant_grade}")

    @property
    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.samples == 1 else 0.7


@dataclass
class Item:
    """One thing to ask: a pair (and, for the sentences task, its numbered sentences)."""

    key: str
    query_id: str
    query: str
    passage_id: str
    title: str
    text: str
    gold: float | None = None
    sentences: list[Sentence] | None = None
    gold_sentences: set[int] | None = None

    def input_record(self) -> dict[str, Any]:
        return {"query_id": self.query_id, "query": self.query, "passage_id": self.passage_id, "title": self.title,
                "text": self.text}


class ItemFailure(Exception):
    def __init__(self, reason: str, message: str, raw: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.raw = raw


def cache_key(backend_kind: str, model: str, prompt: Prompt, query: str, title: str, text: str,
              sentences: list[str] | None = None) -> str:
    parts = [backend_kind, model, prompt.id, prompt.version, prompt.task, query, title, text]
    if sentences is not None:
        parts.append(sentences)
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# input


def _given_sentences(texts: list[str]) -> tuple[str, list[Sentence]]:
    """Given sentences as one parent text (joined by a space) with their offsets in it."""
    out, pos = [], 0
    for t in texts:
        out.append(Sentence(t, pos, pos + len(t)))
        pos += len(t) + 1
    return " ".join(texts), out


def read_items(cfg: LabelConfig, backend_kind: str, model: str, prompt: Prompt, rejects: Rejects | None,
               counts: Counter[str]) -> tuple[str, list[Item]]:
    """The input's format and its items, duplicates removed (counted), in input order."""
    from ..readers.rows import open_pair_rows
    from ..readers.simple import SENTENCES, read_sentence_rows

    items: list[Item] = []
    seen: set[str] = set()

    def add(item: Item) -> None:
        counts["read"] += 1
        if item.key in seen:
            counts["duplicate-input"] += 1
            return
        seen.add(item.key)
        items.append(item)

    from ..readers.rows import resolve_format

    fmt = resolve_format(cfg.input, cfg.format)
    if fmt == SENTENCES:
        if cfg.task != "sentences":
            raise ValueError(f"{cfg.input}: gold key-sentence rows (format 'sentences') are for --task sentences")
        if cfg.reader_options:
            raise ValueError("format 'sentences' takes no reader options")
        for r in read_sentence_rows(cfg.input, rejects):
            if r.sentences is None:
                text, sents = r.passage, sentence_spans(r.passage, cfg.sentence_max_chars)
                gold = {i for i, s in enumerate(sents) if any(min(s.end, b) > max(s.start, a) for a, b in r.gold_spans)}
            else:
                text, sents = _given_sentences(r.sentences)
                gold = set(r.gold)
            from ..readers.common import stable_id

            key = cache_key(backend_kind, model, prompt, r.query, "", text, [s.text for s in sents])
            add(Item(key, r.query_id, r.query, stable_id("", text), "", text, None, sents, gold))
            if cfg.limit and len(items) >= cfg.limit:
                break
        return fmt, items
    fmt, rows = open_pair_rows(cfg.input, fmt, rejects, empty_passages="keep", **cfg.reader_options)
    from ..readers.common import stable_id

    for r in rows:
        if isinstance(r.passage, Passage):
            title, text, pid = r.passage.title, r.passage.text, r.passage.id
        else:
            title, text = "", r.passage
            pid = r.passage_id or stable_id("", text)
        if not text.strip():  # CRAG's evaluator file: a retrieval that returned nothing
            counts["read"] += 1
            counts["empty-passage"] += 1
            continue
        sents = None
        if cfg.task == "sentences":
            sents = sentence_spans(text, cfg.sentence_max_chars)
        key = cache_key(backend_kind, model, prompt, r.query, title, text, [s.text for s in sents] if sents else None)
        add(Item(key, r.query_id, r.query, pid, title, text, r.label, sents))
        if cfg.limit and len(items) >= cfg.limit:
            break
    return fmt, items


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def read_gold(path: str, fmt: str, rejects: Rejects | None) -> dict[tuple[str, str], float]:
    """Gold labels keyed by (normalised query, normalised passage text)."""
    from ..readers.rows import open_pair_rows

    out: dict[tuple[str, str], float] = {}
    _, rows = open_pair_rows(path, fmt, rejects, empty_passages="skip")
    for r in rows:
        if r.label is None:
            raise DataError(path, None, f"gold pair of query {r.query_id!r} has no label", "missing-field")
        text = r.passage.text if isinstance(r.passage, Passage) else r.passage
        out[(_norm(r.query), _norm(text))] = float(r.label)
    if not out:
        raise DataError(path, None, "no gold pairs", "empty")
    return out


# --------------------------------------------------------------------------------------------
# results


def _mode_share(values: list[Any]) -> float:
    return Counter(values).most_common(1)[0][1] / len(values)


def label_records(item: Item, answers: list[Answer], cfg: LabelConfig, prompt: Prompt, backend_kind: str,
                  model: str, fmt: str) -> list[dict[str, Any]]:
    """The :class:`LabelledPair` lines of one labelled item (``metadata["llm"]`` for the audit)."""
    llm = {"key": item.key, "lines": 1, "backend": backend_kind, "model": model, "prompt_id": prompt.id,
           "prompt_version": prompt.version, "task": cfg.task, "samples": len(answers),
           "temperature": cfg.sampling_temperature, "reasons": [a.reason for a in answers],
           "raw": [a.raw for a in answers]}
    base_meta: dict[str, Any] = {"source_format": fmt}
    if item.gold is not None:
        base_meta["input_label"] = item.gold
    if cfg.task in ("relevance", "answer"):
        values = [int(a.value) for a in answers]
        mean = sum(values) / len(values)
        if cfg.task == "relevance":
            llm.update(grade=values[0] if len(values) == 1 else None, grades=values, grade_mean=mean,
                       agreement=_mode_share(values))
            label = mean / 3.0
        else:
            llm.update(answers=values, agreement=_mode_share(values))
            label = mean
        p = LabelledPair(item.query_id, item.query, Passage(item.passage_id, item.text, item.title), label, "llm",
                         {**base_meta, "llm": llm})
        return [p.to_dict()]
    sents = item.sentences or []
    picks = [set(a.value) for a in answers]
    llm.update(lines=len(sents), key_sentences=[sorted(p) for p in picks],
               agreement=sum(_mode_share([i in p for p in picks]) for i in range(len(sents))) / max(1, len(sents)))
    out = []
    for i, s in enumerate(sents):
        label = sum(i in p for p in picks) / len(picks)
        sp = Passage(f"{item.passage_id}#s{i}", s.text, item.title,
                     {"parent_id": item.passage_id, "sentence_index": i, "start": s.start, "end": s.end,
                      "parent_text": item.text})
        meta = {**base_meta, "llm": llm if i == 0 else {"key": item.key, "lines": len(sents), "line": i}}
        if item.gold_sentences is not None:
            meta["input_label"] = float(i in item.gold_sentences)
        out.append(LabelledPair(item.query_id, item.query, sp, label, "llm", meta).to_dict())
    return out


def decisions(task: str, lines: list[dict[str, Any]], relevant_grade: float) -> tuple[list[int], list[float] | None]:
    """The LLM's binary decision(s) of one item (one per sentence for the sentences task) and, for
    relevance, its mean grade."""
    if task == "relevance":
        g = lines[0]["metadata"]["llm"]["grade_mean"]
        return [int(g >= relevant_grade)], [g]
    return [int(x["label"] >= 0.5) for x in lines], None


# --------------------------------------------------------------------------------------------
# the run


class Labeller:
    def __init__(self, cfg: LabelConfig, backend, prompt: Prompt | None = None):
        self.cfg = cfg
        self.backend = backend
        self.prompt = prompt or load_prompt(cfg.task, cfg.prompt_file)
        self.model = getattr(backend, "model_name", None) or backend.model
        self.store = LabelStore(cfg.output)
        self.counts: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.answer_retries = 0
        self.done_now = 0

    def settings(self) -> dict[str, Any]:
        return {"task": self.cfg.task, "backend": self.backend.kind, "model": self.model,
                "prompt_id": self.prompt.id, "prompt_version": self.prompt.version}

    async def ask(self, item: Item) -> list[Answer]:
        """The item's ``samples`` valid answers, or :class:`ItemFailure`."""
        n = len(item.sentences) if item.sentences is not None else None
        if item.sentences is not None and not item.sentences:
            raise ItemFailure("no-sentences", "the passage has no sentence")
        answers = []
        for _ in range(self.cfg.samples):
            msgs = messages(self.prompt, item.query, item.title, item.text, item.sentences)
            for attempt in range(self.cfg.max_answer_retries + 1):
                try:
                    comp = await self.backend.complete(msgs, self.cfg.sampling_temperature)
                except BackendError as e:
                    if e.fatal:
                        raise
                    raise ItemFailure(e.reason, str(e)) from None
                try:
                    answers.append(parse_answer(self.cfg.task, comp.text, n))
                    break
                except AnswerError as e:
                    if attempt == self.cfg.max_answer_retries:
                        raise ItemFailure("invalid-answer", f"{e} (after {attempt + 1} replies)", comp.text) from None
                    self.answer_retries += 1
                    msgs = msgs + [{"role": "assistant", "content": comp.text},
                                   {"role": "user", "content": repair(self.prompt, str(e))}]
        return answers

    async def _work(self, queue: asyncio.Queue, fmt: str, results: dict[str, list[dict[str, Any]]], bar) -> None:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                answers = await self.ask(item)
            except ItemFailure as f:
                self.failed[f.reason] += 1
                self.store.append_failure({"key": item.key, "input": item.input_record(), "reason": f.reason,
                                           "message": self.backend.redact(str(f)),
                                           "last_raw_response": f.raw, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            else:
                lines = label_records(item, answers, self.cfg, self.prompt, self.backend.kind, self.model, fmt)
                self.store.append_labels(lines)
                results[item.key] = lines
                self.done_now += 1
            if bar is not None:
                bar.update(1)

    async def run_async(self) -> dict[str, Any]:
        cfg = self.cfg
        t0 = time.time()
        rejects = Rejects(skip_bad=True, out_dir=Path(cfg.output) / "rejects") if cfg.skip_bad else None
        try:
            fmt, items = read_items(cfg, self.backend.kind, self.model, self.prompt, rejects, self.counts)
            gold_map = read_gold(cfg.gold, cfg.gold_format, rejects) if cfg.gold else None
        finally:
            if rejects is not None:
                rejects.close()
        if not items:
            detail = f" ({self.counts['empty-passage']} empty passages)" if self.counts["empty-passage"] else ""
            raise DataError(cfg.input, None, "no pairs to label" + detail, "empty")
        self.store.check_settings(self.settings())
        resume = self.store.open()
        keys = {it.key for it in items}
        results: dict[str, list[dict[str, Any]]] = {k: v for k, v in resume.done.items() if k in keys}
        todo = [it for it in items if it.key not in results]
        retried = [k for k in resume.failures if k in keys]
        self.store.keep_failures([rec for k, rec in resume.failures.items() if k not in keys])
        logger.info("%d pairs to label: %d already in %s, %d to ask (%d failed before)", len(items), len(results),
                    cfg.output, len(todo), len(retried))

        queue: asyncio.Queue = asyncio.Queue()
        for it in todo:
            queue.put_nowait(it)
        bar = None
        if cfg.progress and todo:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc=f"labelling ({cfg.task})", unit=" pairs", mininterval=1.0)
        aborted = None
        t_ask = time.time()
        try:
            async with self.backend:
                workers = [asyncio.create_task(self._work(queue, fmt, results, bar))
                           for _ in range(max(1, min(self.backend.concurrency, len(todo))))]
                try:
                    pending = set(workers)
                    while pending:
                        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                        for w in finished:
                            if w.exception() is not None:
                                raise w.exception()
                except BackendError as e:
                    aborted = e
                finally:
                    for w in workers:
                        w.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
        finally:
            if bar is not None:
                bar.close()
            self.store.close()
        asked_s = time.time() - t_ask
        summary = self.summary(items, results, resume, retried, fmt, gold_map, time.time() - t0, asked_s, rejects)
        if aborted is not None:
            summary["aborted"] = {"reason": aborted.reason, "message": self.backend.redact(str(aborted))}
        self.store.write_summary(summary)
        if aborted is not None:
            raise BackendError(aborted.reason, self.backend.redact(str(aborted)), fatal=True)
        return summary

    def run(self) -> dict[str, Any]:
        return asyncio.run(self.run_async())

    def summary(self, items: list[Item], results: dict[str, list[dict[str, Any]]], resume, retried: list[str],
                fmt: str, gold_map, wall: float, asked_s: float, rejects: Rejects | None) -> dict[str, Any]:
        cfg, st = self.cfg, self.backend.stats
        # items neither labelled nor failed were not asked (a run stopped by a fatal server error)
        not_asked = len(items) - len(results) - sum(self.failed.values())
        cached = len(results) - self.done_now
        gold_source = None
        gold, llm, grades = [], [], []
        for it in items:
            lines = results.get(it.key)
            if lines is None:
                continue
            dec, gr = decisions(cfg.task, lines, cfg.relevant_grade)
            if cfg.task == "sentences":
                if it.gold_sentences is None:
                    continue
                gold.extend(float(i in it.gold_sentences) for i in range(len(dec)))
                llm.extend(dec)
                gold_source = "input"
                continue
            g = None
            if gold_map is not None:
                g = gold_map.get((_norm(it.query), _norm(it.text)))
                gold_source = cfg.gold
            elif cfg.use_input_gold and it.gold is not None:
                g = it.gold
                gold_source = f"labels in the input ({fmt})"
            if g is None:
                continue
            gold.append(g)
            llm.extend(dec)
            if gr is not None:
                grades.extend(gr)
        labels: dict[str, Any] = {}
        all_lines = [ln for it in items for ln in results.get(it.key, [])]
        if cfg.task == "relevance":
            labels["by_grade"] = dict(sorted(Counter(f"{ln['metadata']['llm']['grade_mean']:g}" for ln in all_lines).items()))
        labels["positive"] = sum(1 for ln in all_lines if ln["label"] >= 0.5)
        labels["negative"] = len(all_lines) - labels["positive"]
        return {
            "task": cfg.task,
            "input": str(cfg.input),
            "format": fmt,
            "output": str(cfg.output),
            "backend": self.backend.report(),
            "prompt": {"id": self.prompt.id, "version": self.prompt.version, "file": self.prompt.path,
                       "sha256": self.prompt.sha256},
            "samples": cfg.samples,
            "temperature": cfg.sampling_temperature,
            "pairs": len(items),
            "read": self.counts["read"],
            "done": self.done_now,
            "cached": cached,
            "failed": dict(sorted(self.failed.items())),
            "failed_total": sum(self.failed.values()),
            "not_asked": max(0, not_asked),
            "skipped": {k: self.counts[k] for k in ("empty-passage", "duplicate-input") if self.counts[k]},
            "rejected": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
            "resume": {"partial_lines_dropped": resume.partial_lines_dropped,
                       "failure_lines_dropped": resume.failure_lines_dropped,
                       "earlier_failures_asked_again": len(retried)},
            "requests": st.requests,
            "retries": st.retries,
            "answer_retries": self.answer_retries,
            "tokens": {"in": st.tokens_in, "out": st.tokens_out},
            "wall_seconds": round(wall, 3),
            "pairs_per_s": round(self.done_now / asked_s, 3) if asked_s > 0 and self.done_now else None,
            "labels": labels,
            "agreement": ({"gold": gold_source, **agreement(gold, llm, grades if cfg.task == "relevance" else None),
                           **({"relevant_grade": cfg.relevant_grade} if cfg.task == "relevance" else {})}
                          if gold else None),
        }


@locks_output("cfg.output", "labelling output")  # one run per folder (data_prep.locking)
def label(cfg: LabelConfig, backend, prompt: Prompt | None = None) -> dict[str, Any]:
    """Run one labelling job (see :class:`Labeller`); returns the summary also written to
    ``summary.json``."""
    return Labeller(cfg, backend, prompt).run()
