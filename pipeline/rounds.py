"""Multi-round retrieval: rewrite the query with what the last round found, and know when to stop.

The seed design's rules, exactly:

* at most :data:`MAX_ROUNDS` (3) retrieval rounds per question;
* every rewritten query keeps each code-like token of the question (``E-204``, ``v2.1``) and adds at
  least one term that no earlier query had (:func:`rewrite_query`; ``None`` when none can be found,
  which also ends the rounds);
* stop when the new round's results overlap the results already seen by :data:`OVERLAP_STOP` (70%)
  or more (:func:`results_overlap`, :func:`should_stop`).

New terms come from the feedback texts (the best graded chunks of the last round): words that are
neither stopwords, numbers, one- or two-letter words, nor already in the question or an earlier
query (compared in lower case with a light plural strip), ranked by the number of feedback texts
that contain them, then by their total count, then by first appearance - a deterministic
document-frequency rank, no model.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from pipeline.web import STOPWORDS, is_code_like, keyword_query, norm_term, terms

MAX_ROUNDS = 3
OVERLAP_STOP = 0.7
_EPS = 1e-9


def _used_terms(texts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for t in texts:
        for tok in terms(t):
            out.add(norm_term(tok))
            if is_code_like(tok):  # "E-204" also covers "e" and "204"
                out.update(norm_term(p) for p in re.split(r"[-_./]", tok) if p)
    return out


def candidate_terms(feedback_texts: list[str], exclude: set[str]) -> list[str]:
    """The feedback texts' salient terms not in ``exclude`` (normalised terms), best first."""
    df: Counter = Counter()
    tf: Counter = Counter()
    first: dict[str, int] = {}
    surface: dict[str, str] = {}
    pos = 0
    for text in feedback_texts:
        seen_here: set[str] = set()
        for tok in terms(text or ""):
            pos += 1
            key = norm_term(tok)
            if key in exclude or tok.lower() in STOPWORDS or len(tok) < 3:
                continue
            if not is_code_like(tok) and not any(c.isalpha() for c in tok):
                continue  # plain numbers are poor query terms
            tf[key] += 1
            if key not in seen_here:
                df[key] += 1
                seen_here.add(key)
            if key not in first:
                first[key] = pos
                surface[key] = tok if is_code_like(tok) or tok.isupper() else tok.lower()
    ranked = sorted(tf, key=lambda t: (-df[t], -tf[t], first[t]))
    return [surface[t] for t in ranked]


def rewrite_query(
    question: str,
    previous: list[str],
    feedback_texts: list[str],
    new_terms: int = 2,
    max_terms: int = 6,
) -> str | None:
    """The next round's query: :func:`~pipeline.web.keyword_query` of the question (every code-like
    token kept, ``max_terms`` other terms at most) plus up to ``new_terms`` terms from
    ``feedback_texts`` that appear in no query of ``previous`` and not in the question. ``None`` when
    the feedback offers no new term (the rounds should stop)."""
    if new_terms < 1:
        raise ValueError(f"new_terms must be >= 1, got {new_terms}")
    base = keyword_query(question, max_terms=max_terms)
    exclude = _used_terms([*previous, question, base])
    added = candidate_terms(feedback_texts, exclude)[:new_terms]
    if not added:
        return None
    query = f"{base} {' '.join(added)}"
    missing = [t for t in terms(question) if is_code_like(t) and t not in query]
    if missing:  # keyword_query keeps every code; this only guards the rule
        query = " ".join(missing) + " " + query
    return query


def results_overlap(new_ids: list[str], old_ids: list[str]) -> float:
    """The share of this round's (distinct) results already seen in earlier rounds, in [0, 1].
    An empty round counts as fully seen (1.0): it brought nothing new."""
    new = list(dict.fromkeys(new_ids))
    if not new:
        return 1.0
    old = set(old_ids)
    return sum(1 for i in new if i in old) / len(new)


def stop_reason(
    round_no: int,
    overlap: float | None = None,
    next_query: str | None | bool = True,
    max_rounds: int = MAX_ROUNDS,
    overlap_stop: float = OVERLAP_STOP,
) -> str | None:
    """Why retrieval stops after round ``round_no`` (1-based, the round just done), or ``None`` to go
    on: ``"max_rounds"`` once ``round_no >= max_rounds``; ``"overlap"`` when ``overlap`` (this round's
    :func:`results_overlap`; ``None`` for the first round) is ``>= overlap_stop``; ``"no_new_term"``
    when :func:`rewrite_query` gave ``None`` (pass its result as ``next_query``)."""
    if round_no < 1:
        raise ValueError(f"round_no is 1-based, got {round_no}")
    if overlap is not None and not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    if round_no >= max_rounds:
        return "max_rounds"
    if overlap is not None and overlap >= overlap_stop - _EPS:
        return "overlap"
    if next_query is None or next_query is False:
        return "no_new_term"
    return None


def should_stop(
    round_no: int,
    overlap: float | None = None,
    next_query: str | None | bool = True,
    max_rounds: int = MAX_ROUNDS,
    overlap_stop: float = OVERLAP_STOP,
) -> bool:
    """Whether to stop after round ``round_no`` (see :func:`stop_reason` for the rules)."""
    return stop_reason(round_no, overlap, next_query, max_rounds, overlap_stop) is not None
