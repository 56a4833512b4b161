"""Answer-existence records: "does this passage hold the direct answer to the question?"

The classifier needs on-topic passages with and without the answer, which relevance labels alone
do not give (mining drops answer-bearing hits from the evaluator's negatives). Its pairs come from
the example's positives, the top BM25 hits that mining kept for this task
(``mine --answer-hits K``: ``metadata["answer_hits"]``, answer-bearing or not), and its negatives:

* ``source == "hf-msmarco"``: MS MARCO's own judgement - a positive (``is_selected``) is 1 when the
  query has a real answer, 0 otherwise; every other passage 0; label source ``human``;
* a passage with ``metadata["answer_spans"]`` (SQuAD: the paragraph an annotator marked the answer
  in) is 1, label source ``human``;
* otherwise 1 when the passage (title and text) contains a gold answer after SQuAD normalisation
  (label source ``answer-match``).

A query without answers is skipped and counted (``no-answers``), never labelled negative by
accident; empty answer strings are ignored and counted (``empty-answers``).

Groups (for ``group-ce``): one per answer-bearing passage, with ``group_size - 1`` passages of the
same question that do not hold the answer (:func:`answer_groups_example` turns a question's pairs
into the example the evaluator's group builder samples from): "which of these on-topic passages
holds the answer" is the contrast the classifier has to learn.

With ``build --hard-negatives`` the question also gets answerability negatives made from its
answer-bearing positives (:mod:`data_prep.tasks.answerability`): the passage with its answer
sentences removed, the passage with its answer swapped for a wrong one of the same type (label 0:
a wrong answer is not the answer), and the question with its key entity swapped for one the passage
does not mention. The first two join the question's groups; perturbed questions are pairs only.
"""

from __future__ import annotations

from collections import Counter

from ..records import LabelledPair, Passage, QueryExample, RecordError
from ..text import contains_answer
from . import HF_MSMARCO, real_answers


class HitsError(ValueError):
    """``metadata["answer_hits"]`` that is not a list of passages."""


def answer_hits(example: QueryExample) -> list[Passage]:
    """The top hits mining kept for the answer task (``mine --answer-hits K``), best first."""
    raw = example.metadata.get("answer_hits") or []
    if not isinstance(raw, list):
        raise HitsError(f"query example {example.id!r}: metadata 'answer_hits' must be a list of passages")
    try:
        return [Passage.from_dict(d) for d in raw]
    except RecordError as e:
        raise HitsError(f"query example {example.id!r}: metadata 'answer_hits': {e}") from None


def answer_pairs(example: QueryExample) -> tuple[list[LabelledPair], Counter[str]]:
    """Answer-existence pairs of one example; returns ``(pairs, skip_counts)``."""
    skips: Counter[str] = Counter()
    seen: set[str] = set()
    passages: list[tuple[str, Passage]] = []
    for role, group in (("positive", example.positives), ("hit", answer_hits(example)), ("negative", example.negatives)):
        for p in group:
            if p.id not in seen:
                seen.add(p.id)
                passages.append((role, p))
    if not passages:
        skips["no-passages"] += 1
        return [], skips
    answers, empty = real_answers(example.answers)
    if empty:
        skips["empty-answers"] += empty
    msmarco = example.source == HF_MSMARCO
    if not msmarco and not answers:
        skips["no-answers"] += 1
        return [], skips
    out = []
    for role, p in passages:
        if msmarco:
            label, source = float(role == "positive" and bool(answers)), "human"
        elif role == "positive" and p.metadata.get("answer_spans"):
            label, source = 1.0, "human"
        else:
            label, source = float(contains_answer(p.full_text(" "), answers)), "answer-match"
        out.append(LabelledPair(query_id=example.id, query=example.query, passage=p, label=label, label_source=source,
                                metadata={"role": role, "source": example.source}))
    return out, skips


def answer_groups_example(pairs: list[LabelledPair]) -> QueryExample:
    """One question's answer pairs as a :class:`QueryExample`: label >= 0.5 positives, the rest
    negatives (each passage keeps its pair's label source)."""
    first = pairs[0]

    def tagged(p: LabelledPair) -> Passage:
        return Passage(p.passage.id, p.passage.text, p.passage.title, {**p.passage.metadata, "label_source": p.label_source})

    return QueryExample(id=first.query_id, query=first.query,
                        positives=[tagged(p) for p in pairs if p.label >= 0.5],
                        negatives=[tagged(p) for p in pairs if p.label < 0.5],
                        source=str(first.metadata.get("source") or ""))
