"""Corrective RAG's evaluator data: the official pair file, and PopQA with retrieved passages.

Formats
-------
``crag-evaluator``
    The file ``scripts/train_evaluator.py`` of github.com/HuskyInSalt/CRAG trains on
    (``data/popqa/train_popqa.txt``), written by ``scripts/data_process.py``: one pair a line,
    ``question + " [SEP] " + passage + "\\t" + label``. What is accepted, as the official reader
    does (``c, l = line.split("\\t")``; ``int(l.strip())``): exactly one tab; a label of ``0`` or
    ``1`` (surrounding spaces allowed; the trainer maps it to -1/+1 itself, so ``-1`` is rejected);
    the text split at the *first* ``" [SEP] "``. The passage is kept as written (the official
    writer already replaced newlines and tabs by spaces; for PopQA it carries no title).
    Label source ``title-match``: that is how CRAG labelled it. Consecutive lines of one question
    form one query example.

    Empty passages: the official test file has lines whose retrieval returned nothing, written
    ``question + " [SEP] " + "" + "\t" + label`` (``question [SEP] <TAB>0``; a copy whose lines
    were stripped may read ``question [SEP]<TAB>0``: both forms are recognised). What becomes of
    them is an ``empty_passages`` policy: ``"error"`` (the default, and what training readers
    use: a bad row, kind ``empty-passage``, since a :class:`~data_prep.records.Passage` needs
    text), ``"keep"`` (:func:`read_evaluator_lines` gives the line with passage ``""``: a
    retrieval failure to be scored, as the paper scores every line) or ``"skip"`` (left out and
    counted, by :func:`read_evaluator_pairs` and :func:`data_prep.readers.rows.open_pair_rows`).
``popqa``
    PopQA with retrieved contexts as Self-RAG distributes it (``popqa_longtail_w_gs.jsonl``):
    ``question``, ``answers`` (a list, or PopQA's ``possible_answers``, a JSON string of a list),
    ``s_wiki_title``, ``ctxs: [{title, text, [id], [score], ...}]``; a JSON array file works too.
    Two labelling rules: ``rule="title-match"`` (CRAG's: a context is relevant when its title
    equals ``s_wiki_title`` exactly) and ``rule="answer"`` (it contains a gold answer,
    :func:`data_prep.text.contains_answer`; label source ``answer-match``). Like CRAG, only the
    first ``top_k=10`` contexts are used (``top_k=None``: all). A row without contexts (within the
    top k) is a bad row (kind ``no-passages``); one without a matching context has negatives only.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterable, Iterator

from ..io import STRICT, DataError, Rejects, atomic_write, iter_lines, parse_rows, require_path
from ..records import LabelledPair, Passage, QueryExample
from ..text import contains_answer
from . import Source, register_format, register_pairs
from .common import (
    SeenIds,
    check_passages,
    check_text,
    ctx_list,
    ctx_passage,
    dedupe,
    id_str,
    once,
    stable_id,
    str_list,
    text_query_id,
)
from .files import iter_json_records

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
SEP = " [SEP] "
#: what becomes of a line with an empty passage (see the module docstring)
EMPTY_PASSAGES = ("error", "keep", "skip")
RULES = {"title-match": "title-match", "answer": "answer-match"}


# --------------------------------------------------------------------------------------------
# the official evaluator pair file


@dataclass(frozen=True)
class EvaluatorLine:
    """One line of CRAG's evaluator file: ``passage`` is ``""`` where the file has none (policy ``keep``)."""

    line: int
    question: str
    passage: str
    label: float


def check_empty_passages(policy: str) -> str:
    if policy not in EMPTY_PASSAGES:
        raise ValueError(f"unknown empty-passage policy {policy!r}; choose one of {', '.join(EMPTY_PASSAGES)}")
    return policy


def _split_content(path: PathLike, n: int, content: str) -> tuple[str, str]:
    if SEP in content:
        question, passage = content.split(SEP, 1)
        return question, passage
    if content.rstrip().endswith(SEP.rstrip()):  # "question [SEP]": an empty passage whose space was stripped
        return content.rstrip()[: -len(SEP.rstrip())], ""
    raise DataError(path, n, "missing ' [SEP] ' between question and passage", "missing-sep")


def _evaluator_line(path: PathLike, n: int, text: str, empty_passages: str = "error") -> EvaluatorLine:
    fields = text.split("\t")
    if len(fields) != 2:
        raise DataError(
            path, n, f"wrong number of columns: expected 2 tab-separated (question [SEP] passage, label), got {len(fields)}", "columns"
        )
    content, label = fields
    if label.strip() not in ("0", "1"):
        raise DataError(path, n, f"label {label.strip()!r} is not 0 or 1", "invalid-label")
    question, passage = _split_content(path, n, content)
    question = check_text(path, n, question, "query")
    if empty_passages == "keep" and not passage.strip():
        passage = ""
    else:
        passage = check_text(path, n, passage, "passage")
    return EvaluatorLine(n, question, passage, float(label.strip()))


def read_evaluator_lines(path: PathLike, rejects: Rejects | None = None, empty_passages: str = "error") -> Iterator[EvaluatorLine]:
    """Stream CRAG's ``question [SEP] passage<TAB>label`` file line by line; an empty passage is a
    bad row (``"error"``) or kept as ``""`` (``"keep"``). To leave them out, keep them and drop
    them where they can be counted (:func:`read_evaluator_pairs`,
    :func:`data_prep.readers.rows.open_pair_rows`)."""
    if check_empty_passages(empty_passages) == "skip":
        raise ValueError("read_evaluator_lines keeps or refuses empty passages; skip them where they are counted")
    yield from parse_rows(path, iter_lines(path, rejects), lambda n, text: _evaluator_line(path, n, text, empty_passages),
                          rejects)


def read_evaluator_pairs(path: PathLike, rejects: Rejects | None = None, empty_passages: str = "error") -> Iterator[LabelledPair]:
    """Stream CRAG's ``question [SEP] passage<TAB>label`` file as labelled pairs.

    ``empty_passages``: ``"error"`` (a bad row, kind ``empty-passage``) or ``"skip"`` (left out,
    and counted in the log); a labelled pair cannot hold an empty passage, so ``"keep"`` is
    :func:`read_evaluator_lines`' alone."""
    if check_empty_passages(empty_passages) == "keep":
        raise ValueError("a LabelledPair needs passage text: read empty passages with read_evaluator_lines "
                         "(or data_prep.readers.rows.open_pair_rows)")
    skipped = 0
    for ln in read_evaluator_lines(path, rejects, "keep" if empty_passages == "skip" else "error"):
        if not ln.passage:
            skipped += 1
            continue
        yield LabelledPair(
            query_id=text_query_id(ln.question),
            query=ln.question,
            passage=Passage(stable_id("", ln.passage), ln.passage),
            label=ln.label,
            label_source="title-match",
        )
    if skipped:
        logger.info("%s: left out %d lines with an empty passage", path, skipped)


def write_evaluator_pairs(path: PathLike, pairs: Iterable[LabelledPair]) -> int:
    """Atomically write pairs in CRAG's format (what ``train_evaluator.py`` reads); labels must be 0/1."""
    n = 0
    with atomic_write(path) as f:
        for p in pairs:
            if p.label not in (0.0, 1.0):
                raise ValueError(f"pair {p.query_id!r}: CRAG's format holds labels 0 or 1, got {p.label}")
            q = " ".join(p.query.split())
            text = p.passage.text.strip().replace("\n", " ").replace("\t", " ")
            f.write(f"{q}{SEP}{text}\t{int(p.label)}\n")
            n += 1
    return n


def pairs_to_examples(pairs: Iterable[LabelledPair], source: str) -> Iterator[QueryExample]:
    """Consecutive pairs of one query as one example (label >= 0.5 positive, else negative)."""
    cur: QueryExample | None = None
    for p in pairs:
        if cur is None or p.query_id != cur.id:
            if cur is not None:
                yield cur
            cur = QueryExample(p.query_id, p.query, source=source, metadata={"label_source": p.label_source})
        group = cur.positives if p.label >= 0.5 else cur.negatives
        if all(x.id != p.passage.id for x in group):
            group.append(p.passage)
    if cur is not None:
        yield cur


@register_pairs("crag-evaluator")
def _evaluator_pairs(input: PathLike, rejects: Rejects | None = None) -> Iterator[LabelledPair]:
    return read_evaluator_pairs(require_path(input), rejects)


@register_format("crag-evaluator", "CRAG's evaluator training file: question [SEP] passage<TAB>0|1 (input=file)")
def open_crag_evaluator(input: PathLike, rejects: Rejects | None = None) -> Source:
    path = require_path(input)
    rj = once(rejects)
    return Source(
        name="crag-evaluator",
        corpus=lambda: dedupe(p.passage for p in read_evaluator_pairs(path, rj)),
        queries=lambda: pairs_to_examples(read_evaluator_pairs(path, rj), "crag-evaluator"),
        files=[str(path)],
        info={"label_source": "title-match"},
    )


# --------------------------------------------------------------------------------------------
# PopQA with retrieved contexts


def _answers(path: PathLike, n: int, obj: dict) -> list[str]:
    for key in ("answers", "possible_answers"):
        if obj.get(key) is not None:
            return [a for a in str_list(path, n, obj[key], key, allow_json_string=True) if a.strip()]
    return []


def _popqa_row(
    path: PathLike, n: int, obj: dict, rule: str, top_k: int | None, seen: SeenIds
) -> tuple[QueryExample, list[tuple[Passage, float]]]:
    if obj.get("question") is None:
        raise DataError(path, n, "missing field 'question'", "missing-field")
    question = check_text(path, n, obj["question"], "query")
    answers = _answers(path, n, obj)
    title = obj.get("s_wiki_title")
    if rule == "title-match":
        if title is None:
            raise DataError(path, n, "missing field 's_wiki_title' (needed by rule 'title-match')", "missing-field")
        if not isinstance(title, str):
            raise DataError(path, n, "field 's_wiki_title' must be a string", "invalid-type")
    elif not answers:
        raise DataError(path, n, "missing field 'answers' (or 'possible_answers'), needed by rule 'answer'", "missing-field")
    ctxs = ctx_list(path, n, obj, "ctxs", True)
    if top_k is not None:
        ctxs = ctxs[:top_k]
    labelled = []
    for i, c in enumerate(ctxs):
        p = ctx_passage(path, n, c, f"ctxs[{i}]")
        ok = p.title == title if rule == "title-match" else contains_answer(p.text, answers)
        labelled.append((p, 1.0 if ok else 0.0))
    qid = text_query_id(question)
    if obj.get("id") is not None:
        qid = id_str(path, n, obj["id"], "id")
    meta = {"label_source": RULES[rule]}
    if isinstance(title, str) and title:
        meta["s_wiki_title"] = title
    ex = QueryExample(
        id=qid,
        query=question,
        positives=[p for p, y in labelled if y == 1.0],
        negatives=[p for p, y in labelled if y == 0.0],
        answers=answers,
        source="popqa",
        metadata=meta,
    )
    check_passages(path, n, ex, "ctxs is empty")
    if obj.get("id") is not None:
        seen.check(path, n, qid)
    return ex, labelled


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown labelling rule {rule!r}; choose one of {', '.join(RULES)}")


def _popqa_rows(path: PathLike, rule: str, rejects: Rejects | None, top_k: int | None):
    _check_rule(rule)
    seen = SeenIds("query")
    rejects = rejects or STRICT
    for n, obj, raw in iter_json_records(path, rejects):
        try:
            yield _popqa_row(path, n, obj, rule, top_k, seen)
        except DataError as e:
            rejects.reject(e, raw)


def read_popqa(
    path: PathLike, rule: str = "title-match", rejects: Rejects | None = None, top_k: int | None = 10
) -> Iterator[QueryExample]:
    """Stream PopQA rows as query examples labelled by ``rule`` (``title-match`` or ``answer``)."""
    for ex, _ in _popqa_rows(path, rule, rejects, top_k):
        yield ex


def read_popqa_pairs(
    path: PathLike, rule: str = "title-match", rejects: Rejects | None = None, top_k: int | None = 10
) -> Iterator[LabelledPair]:
    """Stream PopQA rows as one labelled pair per context, in retrieval order (``metadata["rank"]``)."""
    for ex, labelled in _popqa_rows(path, rule, rejects, top_k):
        for rank, (p, y) in enumerate(labelled):
            yield LabelledPair(ex.id, ex.query, p, y, RULES[rule], metadata={"rank": rank})


@register_pairs("popqa")
def _popqa_pairs(
    input: PathLike, rule: str = "title-match", rejects: Rejects | None = None, top_k: int | None = 10
) -> Iterator[LabelledPair]:
    _check_rule(rule)
    return read_popqa_pairs(require_path(input), rule, rejects, top_k)


@register_format("popqa", "Self-RAG/PopQA JSONL with ctxs; rule=title-match (CRAG) or answer (input=file, rule)")
def open_popqa(
    input: PathLike, rule: str = "title-match", rejects: Rejects | None = None, top_k: int | None = 10
) -> Source:
    _check_rule(rule)
    path = require_path(input)
    rj = once(rejects)

    def corpus() -> Iterator[Passage]:
        return dedupe(p for _, labelled in _popqa_rows(path, rule, rj, top_k) for p, _ in labelled)

    return Source(
        name="popqa",
        corpus=corpus,
        queries=lambda: read_popqa(path, rule, rj, top_k),
        files=[str(path)],
        info={"rule": rule, "label_source": RULES[rule], "top_k": top_k},
    )
