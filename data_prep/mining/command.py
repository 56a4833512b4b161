"""``python -m data_prep mine``: BM25 hard-negative mining, sharded, resumable and deterministic.

The command line: its options, the :class:`~data_prep.mining.config.MiningConfig` they make
(:func:`config_from_args`), and :func:`main`, which opens the source and runs
:func:`~data_prep.mining.run.run_mining` with the output locked.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

from ..bm25 import ENGINES, BM25Params
from ..cluster import add_ray_args, ray_options
from ..io import Rejects
from ..locking import locks_output
from ..tokenization import LANGUAGES, TokenizerConfig
from .config import LUCENE_TEXTS, MINING_BACKENDS, SAMPLING, MiningConfig, parse_shard, parse_window
from .run import lock_target, run_mining

logger = logging.getLogger(__name__)


class _Formatter(argparse.HelpFormatter):
    """Shows a default only where there is one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in h:
            h += " (default: %(default)s)"
        return h


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "mine",
        help="mine BM25 hard negatives (sharded, resumable)",
        description=__doc__.split("\n\n")[0],
        formatter_class=_Formatter,
    )
    g = p.add_argument_group("input / output")
    g.add_argument("--format", required=True, help="input format (see data_prep.readers.FORMATS)")
    g.add_argument("--input", help="input file or folder")
    g.add_argument("--corpus", help="corpus file, when the format keeps it apart")
    g.add_argument("--queries", help="queries file, when the format keeps them apart")
    g.add_argument("--qrels", help="qrels file, when the format has one")
    g.add_argument("--split", help="split name (formats with splits)")
    g.add_argument("--output", required=True, help="output folder (examples.jsonl, meta.json, shards/)")
    g.add_argument("--index-dir", help="BM25 index folder to build or reuse (default: OUTPUT/index)")
    g.add_argument("--rebuild-index", action="store_true", help="delete --index-dir and build it again")
    g.add_argument("--overwrite", action="store_true", help="discard finished shards of a run with other settings")
    g.add_argument("--skip-bad", action="store_true", help="skip malformed rows (written unchanged to OUTPUT/rejects)")

    g = p.add_argument_group("BM25")
    g.add_argument("--engine", choices=ENGINES, default="bm25s", help="bm25s (fast) or rank-bm25 (reference)")
    g.add_argument("--language", choices=LANGUAGES, default="en", help="tokenizer language (zh: jieba)")
    g.add_argument("--stem", action="store_true", help="Snowball stemming (PyStemmer)")
    g.add_argument("--no-stopwords", action="store_true", help="keep English stopwords")
    g.add_argument("--no-code-tokens", action="store_true", help="do not index codes like E-204 whole")
    g.add_argument("--no-lowercase", action="store_true", help="keep case")
    g.add_argument("--jieba-mode", choices=("search", "accurate"), default="search", help="zh: cut_for_search or lcut")
    g.add_argument("--bm25-backend", choices=MINING_BACKENDS, default="auto",
                   help="retrieval backend; pruned: exact top k that skips most postings (numba); numpy, numba: "
                   "bm25s's exhaustive scoring; auto: pruned (with --exhaustive: numba when queries x passages >= 5e9, "
                   "else numpy)")
    g.add_argument("--exhaustive", action="store_true",
                   help="score every posting of every query term (the path before pruning, for comparison)")
    g.add_argument("--lucene-index", help="with --bm25-backend lucene: an Anserini/Pyserini Lucene index folder, "
                   "searched with Anserini's batch search (Java 21+ and its fat jar: pip install 'crag-evaluators[bench]')")
    g.add_argument("--lucene-texts", choices=LUCENE_TEXTS, default="index",
                   help="lucene: read the hits' passages from the index (built with -storeRaw) or from the source's "
                   "corpus (its ids must be the index's docids; needed for --easy-ratio)")
    g.add_argument("--lucene-pretokenized", action="store_true",
                   help="lucene: the index holds our tokenizer's tokens (built with -pretokenized); queries are "
                   "tokenised the same way (else Lucene analyses the raw query text as it analysed the documents)")
    g.add_argument("--k1", type=float, default=1.5, help="BM25 term-frequency saturation")
    g.add_argument("--b", type=float, default=0.75, help="BM25 length normalisation")

    g = p.add_argument_group("negatives")
    g.add_argument("--depth", type=int, default=100, help="hits retrieved per query")
    g.add_argument("--window", default="3:100",
                   help="rank window START:END to draw hard negatives from, a Python slice of the ranked hits "
                   "(3:100 = ranks 4-100)")
    g.add_argument("--negatives", type=int, default=7, help="negatives per query")
    g.add_argument("--sampling", choices=SAMPLING, default="top", help="best valid hits of the window, or random ones")
    g.add_argument("--easy-ratio", type=float, default=0.0, help="share of random corpus passages among the negatives")
    g.add_argument("--keep-answer-hits", action="store_true", help="do not drop hits that contain a gold answer")
    g.add_argument("--answer-hits", type=int, default=0,
                   help="keep the top K hits (positives aside, answer-bearing or not) in metadata['answer_hits'] for "
                   "the answer-existence task; the evaluator's negatives still exclude answer-bearing hits")
    g.add_argument("--dense-model",
                   help="local sentence-embedding folder for the margin filter ('default': bundled all-MiniLM-L6-v2)")
    g.add_argument("--dense-margin", type=float, default=0.05,
                   help="drop candidates whose similarity is within this of the best positive's")
    g.add_argument("--seed", type=int, default=13)

    g = p.add_argument_group("scale")
    g.add_argument("--batch-size", type=int, default=256, help="queries per retrieval batch")
    g.add_argument("--threads", type=int, default=0, help="retrieval threads (0: all cores)")
    g.add_argument("--num-shards", type=int, default=None,
                   help="split the queries into N shards run in sequence (default 1; with --ray: the resumed run's, "
                   "else 4 per worker)")
    g.add_argument("--shard", help="run only shard i/N (for parallel machines)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g = p.add_argument_group("Ray cluster (data_prep.cluster)")
    add_ray_args(g, ship_index=True)
    p.set_defaults(func=main)


def config_from_args(args: argparse.Namespace) -> MiningConfig:
    tok = TokenizerConfig(
        language=args.language, lowercase=not args.no_lowercase, stopwords=not args.no_stopwords,
        stem=args.stem, code_tokens=not args.no_code_tokens, jieba_mode=args.jieba_mode,
    )
    num_shards = args.num_shards
    ray = ray_options(args)
    if ray is not None and args.shard:
        raise ValueError("--shard runs one shard here; with --ray the cluster runs them all: give one or the other")
    if num_shards is None:
        from .ray import default_num_shards

        num_shards = default_num_shards(Path(args.output), ray) if ray is not None else 1
    if args.shard:
        _, n = parse_shard(args.shard)
        if num_shards not in (1, n):
            raise ValueError(f"--shard {args.shard} does not match --num-shards {num_shards}")
        num_shards = n
    return MiningConfig(
        depth=args.depth, window=parse_window(args.window), negatives=args.negatives, sampling=args.sampling,
        easy_ratio=args.easy_ratio, seed=args.seed, exclude_answers=not args.keep_answer_hits, answer_hits=args.answer_hits,
        dense_model=args.dense_model, dense_margin=args.dense_margin, engine=args.engine, tokenizer=tok,
        bm25=BM25Params(k1=args.k1, b=args.b), num_shards=num_shards, bm25_backend=args.bm25_backend, exhaustive=args.exhaustive,
        lucene_index=args.lucene_index, lucene_texts=args.lucene_texts, lucene_pretokenized=args.lucene_pretokenized,
        batch_size=args.batch_size,
        n_threads=args.threads, show_progress=not args.no_progress,
    )


@locks_output(lambda a: lock_target(a["args"].output, parse_shard(a["args"].shard) if a["args"].shard else None),
              "mining output")  # before the rejects are cleared
def main(args: argparse.Namespace) -> int:
    from ..readers import open_source

    cfg = config_from_args(args)
    out = Path(args.output)
    rejects = None
    if args.skip_bad:
        shutil.rmtree(out / "rejects", ignore_errors=True)  # rewritten by every run
        rejects = Rejects(skip_bad=True, out_dir=out / "rejects")
    kwargs = {k: getattr(args, k) for k in ("input", "corpus", "queries", "qrels", "split") if getattr(args, k)}
    source = open_source(args.format, rejects=rejects, **kwargs)
    try:
        meta = run_mining(
            source, out, cfg, index_dir=args.index_dir, shard=parse_shard(args.shard) if args.shard else None,
            overwrite=args.overwrite, rebuild_index=args.rebuild_index, rejects=rejects, ray=ray_options(args),
        )
    finally:
        if rejects is not None:
            rejects.close()
    if meta is None:
        logger.warning("shard done; run the other shards (or rerun without --shard) to merge into %s", out / "examples.jsonl")
    return 0
