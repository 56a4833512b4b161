"""SQuAD in its official JSON layout (v1.1 and v2.0).

Format ``squad`` (``input=FILE``, ``.json`` or ``.json.gz``)::

    {"version": "1.1" | "v2.0" (optional),
     "data": [{"title": "University_of_Notre_Dame",
               "paragraphs": [{"context": "...",
                               "qas": [{"id": "...", "question": "...",
                                        "answers": [{"text": "...", "answer_start": 515}],
                                        "is_impossible": false,            (v2.0)
                                        "plausible_answers": [...]}]}]}]}   (v2.0, impossible)

Records
-------
Corpus: one :class:`~data_prep.records.Passage` per paragraph. ``id`` is
:func:`~data_prep.readers.common.stable_id` of the passage's title and text (content-derived,
so the same paragraph gets the same id in every read and every file), ``title`` is the article
title with ``_`` replaced by spaces, ``text`` is the context exactly as given (the answer offsets
index into it) and ``metadata`` is ``{"article": <raw title>, "paragraph_index": k}``. A paragraph
whose title and context repeat an earlier one of the file (the real v1.1 file has one, in
``Human_Development_Index``) is the same passage: it is yielded once (with the first one's
``paragraph_index``), its questions point to that passage, and it is counted in
``Source.info["duplicate_paragraphs"]``.

Queries: one :class:`~data_prep.records.QueryExample` per question, ``source="squad"``: ``id``
the question's ``id``, ``query`` the question stripped of surrounding whitespace, ``answers``
the distinct non-empty answer texts in file order, ``positives`` the paragraph's passage with
``metadata["answer_spans"] = [[start, end], ...]`` (the distinct character spans of the
answers in ``text``, end exclusive, in file order; ``text[start:end]`` is one of ``answers``)
and ``metadata = {}``. A v2.0 question with ``is_impossible: true`` has no positives, the
paragraph as its one negative (an on-topic passage that does not answer), no answers and
``metadata = {"is_impossible": True, "plausible_answers": [distinct non-empty texts]}``.

Validation
----------
Errors read ``file:line: data[i].paragraphs[k].qas[j]: what is wrong``: the line is where that
JSON value starts (official files are one line, so it is 1 there; the JSON path says where).
Whole-file problems always raise (``--skip-bad`` cannot skip them): a truncated or corrupt
``.gz`` (the shared ``corrupt-gzip`` error of :func:`data_prep.io.open_binary`), an empty file
(``empty input file: no records``), bytes that are not UTF-8, invalid or truncated JSON, no
top-level ``data`` list. Unit
problems go to the ``rejects`` policy; with ``skip_bad`` the unit is skipped, counted, and its
JSON text kept unchanged in the rejects file:

* article (the whole article is skipped): not an object, no ``title`` or an empty one, no
  ``paragraphs`` list;
* paragraph (it and its questions are skipped): not an object, no ``context`` or an empty one,
  no ``qas`` list;
* question: not an object, no ``id``, no ``question`` or an empty one, a duplicate ``id``
  (the later one is rejected), ``answers`` not a list, an answer without ``text`` or
  ``answer_start``, an ``answer_start`` that is not an integer, an answer text that is not
  ``context[answer_start:answer_start + len(text)]`` (kind ``answer-span``; the same checks
  apply to ``plausible_answers``), ``is_impossible`` that is not a boolean, an impossible
  question with answers, and an answerable question without a non-empty answer (``no-answers``).

Answers whose text is empty (or only whitespace) are ignored; their number is logged as a
warning and kept in ``Source.info["empty_answers"]``. ``Source.info`` also gets ``version``,
``articles``, ``paragraphs``, ``passages``, ``duplicate_paragraphs``, ``questions``,
``impossible`` and ``answers`` (non-empty answer entries) once a ``corpus()`` or ``queries()``
read has run to the end; counts are of the units read (rejected ones excluded).

The file is loaded whole with :func:`json.loads` (SQuAD v2.0 train is 40 MB). Only when there
is something to report is it parsed a second time, by a position-tracking parser, to find the
line and the exact text of the bad unit.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from ..io import DataError, Rejects, empty_file_error, open_binary, require_path
from ..records import Passage, QueryExample
from . import Source, register_format
from .common import OnceRejects, id_str, reject_or_raise, stable_id

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
Loc = tuple  # a JSON path: ("data", 3, "paragraphs", 2, "qas", 5)


def format_loc(loc: Loc) -> str:
    """``("data", 3, "paragraphs", 2)`` -> ``data[3].paragraphs[2]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number"}.get(type(v), type(v).__name__)


class _Bad(Exception):
    """A problem at ``loc``; turned into a :class:`DataError` with the file's line by the walk."""

    def __init__(self, loc: Loc, reason: str, kind: str):
        super().__init__(reason)
        self.loc, self.reason, self.kind = loc, reason, kind


# --------------------------------------------------------------------------------------------
# loading


def _load(path: Path) -> tuple[str, Any]:
    """The file's text and parsed JSON; every failure is a :class:`DataError` naming the file."""
    with open_binary(path) as f:  # a truncated or corrupt .gz raises DataError (corrupt-gzip) here
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(path, line, f"invalid UTF-8 byte 0x{data[e.start]:02x} (byte offset {e.start})", "encoding") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise empty_file_error(path, "expected SQuAD JSON")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            reason = f"the JSON ends early: the file is truncated ({e.msg}: line {e.lineno} column {e.colno})"
        else:
            reason = f"invalid JSON ({e.msg}: line {e.lineno} column {e.colno})"
        raise DataError(path, e.lineno, reason, "invalid-json") from None
    return text, obj


class _PositionDecoder(json.JSONDecoder):
    """A decoder whose object and array parsers record ``id(value) -> (start, end)`` offsets of
    every object and array (for :func:`json.scanner.py_make_scanner`, the pure-Python scanner)."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: dict[int, tuple[int, int]] = {}
        self.parse_object = self._object
        self.parse_array = self._array

    def _object(self, s_and_end, *args):
        obj, end = json.decoder.JSONObject(s_and_end, *args)
        self.spans[id(obj)] = (s_and_end[1] - 1, end)
        return obj, end

    def _array(self, s_and_end, *args):
        arr, end = json.decoder.JSONArray(s_and_end, *args)
        self.spans[id(arr)] = (s_and_end[1] - 1, end)
        return arr, end


class _Positions:
    """Line and exact text of a JSON path, from a second, position-tracking parse (built on the
    first error of a read; a valid file never pays for it)."""

    def __init__(self, text: str):
        self.text = text
        dec = _PositionDecoder()
        self.root, _ = json.scanner.py_make_scanner(dec)(text, len(text) - len(text.lstrip()))
        self.spans = dec.spans  # ids stay valid: self.root keeps every value alive
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def span(self, loc: Loc) -> tuple[int, int] | None:
        """Offsets of the innermost object or array on ``loc``."""
        node, best = self.root, self.spans.get(id(self.root))
        for part in loc:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                break
            best = self.spans.get(id(node), best)
        return best

    def line(self, loc: Loc) -> int | None:
        s = self.span(loc)
        return None if s is None else bisect.bisect_left(self.newlines, s[0]) + 1

    def raw(self, loc: Loc) -> str | None:
        """The text of the value at ``loc`` as it is in the file (a scalar is re-serialised)."""
        node = self.root
        try:
            for part in loc:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
        if not isinstance(node, (dict, list)):
            return json.dumps(node, ensure_ascii=False)
        s = self.spans.get(id(node))
        return None if s is None else self.text[s[0] : s[1]]


# --------------------------------------------------------------------------------------------
# the walk


class _Read:
    """One pass over the file: yields ``("passage", Passage)`` and ``("query", QueryExample)``."""

    def __init__(self, path: Path, rejects: Rejects | None, reported: set, info: dict, state: dict):
        self.path = path
        self.rejects = rejects
        self.reported = reported
        self.info = info
        self.state = state
        self.text = ""
        self._positions: _Positions | None = None
        self.counts: Counter = Counter()
        self.qids: dict[str, Loc] = {}
        self.passages: dict[str, Passage] = {}

    # ---- reporting

    def positions(self) -> _Positions:
        if self._positions is None:
            self._positions = _Positions(self.text)
        return self._positions

    def report(self, bad: _Bad, unit: Loc) -> None:
        """``bad`` as ``file:line: <json path>: reason`` to the rejects policy, once per Source."""
        pos = self.positions()
        err = DataError(self.path, pos.line(bad.loc), f"{format_loc(bad.loc)}: {bad.reason}", bad.kind)
        key = (err.line, err.kind, err.reason)
        if key in self.reported:  # a second read of the same file
            if self.rejects is None or not self.rejects.skip_bad:
                raise err
            return
        self.reported.add(key)
        reject_or_raise(self.rejects, err, pos.raw(unit))

    # ---- units

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        self.text, root = _load(self.path)
        if not isinstance(root, dict):
            raise DataError(self.path, 1, f"expected a JSON object with a 'data' list at the top, got {_type_name(root)}", "invalid-json")
        data = root.get("data")
        if data is None:
            keys = ", ".join(repr(k) for k in list(root)[:5]) or "none"
            raise DataError(self.path, None, f"no top-level 'data' list (not a SQuAD file? top-level keys: {keys})", "missing-field")
        if not isinstance(data, list):
            raise DataError(self.path, None, f"top-level 'data' must be a list of articles, got {_type_name(data)}", "invalid-type")
        for i, art in enumerate(data):
            aloc: Loc = ("data", i)
            try:
                title, paragraphs = self.article(aloc, art)
            except _Bad as b:
                self.report(b, aloc)
                continue
            self.counts["articles"] += 1
            for k, par in enumerate(paragraphs):
                yield from self.paragraph(aloc + ("paragraphs", k), title, k, par)
        self.finish(root.get("version"))

    def article(self, loc: Loc, art: Any) -> tuple[str, list]:
        if not isinstance(art, dict):
            raise _Bad(loc, f"an article must be an object, got {_type_name(art)}", "invalid-type")
        title = _required(loc, art, "title")
        if not isinstance(title, str):
            raise _Bad(loc + ("title",), f"title must be a string, got {_type_name(title)}", "invalid-type")
        if not title.strip():
            raise _Bad(loc, "empty title", "empty-title")
        paragraphs = _required(loc, art, "paragraphs")
        if not isinstance(paragraphs, list):
            raise _Bad(loc + ("paragraphs",), f"paragraphs must be a list, got {_type_name(paragraphs)}", "invalid-type")
        return title, paragraphs

    def paragraph(self, loc: Loc, title: str, k: int, par: Any) -> Iterator[tuple[str, Any]]:
        try:
            if not isinstance(par, dict):
                raise _Bad(loc, f"a paragraph must be an object, got {_type_name(par)}", "invalid-type")
            context = _required(loc, par, "context")
            if not isinstance(context, str):
                raise _Bad(loc + ("context",), f"context must be a string, got {_type_name(context)}", "invalid-type")
            if not context.strip():
                raise _Bad(loc, "empty context", "empty-context")
            qas = _required(loc, par, "qas")
            if not isinstance(qas, list):
                raise _Bad(loc + ("qas",), f"qas must be a list, got {_type_name(qas)}", "invalid-type")
        except _Bad as b:
            self.report(b, loc)
            return
        shown = title.replace("_", " ")
        pid = stable_id(shown, context)
        self.counts["paragraphs"] += 1
        passage = self.passages.get(pid)
        if passage is None:
            passage = Passage(id=pid, text=context, title=shown, metadata={"article": title, "paragraph_index": k})
            self.passages[pid] = passage
            yield "passage", passage
        else:
            self.counts["duplicate_paragraphs"] += 1
        for j, qa in enumerate(qas):
            qloc = loc + ("qas", j)
            try:
                ex, empty = self.question(qloc, qa, passage)
            except _Bad as b:
                self.report(b, qloc)
                continue
            self.counts["empty_answers"] += empty
            yield "query", ex

    def question(self, loc: Loc, qa: Any, passage: Passage) -> tuple[QueryExample, int]:
        if not isinstance(qa, dict):
            raise _Bad(loc, f"a question must be an object, got {_type_name(qa)}", "invalid-type")
        try:
            qid = id_str(self.path, None, _required(loc, qa, "id"), "id")
        except DataError as e:
            raise _Bad(loc, e.reason, e.kind) from None
        question = _required(loc, qa, "question")
        if not isinstance(question, str):
            raise _Bad(loc + ("question",), f"question must be a string, got {_type_name(question)}", "invalid-type")
        if not question.strip():
            raise _Bad(loc, "empty question", "empty-question")
        impossible = qa.get("is_impossible", False)
        if not isinstance(impossible, bool):
            raise _Bad(loc + ("is_impossible",), f"is_impossible must be true or false, got {_type_name(impossible)}", "invalid-type")
        context = passage.text
        answers, spans, empty, kept = _answers(loc, qa, "answers", context)
        if impossible:
            if answers:
                raise _Bad(loc, f"is_impossible is true but the question has {kept} answer(s)", "invalid-answer")
            plausible, _, empty_plausible, _ = _answers(loc, qa, "plausible_answers", context)
            empty += empty_plausible
        elif not answers:
            n = len(qa.get("answers") or [])
            why = f"all {n} answer(s) are empty" if n else "answers is empty"
            raise _Bad(loc, f"no answers ({why}) and is_impossible is not true", "no-answers")
        if qid in self.qids:
            raise _Bad(loc, f"duplicate question id {qid!r} (first at {format_loc(self.qids[qid])})", "duplicate-id")
        self.qids[qid] = loc
        self.counts["questions"] += 1
        if impossible:
            self.counts["impossible"] += 1
            meta = {"is_impossible": True, "plausible_answers": plausible}
            return QueryExample(qid, question.strip(), [], [passage], [], source="squad", metadata=meta), empty
        self.counts["answers"] += kept
        pos = Passage(id=passage.id, text=context, title=passage.title, metadata={**passage.metadata, "answer_spans": spans})
        return QueryExample(qid, question.strip(), [pos], [], answers, source="squad", metadata={}), empty

    def finish(self, version: Any) -> None:
        c = self.counts
        self.info.update(
            version=version,
            articles=c["articles"],
            paragraphs=c["paragraphs"],
            passages=len(self.passages),
            duplicate_paragraphs=c["duplicate_paragraphs"],
            questions=c["questions"],
            impossible=c["impossible"],
            answers=c["answers"],
            empty_answers=c["empty_answers"],
        )
        if c["duplicate_paragraphs"] and not self.state.get("dup_logged"):
            self.state["dup_logged"] = True
            logger.info("%s: %d paragraph(s) repeat an earlier one (same title and context); read as one passage",
                        self.path, c["duplicate_paragraphs"])  # fmt: skip
        if c["empty_answers"] and not self.state.get("empty_logged"):
            self.state["empty_logged"] = True
            logger.warning("%s: ignored %d empty answer text(s)", self.path, c["empty_answers"])


def _required(loc: Loc, obj: dict, key: str) -> Any:
    v = obj.get(key)
    if v is None:
        raise _Bad(loc, f"missing field '{key}'", "missing-field")
    return v


def _answers(loc: Loc, qa: dict, key: str, context: str) -> tuple[list[str], list[list[int]], int, int]:
    """Distinct non-empty texts, distinct spans, and the numbers of empty and non-empty answers
    of ``qa[key]``."""
    items = qa.get(key)
    if items is None:
        if key == "answers":
            raise _Bad(loc, "missing field 'answers'", "missing-field")
        items = []
    if not isinstance(items, list):
        raise _Bad(loc + (key,), f"{key} must be a list, got {_type_name(items)}", "invalid-type")
    texts: list[str] = []
    spans: list[list[int]] = []
    empty = kept = 0
    for i, a in enumerate(items):
        aloc = loc + (key, i)
        if not isinstance(a, dict):
            raise _Bad(aloc, f"an answer must be an object, got {_type_name(a)}", "invalid-type")
        text = _required(aloc, a, "text")
        if not isinstance(text, str):
            raise _Bad(aloc, f"answer text must be a string, got {_type_name(text)}", "invalid-type")
        if not text.strip():
            empty += 1
            continue
        start = _required(aloc, a, "answer_start")
        if isinstance(start, bool) or not isinstance(start, int):
            raise _Bad(aloc, f"answer_start must be an integer, got {_type_name(start)} {start!r}", "invalid-type")
        end = start + len(text)
        if start < 0 or end > len(context):
            raise _Bad(aloc, f"answer {text!r} at answer_start {start} runs outside the context ({len(context)} characters)", "answer-span")
        if context[start:end] != text:
            raise _Bad(aloc, f"answer {text!r} does not match the context at answer_start {start} (context[{start}:{end}] is {context[start:end]!r})", "answer-span")  # fmt: skip
        kept += 1
        if text not in texts:
            texts.append(text)
        if [start, end] not in spans:
            spans.append([start, end])
    return texts, spans, empty, kept


# --------------------------------------------------------------------------------------------
# the format


def read_squad(path: PathLike, rejects: Rejects | None = None) -> Iterator[QueryExample]:
    """Stream the questions of a SQuAD file as query examples (see the module docstring)."""
    return open_squad(path, rejects).queries()


@register_format("squad", "SQuAD v1.1/v2.0 JSON(.gz): paragraphs as passages, questions with answer spans (input=file)")
def open_squad(input: PathLike, rejects: Rejects | None = None) -> Source:
    """Each ``corpus()`` / ``queries()`` call reads the file again; a bad unit is reported once."""
    path = require_path(input, "SQuAD file", is_dir=False)
    # rejects are deduplicated here by (line, kind, reason): a one-line file has every problem on
    # line 1, where OnceRejects (keyed by file, line and kind) would merge different problems
    if isinstance(rejects, OnceRejects):
        rejects = rejects.inner
    reported: set = set()
    state: dict = {}
    info: dict[str, Any] = {"label_source": "human"}

    def read(kind: str) -> Iterator[Any]:
        for k, rec in _Read(path, rejects, reported, info, state):
            if k == kind:
                yield rec

    return Source(
        name="squad",
        corpus=lambda: read("passage"),
        queries=lambda: read("query"),
        files=[str(path)],
        info=info,
    )
