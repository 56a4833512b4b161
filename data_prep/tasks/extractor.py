"""Extractor records: one (query, sentence) pair per sentence of each positive passage.

Sentences come from :func:`data_prep.text.sentence_spans` (the splitter the served extractor uses,
with the same ``max_chars``: a longer sentence is cut into pieces and counted). A sentence is a key
sentence (label 1) when

* it is one of the passage's ``metadata["rationale_sentences"]`` (indices into its sentences), or
* the passage has ``metadata["answer_spans"]`` (SQuAD: the spans an annotator marked) and the
  sentence overlaps one of them (then only the spans count, not the same string elsewhere), or
* the passage has no spans and the sentence contains a gold answer after SQuAD normalisation.

The label source is ``human`` for a passage with rationales or spans, else ``answer-match``.

Skipped and counted: queries without positives, queries with neither answers, spans nor rationales,
passages in which no sentence is a key sentence (``passages-without-answer-sentence``: the answer
crosses a sentence boundary, or the answers are free text as in MS MARCO), and empty answers.
"""

from __future__ import annotations

from collections import Counter

from ..records import LabelledPair, Passage, QueryExample
from ..text import contains_answer, sentence_spans
from . import real_answers

DEFAULT_MAX_CHARS = 600


class RationaleError(ValueError):
    """Rationales or answer spans that do not fit the passage."""


def rationales(passage: Passage, n_sentences: int) -> set[int] | None:
    r = passage.metadata.get("rationale_sentences")
    if r is None:
        return None
    if not isinstance(r, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in r):
        raise RationaleError(f"passage {passage.id!r}: metadata 'rationale_sentences' must be a list of sentence indices")
    bad = [i for i in r if not 0 <= i < n_sentences]
    if bad:
        raise RationaleError(
            f"passage {passage.id!r}: rationale sentence index {bad[0]} is outside 0..{n_sentences - 1}"
            f" (the passage splits into {n_sentences} sentences)"
        )
    return set(r)


def answer_spans(passage: Passage) -> list[tuple[int, int]] | None:
    spans = passage.metadata.get("answer_spans")
    if spans is None:
        return None
    ok = isinstance(spans, list) and all(
        isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
        and 0 <= s[0] < s[1] <= len(passage.text) for s in spans)
    if not ok:
        raise RationaleError(f"passage {passage.id!r}: metadata 'answer_spans' must be [start, end] character offsets "
                             f"within the text ({len(passage.text)} characters)")
    return [(s[0], s[1]) for s in spans]


def extractor_pairs(example: QueryExample, max_chars: int | None = DEFAULT_MAX_CHARS) -> tuple[list[LabelledPair], Counter[str]]:
    """Sentence pairs from the positive passages; returns ``(pairs, skip_counts)``."""
    skips: Counter[str] = Counter()
    if not example.positives:
        skips["no-positives"] += 1
        return [], skips
    answers, empty = real_answers(example.answers)
    if empty:
        skips["empty-answers"] += empty
    given = any("rationale_sentences" in p.metadata or "answer_spans" in p.metadata for p in example.positives)
    if not answers and not given:
        skips["no-answers-or-rationales"] += 1
        return [], skips
    out: list[LabelledPair] = []
    for p in example.positives:
        sentences = sentence_spans(p.text, max_chars)
        if any(s.forced for s in sentences):
            skips["passages-with-cut-sentences"] += 1
        rat = rationales(p, len(sentences))
        spans = answer_spans(p)
        human = rat is not None or spans is not None
        labels = []
        for k, s in enumerate(sentences):
            if rat is not None and k in rat:
                labels.append(1.0)
            elif spans is not None:  # the annotated span decides, not a string that also occurs elsewhere
                labels.append(float(any(min(s.end, b) > max(s.start, a) for a, b in spans)))
            else:
                labels.append(float(contains_answer(s.text, answers)))
        if not any(labels):
            skips["passages-without-answer-sentence"] += 1
            continue
        for k, (s, label) in enumerate(zip(sentences, labels)):
            sentence = Passage(
                id=f"{p.id}#s{k}",
                text=s.text,
                title=p.title,
                metadata={"parent_id": p.id, "sentence_index": k, "start": s.start, "end": s.end, "parent_text": p.text},
            )
            out.append(LabelledPair(query_id=example.id, query=example.query, passage=sentence, label=label,
                                    label_source="human" if human else "answer-match",
                                    metadata={"source": example.source}))
    if not out and skips["passages-without-answer-sentence"]:
        skips["no-answer-sentence"] += 1  # the query, beside its passages
    return out, skips
