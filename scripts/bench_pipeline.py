"""Benchmark the CRAG pipeline against naive RAG: the same questions, the same index, one run.

    python scripts/bench_pipeline.py --json outputs/bench/pipeline.json \\
        [--evaluator outputs/evaluator-quickstart] [--extractor outputs/extractor-quickstart] \\
        [--answer-classifier DIR] [--questions 150] [--removed 90] [--dense-model auto|minilm|DIR]

Data: the bundled NQ-open sample (``data/sample/nq_open``). Its passages are chunked and indexed
(BM25 + dense, as ``python -m pipeline index`` does) into ``--work`` (rebuilt only when missing).
The dense model (``--dense-model auto``) is the evaluator export itself when it is a bi-encoder, so
that grading reuses the index's vectors (:class:`pipeline.grading.IndexVectors`), else the packaged
MiniLM; both paths use the same index. The questions are the quickstart's **dev** questions (``split_of(id, seed 13, 0.1)``,
as ``data_prep build`` splits them): the evaluator never trained on them.

Two sets:

* ``full``: ``--questions`` dev questions over the whole index; both paths should find the answer.
* ``removed``: up to ``--removed`` other dev questions whose gold answers occur in at most 5
  passages, over a second index built from the same corpus minus every passage that contains one of
  their gold answers (SQuAD normalisation): the answer is nowhere in the index, so abstaining is
  right and any answer is a guess.

Each question runs through :meth:`CragPipeline.ask_naive` (recall, then the extractive generator on
the top 5 chunks) and :meth:`CragPipeline.ask` (recall, evaluator grading of the top 5, refinement,
evidence, extractive answer) with the same answer length budget (``--max-words``). A warm-up
question runs first on each path (not counted). The JSON holds, per set and path, the
:func:`pipeline.core.summarize` figures (``answer_recall``; ``answer_precision``, right among the
answered; ``abstain_rate``; ``actions``; per-stage median and p95 ms) and ``per_question`` (each
path right or not, the CRAG action, the graded chunks' scores and whether each holds a gold
answer); at the top, ``{"naive_ms", "crag_ms", "overhead_ratio"}`` from the median total times on
the full set. Targets on a 2-core CPU: ``overhead_ratio < 2``; crag ``answer_recall`` above naive's
on the full set; crag abstains on most ``removed`` questions while naive never does.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scoring import machine  # noqa: E402  (the machine facts every benchmark records)

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"


def dev_questions(seed: int, dev_ratio: float) -> list:
    from data_prep.build import split_of
    from data_prep.readers import open_source

    out = []
    for ex in open_source("nq-open", input=str(NQ)).queries():
        if split_of(ex.id, seed, dev_ratio) == "dev" and [a for a in ex.answers if a.strip()]:
            out.append(ex)
    return out


def build(out: Path, chunks, encoder, label: str, strip_words: int | None = None, chunking: dict | None = None) -> None:
    """Index ``chunks`` into ``out`` unless an index is there already (``chunking``: the settings that
    cut them, recorded in index.json; default 256 characters, 32 overlapping)."""
    from pipeline.index import build_index

    if (out / "index.json").exists():
        print(f"{label} index: reusing {out}", flush=True)
        return
    t0 = time.perf_counter()
    idx = build_index(chunks, out, encoder=encoder, chunking=chunking or {"max_chars": 256, "overlap": 32, "unit": "chars"},
                      overwrite=True, strip_words=strip_words)
    print(f"{label} index: {len(idx)} chunks in {time.perf_counter() - t0:.1f} s -> {out}", flush=True)


def run_set(pipe, questions, label: str) -> dict:
    from pipeline.core import summarize

    pipe.ask_naive(questions[0].query)  # warm-up (first-call allocations), not counted
    pipe.ask(questions[0].query)
    res = {"naive": [], "crag": []}
    t0 = time.perf_counter()
    for i, ex in enumerate(questions, 1):
        # each path encodes its question itself (the index keeps recent query vectors for grading)
        pipe.index.forget_queries()
        res["naive"].append(pipe.ask_naive(ex.query))
        pipe.index.forget_queries()
        res["crag"].append(pipe.ask(ex.query))
        if i % 50 == 0:
            print(f"  {label}: {i}/{len(questions)} questions ({time.perf_counter() - t0:.0f} s)", flush=True)
    answers = [ex.answers for ex in questions]
    out = {mode: summarize(rs, answers) for mode, rs in res.items()}
    from data_prep.text import contains_answer

    def right(r, ex) -> bool:
        return not r.answer.abstained and contains_answer(r.answer.text, ex.answers)

    # every question: to see where the two paths part (answer-bearing chunk graded low, wrong strip, ...)
    out["per_question"] = [{"question": ex.query, "answers": ex.answers[:3], "naive_right": right(n, ex),
                            "crag_right": right(c, ex), "action": c.action,
                            "graded": [[round(g.score, 3), contains_answer(f"{g.chunk.title} {g.chunk.text}", ex.answers)]
                                       for g in c.graded],
                            "naive": n.answer.text, "crag": c.answer.text}
                           for ex, n, c in zip(questions, res["naive"], res["crag"])]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--evaluator", default="outputs/evaluator-quickstart")
    ap.add_argument("--extractor", default="outputs/extractor-quickstart", help="'none' to refine with the evaluator")
    ap.add_argument("--answer-classifier", default=None)
    ap.add_argument("--questions", type=int, default=150, help="dev questions over the full index")
    ap.add_argument("--removed", type=int, default=90, help="dev questions whose answers are removed from the index")
    ap.add_argument("--max-words", type=int, default=50)
    ap.add_argument("--grade-k", type=int, default=5)
    ap.add_argument("--strip-vectors", action="store_true",
                    help="index the chunks' refinement strips too (their own index folders), so that a bi-encoder "
                         "evaluator refines without a model pass (with --extractor none)")
    ap.add_argument("--no-refine-correct", action="store_true",
                    help="use Correct chunks whole; refine only Ambiguous ones (the issue's 'optionally Correct')")
    ap.add_argument("--corpus-mode", action="store_true",
                    help="grade in the evaluator's corpus mode, the index as the corpus (when it has one and the index "
                         "holds its vectors; GradingConfig.corpus_mode)")
    ap.add_argument("--work", default="outputs/bench/pipeline-index", help="index folders (reused when present)")
    ap.add_argument("--dense-model", default="auto",
                    help="auto (the evaluator if it is a bi-encoder export, else the packaged MiniLM), minilm, or a folder")
    ap.add_argument("--seed", type=int, default=13, help="the quickstart build's split seed")
    ap.add_argument("--dev-ratio", type=float, default=0.1, help="the quickstart build's dev ratio")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import inference
    from data_prep.dense import DenseEncoder
    from data_prep.readers import open_source
    from data_prep.text import contains_answer, normalize_answer
    from pipeline.chunking import chunks_from_source
    from pipeline.core import CragPipeline, PipelineConfig
    from pipeline.grading import GradingConfig
    from pipeline.refine import RefineConfig
    from pipeline.index import HybridIndex

    for what, path in (("evaluator", args.evaluator), ("extractor", args.extractor)):
        if path and path != "none" and not Path(path).is_dir():
            sys.exit(f"error: {what} export not found: {path} (run `make quickstart` / `make quickstart-models`, "
                     f"or pass --{what} DIR{' or none' if what == 'extractor' else ''})")

    dev = dev_questions(args.seed, args.dev_ratio)
    need = args.questions + args.removed
    if len(dev) < need:
        sys.exit(f"error: {len(dev)} dev questions, asked for {need} (--questions + --removed)")
    full_q, removed_pool = dev[: args.questions], dev[args.questions:]

    corpus = list(open_source("nq-open", input=str(NQ)).corpus())
    norm = [normalize_answer(f"{p.title} {p.text}") for p in corpus]
    # the removed set: questions whose answers occur in few passages (so removing them leaves a corpus
    # that is still the same corpus), all those passages dropped
    removed_q, drop = [], set()
    for ex in removed_pool:
        hits = {i for i, t in enumerate(norm) if contains_answer("", ex.answers, normalized_text=t)}
        if len(hits) <= 5:
            removed_q.append(ex)
            drop |= hits
        if len(removed_q) == args.removed:
            break
    kept_ids = {p.id for i, p in enumerate(corpus) if i not in drop}

    work = Path(args.work)
    dense = args.dense_model
    if dense == "auto":
        from inference.loading import read_export

        dense = args.evaluator if read_export(args.evaluator).manifest.spec.head == "bi-encoder" else "minilm"
    if dense == "minilm":
        encoder = DenseEncoder()
    else:  # its own index folders: named after the model and the hash of its weights
        from data_prep.build import file_sha256
        from pipeline.index import load_encoder

        encoder = load_encoder(str(Path(dense).resolve()))
        stamp = next((Path(dense) / f for f in ("model.safetensors", "config.json") if (Path(dense) / f).is_file()))
        work = work / f"{Path(dense).name}-{file_sha256(stamp)[:10]}"
    t_index = time.perf_counter()
    strip_words = 50 if args.strip_vectors else None
    if strip_words:
        work = work.with_name(work.name + "-strips")
    build(work / "full", chunks_from_source("nq-open", input=str(NQ)), encoder, "full", strip_words)
    build(work / "removed", (c for c in chunks_from_source("nq-open", input=str(NQ)) if c.doc_id in kept_ids),
          encoder, "removed", strip_words)
    index_s = time.perf_counter() - t_index

    ev = inference.load(args.evaluator, task="evaluator")
    ex = inference.load(args.extractor, task="extractor") if args.extractor and args.extractor != "none" else None
    ac = inference.load(args.answer_classifier, task="answer_classifier") if args.answer_classifier else None
    cfg = PipelineConfig(max_words=args.max_words, naive_k=5,
                         grading=GradingConfig(grade_k=args.grade_k, corpus_mode=args.corpus_mode),
                         refine=RefineConfig(refine_correct=not args.no_refine_correct))

    results = {}
    for name, qs in (("full", full_q), ("removed", removed_q)):
        index = HybridIndex.load(work / name, encoder=encoder)
        # the answers really are gone from the removed index
        if name == "removed":
            texts = [normalize_answer(f"{c.title} {c.text}") for c in index.iter_chunks()]
            leaks = sum(any(contains_answer("", q.answers, normalized_text=t) for t in texts) for q in qs)
            assert leaks == 0, f"{leaks} removed-set answers still in the index"
        pipe = CragPipeline(index, ev, ex, ac, config=cfg)
        print(f"{name}: {len(qs)} questions over {len(index)} chunks; grading reuses the index's vectors: "
              f"{pipe.index_vectors.why_not or 'yes'}; corpus mode: {pipe.corpus_grading or 'yes'}", flush=True)
        results[name] = run_set(pipe, qs, name)
        results[name]["chunks"] = len(index)
        results[name]["grading_reuses_index_vectors"] = pipe.index_vectors.why_not or True
        results[name]["graded_in_corpus_mode"] = pipe.corpus_grading or True
        results[name]["vectors_handed_over"] = {"chunks": pipe.index_vectors.handed,
                                                "strips": pipe.index_vectors.strips_handed}

    naive_ms = results["full"]["naive"]["stage_ms"]["total"]["median"]
    crag_ms = results["full"]["crag"]["stage_ms"]["total"]["median"]
    f, r = results["full"], results["removed"]
    report = {
        "naive_ms": naive_ms, "crag_ms": crag_ms, "overhead_ratio": round(crag_ms / naive_ms, 3),
        "answer_recall": {"naive": f["naive"]["answer_recall"], "crag": f["crag"]["answer_recall"]},
        "answer_precision": {"naive": f["naive"]["answer_precision"], "crag": f["crag"]["answer_precision"]},
        "abstain_rate": {"full": {"naive": f["naive"]["abstain_rate"], "crag": f["crag"]["abstain_rate"]},
                         "removed": {"naive": r["naive"]["abstain_rate"], "crag": r["crag"]["abstain_rate"]}},
        "targets": {
            "overhead_ratio_below_2": crag_ms / naive_ms < 2,
            "crag_recall_above_naive": f["crag"]["answer_recall"] > f["naive"]["answer_recall"],
            "crag_abstains_on_most_removed": r["crag"]["abstain_rate"] > 0.5,
            "naive_never_abstains": r["naive"]["abstain_rate"] == 0 and f["naive"]["abstain_rate"] == 0,
        },
        "sets": results,
        "settings": {"evaluator": args.evaluator, "extractor": args.extractor if ex else None,
                     "answer_classifier": args.answer_classifier, "grade_k": args.grade_k,
                     "max_words": args.max_words, "refine_correct": not args.no_refine_correct,
                     "strip_vectors": bool(strip_words), "corpus_mode": args.corpus_mode, "questions": len(full_q), "removed": len(removed_q),
                     "removed_passages": len(drop), "index_build_s": round(index_s, 1),
                     "dense_model": dense if dense != "minilm" else "packaged MiniLM", "index_dir": str(work)},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("naive_ms", "crag_ms", "overhead_ratio", "answer_recall", "answer_precision", "abstain_rate",
                                             "targets")}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
