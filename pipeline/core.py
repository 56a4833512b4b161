"""The CRAG pipeline: recall -> grade -> (more rounds) -> (web) -> refine -> evidence -> answer.

    from pipeline import CragPipeline
    p = CragPipeline.from_paths("outputs/index/nq-open", "outputs/evaluator-quickstart",
                                extractor="outputs/extractor-quickstart")
    result = p.ask("who got the first nobel prize in physics")
    result.action, result.answer.text, result.evidence, result.timings_ms

Stages (each a small module behind a small interface; see ``pipeline/__init__.py``):

1. **Recall** (:class:`~pipeline.recall.HybridRecall`): dense, BM25 and metadata routes fused by
   weighted reciprocal-rank fusion.
2. **Grade** (:func:`~pipeline.grading.grade_hits`): the evaluator export scores the first
   ``grade_k`` fused hits; CRAG's action per chunk and per query; the answer classifier, when
   given, drops chunks that cannot answer.
3. **Rounds** (optional, ``max_rounds`` > 1): while the query is not Correct, a rewritten query
   that adds a new term (:func:`~pipeline.rounds.rewrite_query`) recalls again; new chunks are
   graded against the original question; stop after ``max_rounds`` or when the new results overlap
   the old by ``overlap_stop`` (70%) or more.
4. **Web** (only with a :class:`~pipeline.web.WebSearcher`; off by default: privacy mode): for an
   Incorrect or Ambiguous query, a keyword query is searched and the results are graded like any
   chunk. Without a searcher, or when the web fails too, an Incorrect query is an honest abstention
   (:data:`~pipeline.types.ABSTAIN`), never a guess.
5. **Refine** (:func:`~pipeline.refine.refine`): the kept chunks' key strips (extractor sentences
   or word windows), top 5, in original order.
6. **Evidence**: each strip gets its source's credibility (:class:`~pipeline.credibility.CredibilityTable`);
   disagreements between strips become conflict notes (:func:`~pipeline.conflicts.detect_conflicts`).
7. **Answer** (:class:`~pipeline.generate.Generator`): extractive by default (no LLM).

The naive path (:meth:`CragPipeline.ask_naive`) is recall, then the same generator on the sentences
of the top ``naive_k`` chunks in recall order: what the benchmark compares against.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Sequence

from data_prep.text import sentence_spans
from inference.decisions import query_action

from .conflicts import detect_conflicts
from .credibility import CredibilityTable
from .generate import ExtractiveGenerator
from .grading import Friendliness, Grading, GradingConfig, IndexReference, IndexVectors, grade_hits
from .recall import HybridRecall
from .refine import RefineConfig, refine
from .rounds import MAX_ROUNDS, OVERLAP_STOP, results_overlap, rewrite_query
from .types import ABSTAIN, Answer, Conflict, Evidence, GradedChunk, Hit

logger = logging.getLogger(__name__)


class PipelineError(ValueError):
    """A question or a setting the pipeline cannot work with (the message says why)."""


@dataclass
class PipelineConfig:
    """Every knob of the pipeline, with the design's defaults."""

    # each recall route's weight in the weighted reciprocal-rank fusion
    weights: dict[str, float] = field(default_factory=lambda: {"dense": 0.5, "bm25": 0.3, "metadata": 0.2})
    route_k: int = 20  # each recall route's top k
    rrf_k: int = 60  # the fusion's rank constant: a hit at rank r adds weight / (rrf_k + r)
    grading: GradingConfig = field(default_factory=GradingConfig)  # how hits are graded (evaluator, answer filter)
    refine: RefineConfig = field(default_factory=RefineConfig)  # how kept chunks are cut into key strips
    max_rounds: int = 1  # 1: one retrieval round (multi-round off)
    overlap_stop: float = OVERLAP_STOP  # multi-round: stop when a round's hits overlap the earlier ones this much
    web_k: int = 5  # web results graded per web search (with a searcher)
    web_on: tuple[str, ...] = ("Incorrect", "Ambiguous")  # the query actions that call the web searcher
    max_words: int = 50  # the answer's length budget (naive and CRAG alike)
    naive_k: int = 5  # the naive path's chunks (recall order) given to the generator

    def __post_init__(self) -> None:
        def whole(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        if not whole(self.max_rounds) or not 1 <= self.max_rounds <= MAX_ROUNDS:
            raise PipelineError(f"max_rounds must be 1..{MAX_ROUNDS}, got {self.max_rounds!r}")
        if not whole(self.max_words) or self.max_words < 1:
            raise PipelineError(f"max_words must be >= 1, got {self.max_words!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PipelineConfig":
        d = dict(d)
        if isinstance(d.get("grading"), dict):
            g = dict(d["grading"])
            if isinstance(g.get("friendliness"), dict):
                g["friendliness"] = _settings(Friendliness, g["friendliness"], "friendliness")
            d["grading"] = _settings(GradingConfig, g, "grading")
        if isinstance(d.get("refine"), dict):
            d["refine"] = _settings(RefineConfig, d["refine"], "refine")
        if "web_on" in d:
            d["web_on"] = tuple(d["web_on"])
        return _settings(cls, d, "pipeline")


def _settings(cls: type, d: dict[str, Any], what: str) -> Any:
    """``cls(**d)``, with an unknown or mistyped setting a :class:`PipelineError` naming it (not a TypeError)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise PipelineError(f"unknown {what} setting(s): {', '.join(map(str, unknown))} (settings: {', '.join(sorted(names))})")
    try:
        return cls(**d)
    except TypeError as e:
        raise PipelineError(f"bad {what} setting: {e}") from None


@dataclass
class PipelineResult:
    question: str
    mode: str  # "crag" or "naive"
    action: str | None  # the query's CRAG action (None on the naive path)
    queries: list[str]
    graded: list[GradedChunk]
    evidence: list[Evidence]
    conflicts: list[Conflict]
    answer: Answer
    answer_source: str | None  # "index", "web", "index+web" or None (abstained)
    timings_ms: dict[str, float]
    notes: list[str] = field(default_factory=list)
    recalled: list[Hit] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question, "mode": self.mode, "action": self.action, "queries": self.queries,
            "graded": [c.to_dict() for c in self.graded],
            "evidence": [e.to_dict() for e in self.evidence],
            "conflicts": [c.to_dict() for c in self.conflicts],
            "answer": self.answer.to_dict(), "answer_source": self.answer_source,
            "timings_ms": self.timings_ms, "notes": self.notes,
        }


class _Clock:
    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t0 = time.perf_counter()

    @contextmanager
    def stage(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - t) * 1000

    def total(self) -> dict[str, float]:
        self.ms["total"] = (time.perf_counter() - self._t0) * 1000
        return {k: round(v, 2) for k, v in self.ms.items()}


def check_question(question: object) -> str:
    if not isinstance(question, str):
        raise PipelineError(f"the question must be a string, got {type(question).__name__}")
    q = " ".join(question.split())
    if not q:
        raise PipelineError("the question is empty")
    return q


def _combine(first: Grading, more: Grading) -> Grading:
    chunks = sorted(first.chunks + more.chunks, key=lambda c: (not c.kept, -c.score))
    ev = query_action([c.action for c in chunks])
    action = ev if any(c.kept for c in chunks) else "Incorrect"
    return Grading(action, ev, chunks, first.theta_high, first.theta_low,
                   first.passages_truncated + more.passages_truncated)


class CragPipeline:
    def __init__(self, index, evaluator, extractor=None, answer_classifier=None, searcher=None, generator=None,
                 credibility: CredibilityTable | None = None, config: PipelineConfig | None = None):
        if getattr(evaluator, "task", None) != "evaluator":
            raise PipelineError(f"the evaluator must be an evaluator export, got a {getattr(evaluator, 'task', type(evaluator).__name__)} "
                                "model")
        if extractor is not None and getattr(extractor, "task", None) != "extractor":
            raise PipelineError(f"--extractor must be an extractor export, got a "
                                f"{getattr(extractor, 'task', type(extractor).__name__)} model")
        if answer_classifier is not None and getattr(answer_classifier, "task", None) != "answer_classifier":
            raise PipelineError(f"--answer-classifier must be an answer_classifier export, got a "
                                f"{getattr(answer_classifier, 'task', type(answer_classifier).__name__)} model")
        self.config = config or PipelineConfig()
        self.index = index
        self.evaluator = evaluator
        self.extractor = extractor
        self.answer_classifier = answer_classifier
        self.searcher = searcher
        self.generator = generator or ExtractiveGenerator(max_words=self.config.max_words)
        self.credibility = credibility or CredibilityTable()
        c = self.config
        self.recall = HybridRecall(index, weights=c.weights, top_k=c.route_k, rrf_k=c.rrf_k)
        self._vectors: IndexVectors | None = None
        self.index_reference = IndexReference(index)  # corpus mode's r(q), from the dense route when it can

    @property
    def index_vectors(self) -> IndexVectors:
        """Whether grading reuses the index's vectors (a bi-encoder evaluator of the index's weights)."""
        if self._vectors is None:
            self._vectors = IndexVectors(self.index, self.evaluator)
        return self._vectors

    @property
    def corpus_grading(self) -> str | None:
        """Why the index's chunks are not graded in the evaluator's corpus mode (None: they are, with
        the index as the corpus: each question's scores read against its nearest chunks, whose
        cosines the dense route already found; :class:`~pipeline.grading.IndexReference`)."""
        if not self.config.grading.corpus_mode:
            return "grading.corpus_mode is off (the default)"
        if getattr(getattr(self.evaluator, "manifest", None), "corpus_norm", None) is None:
            return "the evaluator has no corpus mode"
        if not self.index_vectors.active:
            return f"the index's vectors are not the evaluator's ({self.index_vectors.why_not})"
        return None

    @contextmanager
    def _against_index(self):
        """The evaluator in corpus mode over the index's vectors while grading the index's chunks."""
        if self.corpus_grading is not None:
            yield
            return
        self.evaluator.use_corpus(reference=self.index_reference)
        try:
            yield
        finally:
            self.evaluator.use_corpus(None)

    def grade(self, question: str, hits: Sequence[Hit]) -> Grading:
        """CRAG's grading of the index ``hits`` of ``question`` (the first ``grading.grade_k``): with the
        index's vectors when they are the evaluator's, in corpus mode when :attr:`corpus_grading` allows."""
        self.index_vectors.hand_over(question, hits[: self.config.grading.grade_k])
        with self._against_index():
            return grade_hits(question, hits, self.evaluator, self.config.grading, self.answer_classifier)

    @classmethod
    def from_paths(cls, index_dir: str, evaluator: str, extractor: str | None = None,
                   answer_classifier: str | None = None, device: str | None = None, **kw: Any) -> "CragPipeline":
        """Load the index and the exports (each checked to be of its task) and build the pipeline."""
        import inference

        from .index import HybridIndex

        index = HybridIndex.load(index_dir)
        ev = inference.load(evaluator, task="evaluator", device=device)
        ex = inference.load(extractor, task="extractor", device=device) if extractor else None
        ac = inference.load(answer_classifier, task="answer_classifier", device=device) if answer_classifier else None
        return cls(index, ev, ex, ac, **kw)

    # ------------------------------------------------------------------------------------------

    def _notes_for(self, question: str) -> list[str]:
        notes = []
        limit = self.evaluator.spec.max_query_length
        if len(question.split()) > limit:
            notes.append(f"the question is long ({len(question.split())} words): the models read its first "
                         f"{limit} tokens")
        return notes

    def ask(self, question: str) -> PipelineResult:
        """The full CRAG path for one question."""
        q = check_question(question)
        cfg = self.config
        clock = _Clock()
        notes = self._notes_for(q)
        with clock.stage("recall"):
            hits = self.recall.recall(q)
        with clock.stage("grade"):
            grading = self.grade(q, hits)
        queries = [q]
        seen = [h.chunk.id for h in hits[: cfg.grading.grade_k]]
        for _ in range(1, cfg.max_rounds):
            if grading.action == "Correct":
                break
            with clock.stage("rounds"):
                new_q = rewrite_query(q, queries, [c.chunk.text for c in grading.chunks[:3]])
                if new_q is None:
                    notes.append("multi-round: no new term to add; stopped")
                    break
                queries.append(new_q)
                new_hits = self.recall.recall(new_q)
                top = [h.chunk.id for h in new_hits[: cfg.grading.grade_k]]
                ov = results_overlap(top, seen)
                if ov >= cfg.overlap_stop:
                    notes.append(f"multi-round: round {len(queries)} overlaps earlier results by {ov:.0%}; stopped")
                    break
                known = set(seen)
                fresh = [h for h in new_hits if h.chunk.id not in known]
                seen.extend(h.chunk.id for h in fresh[: cfg.grading.grade_k])
                more = self.grade(q, fresh)
                grading = _combine(grading, more)
        graded = list(grading.chunks)
        action = grading.action
        web_kept: list[GradedChunk] = []
        if self.searcher is not None and action in cfg.web_on:
            with clock.stage("web"):
                web_kept, web_graded, note = self._web(q)
            graded.extend(web_graded)
            if note:
                notes.append(note)
        index_kept = [c for c in grading.chunks if c.kept] if action != "Incorrect" else []
        use = index_kept + web_kept
        if not use:
            why = ("no retrieved chunk is relevant" if self.searcher is None else
                   "neither the index nor the web gave a relevant chunk")
            notes.append(f"abstained: {why}" + (" (privacy mode: no web search)" if self.searcher is None else ""))
            return PipelineResult(q, "crag", action, queries, graded, [], [], Answer(ABSTAIN, abstained=True, generator="none"),
                                  None, clock.total(), notes, hits)
        with clock.stage("refine"):
            if self.extractor is None and cfg.refine.window_words == self.index_vectors.index_strip_words:
                self.index_vectors.hand_over_strips(use)  # the evaluator scores the strips: the index has them
            evidence = refine(q, use, self.extractor, self.evaluator, cfg.refine)
        with clock.stage("evidence"):
            for ev in evidence:
                ev.credibility = self.credibility.credibility(ev.source, ev.published)
            conflicts = detect_conflicts(evidence)
        with clock.stage("generate"):
            answer = self.generator.generate(q, evidence, conflicts)
        source = "+".join(s for s, part in (("index", index_kept), ("web", web_kept)) if part)
        return PipelineResult(q, "crag", action, queries, graded, evidence, conflicts, answer,
                              None if answer.abstained else source, clock.total(), notes, hits)

    def _web(self, q: str) -> tuple[list[GradedChunk], list[GradedChunk], str | None]:
        from .web import WebSearchError, keyword_query

        query = keyword_query(q)
        try:
            results = self.searcher.search(query, self.config.web_k)
        except WebSearchError as e:
            return [], [], f"web search failed ({e}); the answer rests on the index alone"
        except Exception as e:  # a searcher of the user's: degrade, never crash the question
            return [], [], f"web search failed ({type(e).__name__}: {e}); the answer rests on the index alone"
        if not results:
            return [], [], f"web search for {query!r} found nothing"
        hits = [Hit(c, 0.0, {"web": i + 1}) for i, c in enumerate(results)]
        cfg = dataclasses.replace(self.config.grading, grade_k=len(hits))
        g = grade_hits(q, hits, self.evaluator, cfg, self.answer_classifier, origin="web")
        kept = [c for c in g.chunks if c.kept][: self.config.web_k]
        note = None if kept else f"web search for {query!r}: no result graded relevant"
        return kept, g.chunks, note

    def ask_naive(self, question: str) -> PipelineResult:
        """Naive RAG: recall, then the generator on the top ``naive_k`` chunks' sentences in recall order."""
        q = check_question(question)
        clock = _Clock()
        with clock.stage("recall"):
            hits = self.recall.recall(q)[: self.config.naive_k]
        with clock.stage("generate"):
            evidence = []
            for h in hits:
                for s in sentence_spans(h.chunk.text):
                    evidence.append(Evidence(s.text, h.chunk.id, h.chunk.source, float(h.score), start=s.start,
                                             end=s.end, title=h.chunk.title))
            answer = self.generator.generate(q, evidence, [])
        return PipelineResult(q, "naive", None, [q], [], evidence, [], answer,
                              None if answer.abstained else "index", clock.total(), [], hits)

    def run(self, question: str, mode: str = "crag") -> PipelineResult:
        if mode not in ("crag", "naive"):
            raise PipelineError(f"mode must be crag or naive, got {mode!r}")
        return self.ask(question) if mode == "crag" else self.ask_naive(question)


def summarize(results: Sequence[PipelineResult], answers: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``{"n", "answer_recall", "answer_precision", "abstain_rate", "mean_answer_words", "actions",
    "stage_ms"}`` over questions with gold answers: ``answer_recall`` is the share of questions whose
    final answer contains a gold answer (SQuAD normalisation); an abstention never does.
    ``answer_precision`` is that share among the questions answered (not abstained): how far an
    answer can be trusted when one is given (None when every question was abstained on)."""
    import numpy as np

    from data_prep.text import contains_answer

    n = len(results)
    if len(answers) != n:
        raise ValueError(f"summarize needs one answer list per result: {n} results but {len(answers)} answer lists")
    hit = [not r.answer.abstained and contains_answer(r.answer.text, a) for r, a in zip(results, answers)]
    words = [len(r.answer.text.split()) for r in results if not r.answer.abstained]
    actions: dict[str, int] = {}
    for r in results:
        key = r.action or "none"
        actions[key] = actions.get(key, 0) + 1
    stages: dict[str, list[float]] = {}
    for r in results:
        for k, v in r.timings_ms.items():
            stages.setdefault(k, []).append(v)
    return {
        "n": n,
        "answer_recall": sum(hit) / n if n else None,
        "answer_precision": sum(hit) / len(words) if words else None,
        "abstain_rate": sum(r.answer.abstained for r in results) / n if n else None,
        "mean_answer_words": float(np.mean(words)) if words else 0.0,
        "actions": dict(sorted(actions.items())),
        "stage_ms": {k: {"median": round(float(np.median(v)), 2), "p95": round(float(np.percentile(v, 95)), 2),
                         "n": len(v)} for k, v in sorted(stages.items())},
    }
