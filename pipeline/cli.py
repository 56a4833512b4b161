"""``python -m pipeline``: build an index, ask a question, evaluate on questions with gold answers.

    python -m pipeline index --format nq-open --input data/sample/nq_open/nq-open-oracle.jsonl.gz --out outputs/index/nq-open
    python -m pipeline index --files docs/ manuals/ --out outputs/index/manuals
    python -m pipeline ask "who got the first nobel prize in physics" --index outputs/index/nq-open \\
        --evaluator outputs/evaluator-quickstart [--extractor DIR] [--answer-classifier DIR] [--web-url URL] [--json]
    python -m pipeline evaluate --index DIR --questions FILE --format nq-open --evaluator DIR [--mode naive|crag] \\
        --output-json OUT

Bad input gets a message and exit code 2, never a stack trace: an empty question, a missing or
incomplete index, an export of the wrong task, an unreadable config. A web searcher or an LLM
server that fails makes the answer degrade honestly (an abstention, with a note saying why).

``index`` stops at the first bad row of a reader format (``file:line: what is wrong``, e.g. a
Self-RAG/PopQA row with an empty retrieved passage); ``--skip-bad`` leaves such rows out, counts
them (printed, and in the index's ``index.json``, ``"rejects"``) and keeps them unchanged in
``<out>.rejects/`` beside the index folder (which is replaced wholesale on ``--overwrite``). One
``index`` builds a folder at a time: a second one on the same ``--out`` is refused while the first
runs (``<out>.lock``, :mod:`data_prep.locking`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from data_prep.locking import locks_output

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# index


@locks_output("args.out", "index")  # one build per folder, before anything is read or written
def run_index(args: argparse.Namespace) -> int:
    from data_prep.cluster import ray_options
    from data_prep.io import Rejects, rejected_line, require_records
    from data_prep.tokenization import TokenizerConfig

    from .chunking import chunks_from_files, chunks_from_source
    from .index import build_index

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out is a file, not a folder: {out}")
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise ValueError(f"index folder exists: {out} (pass --overwrite to rebuild it)")
    chunking = {"max_chars": args.max_chars, "overlap": args.overlap, "unit": args.unit}
    rejects, rdir = None, out.parent / f"{out.name}.rejects"
    if args.files:
        if args.format or args.input:
            raise ValueError("give either --files or --format/--input, not both")
        if args.skip_bad:
            raise ValueError("--skip-bad skips bad rows of a reader format (--format/--input); --files reads whole "
                             "documents, which have no rows to skip")
        chunks = chunks_from_files(args.files, **chunking)
    else:
        if not (args.format and args.input):
            raise ValueError("give --format and --input (any data_prep reader format), or --files")
        opts = {k: getattr(args, k) for k in ("corpus", "queries", "qrels", "split") if getattr(args, k)}
        if args.skip_bad:  # beside the index folder, which a rebuild replaces wholesale
            shutil.rmtree(rdir, ignore_errors=True)  # left by an earlier build of this index: start clean
            rejects = opts["rejects"] = Rejects(skip_bad=True, out_dir=rdir)
        chunks = chunks_from_source(args.format, input=args.input, **chunking, **opts)
        if rejects is not None:  # every row rejected: say so, rather than "the corpus is empty"
            chunks = require_records(chunks, args.input, rejects, "passages to index")
    t0 = time.time()
    # with --overwrite the old index is replaced only once the new one is complete
    try:
        index = build_index(chunks, out, tokenizer=TokenizerConfig(language=args.language),
                            dense_model=args.dense_model, show_progress=not args.no_progress,
                            chunking=chunking, overwrite=args.overwrite,
                            strip_words=50 if args.strip_vectors else None, ray=ray_options(args), rejects=rejects)
    finally:
        if rejects is not None:
            rejects.close()
    print(f"indexed {len(index)} chunks into {out} ({time.time() - t0:.1f} s)")
    if rejects is not None:
        print(rejected_line(rejects.summary(), rdir))
    return 0


# --------------------------------------------------------------------------------------------
# ask / evaluate


def make_pipeline(args: argparse.Namespace):
    import inference

    from .core import CragPipeline, PipelineConfig
    from .credibility import CredibilityTable
    from .generate import make_generator
    from .index import HybridIndex

    settings: dict[str, Any] = {}
    if args.config:
        import yaml

        path = Path(args.config)
        if not path.is_file():
            raise ValueError(f"config file not found: {path}")
        try:
            settings = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: cannot read the pipeline config ({' '.join(str(e).split())})") from None
        if not isinstance(settings, dict):
            raise ValueError(f"{path}: a pipeline config is a mapping of settings")
    grading = settings.pop("grading", {}) or {}
    if not isinstance(grading, dict):
        raise ValueError(f"{args.config}: 'grading' is a mapping of settings, got {type(grading).__name__}")
    grading = dict(grading)
    for key, arg in (("theta_high", args.theta_high), ("theta_low", args.theta_low), ("grade_k", args.grade_k)):
        if arg is not None:
            grading[key] = arg
    if args.two_tier:
        grading["two_tier"] = True
    if args.corpus_mode:
        grading["corpus_mode"] = True
    settings["grading"] = grading
    if args.rounds is not None:
        settings["max_rounds"] = args.rounds
    if args.max_words is not None:
        settings["max_words"] = args.max_words
    config = PipelineConfig.from_dict(settings)
    index = HybridIndex.load(args.index)
    evaluator = inference.load(args.evaluator, task="evaluator", device=args.device)
    extractor = inference.load(args.extractor, task="extractor", device=args.device) if args.extractor else None
    classifier = (inference.load(args.answer_classifier, task="answer_classifier", device=args.device)
                  if args.answer_classifier else None)
    searcher = None
    if args.web_url:
        from .web import JsonHttpSearcher

        fields = {"title": "title", "text": "snippet", "url": "url", "published": "published"}
        for item in args.web_field or []:
            if "=" not in item:
                raise ValueError(f"--web-field takes NAME=PATH (e.g. text=body.snippet), got {item!r}")
            k, v = item.split("=", 1)
            fields[k] = v
        searcher = JsonHttpSearcher(args.web_url, results_path=args.web_results_path, fields=fields,
                                    timeout=args.web_timeout, api_key_env=args.web_api_key_env)
    gen_kw: dict[str, Any] = {"max_words": config.max_words}
    if args.generator == "openai":
        if not args.llm_url or not args.llm_model:
            raise ValueError("--generator openai needs --llm-url and --llm-model")
        gen_kw.update(base_url=args.llm_url, model=args.llm_model, api_key_env=args.llm_api_key_env)
    elif args.generator == "local":
        if not args.llm_model:
            raise ValueError("--generator local needs --llm-model (a local chat model folder)")
        gen_kw.update(model_path=args.llm_model)
    generator = make_generator(args.generator, **gen_kw)
    credibility = CredibilityTable.from_file(args.credibility) if args.credibility else None
    pipeline = CragPipeline(index, evaluator, extractor, classifier, searcher, generator, credibility, config)
    if config.grading.corpus_mode and pipeline.corpus_grading is not None:
        raise ValueError(f"corpus-mode grading asked for, but {pipeline.corpus_grading}")
    return pipeline


def print_result(r) -> None:
    if r.mode == "crag":
        print(f"action: {r.action}" + (f"  (queries: {' | '.join(r.queries)})" if len(r.queries) > 1 else ""))
        print("graded chunks:")
        for c in r.graded:
            mark = "kept" if c.kept else f"dropped: {c.dropped_because}"
            extra = f", answer {c.answer_score:.3f}" if c.answer_score is not None else ""
            print(f"  {c.score:.3f} {c.action:9s} [{c.origin}] {c.chunk.id} {c.chunk.title!r}{extra} ({mark})")
    print("evidence:")
    for i, e in enumerate(r.evidence):
        print(f"  [{i}] ({e.source or '-'}, credibility {e.credibility:.2f}, score {e.score:.3f}) {e.text}")
    for c in r.conflicts:
        print(f"conflict: {c.note}")
    print(f"answer: {r.answer.text}")
    if r.answer.citations:
        print(f"cited: {', '.join(f'[{i}]' for i in r.answer.citations)}")
    if r.answer.conflict_choice:
        print(f"conflict choice: {r.answer.conflict_choice}")
    for n in r.notes:
        print(f"note: {n}")
    print("time (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in r.timings_ms.items()))


def run_ask(args: argparse.Namespace) -> int:
    pipeline = make_pipeline(args)
    result = pipeline.run(args.question, args.mode)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    else:
        print_result(result)
    return 0


def read_questions(path: str, fmt: str, limit: int | None) -> list[tuple[str, str, list[str]]]:
    from data_prep.readers import open_source

    out = []
    for ex in open_source(fmt, input=path).queries():
        answers = [a for a in ex.answers if a.strip()]
        if answers:
            out.append((ex.id, ex.query, answers))
        if limit and len(out) >= limit:
            break
    if not out:
        raise ValueError(f"{path}: no questions with gold answers")
    return out


def run_evaluate(args: argparse.Namespace) -> int:
    from data_prep.io import write_json

    from .core import summarize

    out = Path(args.output_json)
    if out.exists() and not args.overwrite:
        raise ValueError(f"output exists: {out} (pass --overwrite to replace it)")
    questions = read_questions(args.questions, args.format, args.limit)
    pipeline = make_pipeline(args)
    results = []
    from tqdm import tqdm

    for _, q, _ in tqdm(questions, desc=f"questions ({args.mode})", disable=args.no_progress or None):
        results.append(pipeline.run(q, args.mode))
    summary = summarize(results, [a for _, _, a in questions])
    summary.update({"mode": args.mode, "questions": str(args.questions), "index": str(args.index),
                    "evaluator": str(args.evaluator), "extractor": args.extractor,
                    "answer_classifier": args.answer_classifier, "max_words": pipeline.config.max_words})
    if args.per_question:
        summary["per_question"] = [{"id": qid, "question": q, "answers": a, "answer": r.answer.text,
                                    "abstained": r.answer.abstained, "action": r.action}
                                   for (qid, q, a), r in zip(questions, results)]
    write_json(out, summary)
    print(f"{args.mode}: n {summary['n']}, answer_recall {summary['answer_recall']:.3f}, abstain_rate "
          f"{summary['abstain_rate']:.3f}, mean_answer_words {summary['mean_answer_words']:.1f}; "
          f"median total {summary['stage_ms']['total']['median']:.0f} ms; written to {out}")
    return 0


# --------------------------------------------------------------------------------------------
# parser


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", required=True, help="a pipeline index folder (python -m pipeline index)")
    p.add_argument("--evaluator", required=True, help="an evaluator export")
    p.add_argument("--extractor", default=None, help="an extractor export (key sentences for refinement)")
    p.add_argument("--answer-classifier", default=None, help="an answer_classifier export (drops chunks that cannot answer)")
    p.add_argument("--mode", choices=["crag", "naive"], default="crag", help="crag (default) or naive RAG")
    p.add_argument("--config", default=None, help="a YAML file of pipeline settings (weights, route_k, grading, refine, ...)")
    p.add_argument("--theta-high", type=float, default=None, help="override the evaluator's theta_high")
    p.add_argument("--theta-low", type=float, default=None, help="override the evaluator's theta_low")
    p.add_argument("--two-tier", action="store_true", help="one threshold, no Ambiguous")
    p.add_argument("--grade-k", type=int, default=None, help="fused hits the evaluator grades (default 5)")
    p.add_argument("--corpus-mode", action="store_true",
                   help="grade in the evaluator's corpus mode, the index as the corpus (a bi-encoder evaluator trained "
                        "with corpus_norm whose weights embedded the index); default: pair by pair")
    p.add_argument("--rounds", type=int, default=None, help="retrieval rounds, 1-3 (default 1)")
    p.add_argument("--max-words", type=int, default=None, help="the answer's word budget (default 50)")
    p.add_argument("--credibility", default=None, help="a source-credibility table (JSON or YAML)")
    p.add_argument("--web-url", default=None, help="JSON search endpoint URL template with {query} (and {k}); "
                   "off by default (privacy mode)")
    p.add_argument("--web-results-path", default="results", help="dotted path of the result list in its JSON")
    p.add_argument("--web-field", action="append", help="NAME=PATH mapping of a result field (title, text, url, published)")
    p.add_argument("--web-timeout", type=float, default=10.0)
    p.add_argument("--web-api-key-env", default=None, help="environment variable holding the search API key")
    p.add_argument("--generator", choices=["extractive", "openai", "local"], default="extractive")
    p.add_argument("--llm-url", default=None, help="OpenAI-compatible base URL (generator openai)")
    p.add_argument("--llm-model", default=None, help="model name (openai) or local model folder (local)")
    p.add_argument("--llm-api-key-env", default=None, help="environment variable holding the LLM API key")
    p.add_argument("--device", default=None, help="device for the models (default: CUDA, then CPU)")


def build_parser() -> argparse.ArgumentParser:
    from data_prep.cluster import add_ray_args

    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    i = sub.add_parser("index", help="chunk a corpus and build its BM25 + dense index")
    i.add_argument("--out", required=True, help="index folder")
    i.add_argument("--format", default=None, help="any data_prep reader format (its corpus is indexed)")
    i.add_argument("--input", default=None, help="the reader's input")
    for opt in ("corpus", "queries", "qrels", "split"):
        i.add_argument(f"--{opt}", default=None, help=f"reader option {opt}")
    i.add_argument("--files", nargs="+", default=None, help="plain text / Markdown files or folders instead")
    i.add_argument("--max-chars", type=int, default=256, help="chunk size (characters, or words with --unit words)")
    i.add_argument("--overlap", type=int, default=32, help="overlap between consecutive chunks")
    i.add_argument("--unit", choices=["chars", "words"], default="chars")
    i.add_argument("--language", choices=["en", "zh", "none"], default="en", help="BM25 tokenisation (zh: jieba)")
    i.add_argument("--dense-model", default=None, help="sentence-embedding model folder (default: the packaged "
                   "MiniLM); none: BM25 only")
    i.add_argument("--strip-vectors", action="store_true",
                   help="also embed each chunk's sentences (refinement strips): a bi-encoder evaluator of the same "
                        "weights then grades and refines without a model pass (about 3x the embedding time)")
    i.add_argument("--overwrite", action="store_true")
    i.add_argument("--skip-bad", action="store_true",
                   help="skip bad rows of --format/--input (e.g. a PopQA row with an empty passage) instead of stopping "
                        "at the first; they are counted (printed, and in index.json) and kept unchanged in "
                        "<out>.rejects/ beside the index folder")
    i.add_argument("--no-progress", action="store_true")
    add_ray_args(i.add_argument_group("Ray cluster: chunk embedding on an actor pool (pipeline.index.embed_on_ray)"))
    i.set_defaults(func=run_index)
    a = sub.add_parser("ask", help="answer one question (prints the action, graded chunks, evidence, answer, times)")
    a.add_argument("question")
    _model_args(a)
    a.add_argument("--json", action="store_true", help="one JSON object instead of text")
    a.set_defaults(func=run_ask)
    e = sub.add_parser("evaluate", help="answer recall, abstention rate and stage times on questions with gold answers")
    e.add_argument("--questions", required=True, help="questions with gold answers (nq-open, popqa, queries JSONL, ...)")
    e.add_argument("--format", required=True, help="their format")
    e.add_argument("--limit", type=int, default=None, help="at most this many questions")
    e.add_argument("--output-json", required=True)
    e.add_argument("--per-question", action="store_true", help="also write each question's answer")
    e.add_argument("--overwrite", action="store_true")
    e.add_argument("--no-progress", action="store_true")
    _model_args(e)
    e.set_defaults(func=run_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from data_prep.io import DataError, MissingInputError
    from inference import ExportError

    try:
        return int(args.func(args) or 0)
    except (DataError, MissingInputError, ExportError, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
