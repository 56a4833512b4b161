"""Parse and validate an LLM's reply: one JSON object per task.

* ``relevance``: ``{"reason": str, "grade": 0..3}`` (an integer, or a string or float holding one);
* ``answer``: ``{"reason": str, "has_answer": bool}`` (``true``/``false``; ``"yes"``/``"no"`` too);
* ``sentences``: ``{"reason": str, "key_sentences": [index, ...]}`` - indices into the numbered
  sentences, at most :data:`~data_prep.labelling.prompts.MAX_KEY_SENTENCES`, possibly none.

The object may be wrapped in a Markdown code fence or follow some text: the first JSON object in the
reply that decodes is taken. Anything else raises :class:`AnswerError`, whose message is shown to
the model when it is asked again, and kept in ``failures.jsonl`` when the retries run out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .prompts import MAX_KEY_SENTENCES

REASON_CHARS = 500


class AnswerError(ValueError):
    """A reply that is not the requested JSON (the message says what is wrong, for the model)."""


@dataclass
class Answer:
    """One valid reply: ``value`` is the grade (relevance), 1/0 (answer) or the key sentence
    indices (sentences)."""

    value: int | list[int]
    reason: str = ""
    raw: str = field(default="", repr=False)


def first_object(text: str) -> dict:
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict):
            return obj
        start = text.find("{", start + 1)
    if not text.strip():
        raise AnswerError("the reply is empty")
    body = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        raise AnswerError("the reply holds no JSON object") from None
    raise AnswerError(f"the reply's JSON is not an object (a {type(obj).__name__})")


def _int(v, what: str) -> int:
    if isinstance(v, bool):
        raise AnswerError(f"'{what}' must be an integer, got {json.dumps(v)}")
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v.strip())
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int):
        raise AnswerError(f"'{what}' must be an integer, got {json.dumps(v)}")
    return v


def _reason(obj: dict) -> str:
    r = obj.get("reason", "")
    return r.strip()[:REASON_CHARS] if isinstance(r, str) else json.dumps(r)[:REASON_CHARS]


def parse_answer(task: str, text: str, n_sentences: int | None = None) -> Answer:
    """The validated answer of ``text`` for ``task`` (``n_sentences``: how many were numbered)."""
    obj = first_object(text)
    if task == "relevance":
        if "grade" not in obj:
            raise AnswerError("missing field 'grade'")
        g = _int(obj["grade"], "grade")
        if not 0 <= g <= 3:
            raise AnswerError(f"'grade' must be 0, 1, 2 or 3, got {g}")
        return Answer(g, _reason(obj), text)
    if task == "answer":
        if "has_answer" not in obj:
            raise AnswerError("missing field 'has_answer'")
        v = obj["has_answer"]
        if isinstance(v, str) and v.strip().lower() in ("true", "yes", "false", "no"):
            v = v.strip().lower() in ("true", "yes")
        if not isinstance(v, bool):
            raise AnswerError(f"'has_answer' must be true or false, got {json.dumps(v)}")
        return Answer(int(v), _reason(obj), text)
    if task == "sentences":
        if "key_sentences" not in obj:
            raise AnswerError("missing field 'key_sentences'")
        v = obj["key_sentences"]
        if not isinstance(v, list):
            raise AnswerError(f"'key_sentences' must be a list of sentence numbers, got {json.dumps(v)}")
        idx = sorted({_int(i, "key_sentences[]") for i in v})
        n = n_sentences or 0
        bad = [i for i in idx if not 0 <= i < n]
        if bad:
            raise AnswerError(f"sentence number {bad[0]} does not exist (the sentences are numbered 0 to {n - 1})")
        if len(idx) > MAX_KEY_SENTENCES:
            raise AnswerError(f"{len(idx)} sentences chosen; choose at most {MAX_KEY_SENTENCES}")
        return Answer(idx, _reason(obj), text)
    raise ValueError(f"unknown labelling task {task!r}")
