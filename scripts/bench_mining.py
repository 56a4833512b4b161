"""Benchmark BM25 retrieval for mining: rank-bm25 (reference) against our default bm25s path.

A synthetic corpus with a realistic word distribution: a Zipf law (exponent 1.0) over a 200,000
word vocabulary whose most frequent entries are real English function words, passages of about
60 words, queries of 4-10 words drawn from a random passage. Both engines index the same tokens
(our English tokenizer) and answer the same queries.

rank-bm25 scores every document in Python for each query term (~1 query/s at 50k passages), so it
is timed on the first ``--rank-queries`` queries only; top-k agreement is computed on that subset.
Our path is timed on all queries, and the full mining loop (retrieval + selection + reads from
the on-disk store) on all of them too.

    python scripts/bench_mining.py --json outputs/bench/mining.json --docs 50000 --queries 1000 --k 100
    python scripts/bench_mining.py --json outputs/bench/index_1m.json --index-only --docs 1000000
    python scripts/bench_mining.py --json outputs/bench/answer_rates.json \
        --answer-rates data/sample/nq_open/nq-open-oracle.jsonl.gz
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import sys
import tempfile
import time
from array import array
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_prep.bm25 import BM25Params, Bm25sEngine, RankBM25Engine, build_csc, open_index, topk_agreement  # noqa: E402
from data_prep.mining import MiningConfig, mine_batch  # noqa: E402
from data_prep.records import Passage, QueryExample  # noqa: E402
from data_prep.tokenization import build_tokenizer  # noqa: E402

logger = logging.getLogger("bench_mining")

FUNCTION_WORDS = (
    "the of and in to a was is for as on with by he that at from his it an were are which this also be "
    "has or had first one their its new after but who not they have her she two been other when there all "
    "during into school time may years more most only over city some world would where later up such used "
    "many can state about national out known university united then made"
).split()


def synth_vocab(size: int, rng: np.random.Generator) -> list[str]:
    """Function words first, then distinct pronounceable pseudo-words (1-4 syllables)."""
    cons, vows = np.array(list("bcdfghjklmnprstvwz")), np.array(list("aeiou"))
    words, seen = list(FUNCTION_WORDS), set(FUNCTION_WORDS)
    while len(words) < size:
        m = 2 * (size - len(words)) + 100
        syl = np.char.add(rng.choice(cons, (m, 4)), rng.choice(vows, (m, 4)))
        n = rng.integers(1, 5, m)
        tail = np.where(rng.random(m) < 0.5, rng.choice(cons, m), "")
        for row, k, t in zip(syl.tolist(), n.tolist(), tail.tolist()):
            w = "".join(row[:k]) + t
            if w not in seen:
                seen.add(w)
                words.append(w)
                if len(words) == size:
                    break
    return words


class SynthCorpus:
    """Zipf-distributed passages, generated deterministically chunk by chunk (never all at once)."""

    def __init__(self, n_docs: int, vocab_size: int = 200_000, mean_len: int = 60, seed: int = 0):
        self.n_docs, self.mean_len, self.seed = n_docs, mean_len, seed
        rng = np.random.default_rng(seed)
        self.words = np.array(synth_vocab(vocab_size, rng), dtype=object)
        p = 1.0 / np.arange(1, vocab_size + 1)
        self.cdf = np.cumsum(p / p.sum())

    def _chunk(self, c: int, size: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, c])
        lens = np.clip(rng.normal(self.mean_len, 15, size).astype(int), 20, 120)
        ids = np.searchsorted(self.cdf, rng.random(lens.sum()))
        return np.split(ids, np.cumsum(lens)[:-1])

    def passages(self, chunk: int = 10_000):
        for c, start in enumerate(range(0, self.n_docs, chunk)):
            for j, ids in enumerate(self._chunk(c, min(chunk, self.n_docs - start))):
                yield Passage(id=f"s{start + j}", text=" ".join(self.words[ids]))

    def queries(self, passages: list[Passage], n: int, seed: int = 1) -> list[tuple[str, int]]:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            row = int(rng.integers(len(passages)))
            words = passages[row].text.split()
            k = int(rng.integers(4, 11))
            pick = np.sort(rng.choice(len(words), size=min(k, len(words)), replace=False))
            out.append((" ".join(words[i] for i in pick), row))
        return out


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def machine() -> dict:
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = round(int(f.readline().split()[1]) / 1024**2, 1)
    except OSError:
        pass
    gpu = None
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - informational only
        pass
    try:
        import numba  # noqa: F401

        backend = "numba"
    except ImportError:
        backend = "numpy"
    return {
        "cpus": os.cpu_count(), "memory_gib": mem, "gpu": gpu, "platform": platform.platform(),
        "python": platform.python_version(), "bm25s_backend": backend,
    }


def index_only(args) -> dict:
    corpus = SynthCorpus(args.docs, seed=args.seed)
    t0 = time.perf_counter()
    for _ in corpus.passages():  # the synthetic text generation alone, to subtract from the index time
        pass
    generate_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        t0 = time.perf_counter()
        ix = open_index(Path(d) / "ix", corpus.passages, show_progress=not args.no_progress)
        total = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in (Path(d) / "ix").rglob("*") if f.is_file())
        nnz = int(ix.engine.retriever.scores["indptr"][-1])
        return {
            "mode": "index-only",
            "docs": args.docs,
            "index_s": round(total, 1),
            "generate_s": round(generate_s, 1),
            "index_net_s": round(total - generate_s, 1),
            "docs_per_s_net": round(args.docs / (total - generate_s)),
            "note": "index_s: open_index on a generator of synthetic passages (store + sha256 + tokenise + "
            "bm25s build + save + mmap load); generate_s: producing the synthetic text alone; index_net_s = the difference",
            "timings": ix.info["timings"],
            "vocab": len(ix.engine.vocab),
            "postings": nnz,
            "index_dir_mb": round(size / 1024**2, 1),
            "peak_rss_mb": peak_rss_mb(),
            "machine": machine(),
        }


def search_bench(args) -> dict:
    res: dict = {"mode": "search", "docs": args.docs, "queries": args.queries, "k": args.k}
    corpus = SynthCorpus(args.docs, seed=args.seed)
    passages = list(corpus.passages())
    queries = corpus.queries(passages, args.queries, seed=args.seed + 1)
    tok = build_tokenizer()

    t0 = time.perf_counter()
    doc_tokens = [tok(p.text) for p in passages]
    q_tokens = [tok(q) for q, _ in queries]
    res["tokenize_s"] = round(time.perf_counter() - t0, 2)
    res["mean_doc_tokens"] = round(float(np.mean([len(t) for t in doc_tokens])), 1)
    res["mean_query_tokens"] = round(float(np.mean([len(t) for t in q_tokens])), 1)

    # ours: the same tokens -> bm25s index -> save -> load with mmap
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        t0 = time.perf_counter()
        vocab: dict[str, int] = {}
        flat, lens = array("i"), array("q")
        for toks in doc_tokens:
            flat.extend(vocab.setdefault(t, len(vocab)) for t in toks)
            lens.append(len(toks))
        csc = build_csc(np.frombuffer(flat, np.int32), np.frombuffer(lens, np.int64), len(vocab), BM25Params())
        Bm25sEngine.save(Path(d) / "bm25s", csc, vocab, BM25Params())
        del csc, flat
        ours = Bm25sEngine.load(Path(d) / "bm25s", mmap=True)
        res["ours_index_s"] = round(time.perf_counter() - t0, 2)

        def qps(n_threads: int) -> float:
            t0 = time.perf_counter()
            ours.search(q_tokens, args.k, n_threads=n_threads)
            return round(len(q_tokens) / (time.perf_counter() - t0), 1)

        # numpy backend: no start-up cost (what small runs use; sequential, threads only add GIL contention)
        ours.search(q_tokens[:8], args.k)
        res["ours_qps_numpy"] = qps(args.threads)
        backend = "numba" if machine()["bm25s_backend"] == "numba" else "numpy"
        if backend == "numba":  # numba backend: compiled once per process, then multi-threaded
            ours.set_backend("numba")
            t0 = time.perf_counter()
            ours.search(q_tokens[:8], args.k, n_threads=args.threads)
            ours.search(q_tokens[:8], args.k, n_threads=1)  # the serial variant compiles separately
            res["ours_numba_compile_s"] = round(time.perf_counter() - t0, 1)
            res["ours_qps_numba_1thread"] = qps(1)
        t0 = time.perf_counter()
        ours_hits = ours.search(q_tokens, args.k, n_threads=args.threads)
        res["ours_qps"] = round(len(q_tokens) / (time.perf_counter() - t0), 1)
        res["ours_backend"] = backend
        res["ours_threads"] = args.threads

        # the reference on a subset
        t0 = time.perf_counter()
        ref = RankBM25Engine(doc_tokens, BM25Params())
        res["rank_bm25_index_s"] = round(time.perf_counter() - t0, 2)
        sub = q_tokens[: args.rank_queries]
        t0 = time.perf_counter()
        ref_scores = [ref.scores(q) for q in sub]
        ref_hits = []
        for s in ref_scores:
            top = np.argsort(-s, kind="stable")[: args.k]
            ref_hits.append(top[s[top] > 0])
        rank_s = time.perf_counter() - t0
        res["rank_bm25_qps"] = round(len(sub) / rank_s, 3)
        res["rank_bm25_timed_queries"] = len(sub)
        res["ratio"] = round(res["ours_qps"] / res["rank_bm25_qps"], 1)
        res["ratio_numpy"] = round(res["ours_qps_numpy"] / res["rank_bm25_qps"], 1)
        res["topk_agreement"] = round(float(np.mean([topk_agreement(o[0], r, s) for o, r, s in zip(ours_hits, ref_hits, ref_scores)])), 4)
        res["topk_agreement_strict"] = round(float(np.mean([topk_agreement(o[0], r) for o, r in zip(ours_hits, ref_hits)])), 4)
        res["agreement_subset"] = f"first {len(sub)} queries (tie-aware: a missing document that ties the k-th reference score counts)"
        del ref, ref_scores

        # the whole mining loop on our path: retrieval + filters + reads from the on-disk store
        if not args.no_mine:
            ix = open_index(Path(d) / "ix", lambda: iter(passages), show_progress=False)
            res["ours_index_pipeline_s"] = ix.info["timings"]["total_build_s"]
            ix.engine.set_backend(backend)
            cfg = MiningConfig(depth=args.k, window=(3, args.k), negatives=7, show_progress=False, n_threads=args.threads)
            qex = [QueryExample(id=f"q{i}", query=q, positives=[passages[row]]) for i, (q, row) in enumerate(queries)]
            counts: Counter = Counter()
            t0 = time.perf_counter()
            for i in range(0, len(qex), 256):
                mine_batch(qex[i : i + 256], ix, cfg, counts)
            res["ours_mine_qps"] = round(len(qex) / (time.perf_counter() - t0), 1)
    res["peak_rss_mb"] = peak_rss_mb()
    res["machine"] = machine()
    return res


def answer_rates(args) -> dict:
    """Where false negatives live: for each BM25 rank, the share of hits (other than the gold
    passage) that contain a gold answer, on a real NQ-open file (justifies the default window)."""
    from data_prep.readers import open_source
    from data_prep.text import contains_answer

    src = open_source("nq-open", input=args.answer_rates)
    queries = list(src.queries())
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        ix = open_index(Path(d) / "ix", src.corpus, show_progress=False)
        hits = ix.search([q.query for q in queries], args.k)
        with_answer, total, gold_rank = np.zeros(args.k), np.zeros(args.k), []
        for q, (rows, _) in zip(queries, hits):
            pos_ids, pos_texts = {p.id for p in q.positives}, {p.text for p in q.positives}
            found = None
            for r, row in enumerate(rows):
                p = ix.store[int(row)]
                if p.id in pos_ids or p.text in pos_texts:
                    found = r if found is None else found
                    continue
                total[r] += 1
                with_answer[r] += contains_answer(p.full_text(" "), q.answers)
            gold_rank.append(args.k if found is None else found)
    gold_rank = np.array(gold_rank)
    buckets = [(1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, 50), (51, 100)]
    return {
        "mode": "answer-rates",
        "input": args.answer_rates,
        "queries": len(queries),
        "gold_rank_share": {f"top{n}": round(float(np.mean(gold_rank < n)), 3) for n in (1, 3, 10, 100)},
        "answer_rate_by_rank": {
            f"{a}-{b}" if a != b else str(a): {
                "rate": round(float(with_answer[a - 1 : b].sum() / max(total[a - 1 : b].sum(), 1)), 4),
                "hits": int(total[a - 1 : b].sum()),
            }
            for a, b in buckets
            if b <= args.k
        },
        "machine": machine(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the figures here")
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--rank-queries", type=int, default=50, help="queries timed with rank-bm25 (it is slow)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="retrieval threads for our path")
    ap.add_argument("--index-only", action="store_true", help="only build our index (full pipeline) and report time and memory")
    ap.add_argument("--no-mine", action="store_true", help="skip the end-to-end mining timing")
    ap.add_argument("--answer-rates", metavar="NQ_OPEN_FILE", help="instead: answer-containing hits by BM25 rank on a real NQ-open file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tmp", default=None, help="folder for temporary indexes")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.answer_rates:
        res = answer_rates(args)
    else:
        res = index_only(args) if args.index_only else search_bench(args)
    res["command"] = "python scripts/bench_mining.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    logger.info("%s", json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
