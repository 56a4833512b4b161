"""BM25 mining at MS MARCO's size: our index and pruned search against Lucene (Anserini), one run.

The corpus is MS MARCO-shaped synthetic text (``bench_mining.SynthCorpus``: a Zipf law over a
200,000-word vocabulary whose most frequent words are real English function words), about 56 words
a passage, generated chunk by chunk and never held in memory whole; ``--docs`` defaults to MS
MARCO's 8,841,823 passages. Queries are 3-9 words (6 on average, as MS MARCO's) of a random passage,
which is their positive.

* **Ours**: the path ``python -m data_prep mine`` takes. :func:`data_prep.mining.run_mining`
  builds the corpus store and the BM25 index from the passage stream (``open_index``), loads it
  memory-mapped, and mines every query at depth 100 with the default guards (window 3:100, 7
  negatives, positive and answer filters). ``index_s`` is that build; ``mine_qps`` the whole mining
  loop; ``search_qps`` the top-100 search alone on the loaded index (query tokenisation included);
  ``peak_rss_mb`` the largest resident memory of this process and its children, sampled every
  0.2 s, while indexing and while mining.
* **Lucene**: Anserini's ``IndexCollection`` on the same tokens (our tokenizer's output, a JSON
  collection read with ``-pretokenized``), ``SearchCollection`` with the same k1 and b, the same
  thread count and depth; ``search_qps`` is the rate Anserini logs (JVM start-up excluded). Two
  similarities, each with its own index: ``bm25accurate`` (exact document lengths, the one whose
  figures are the top-level ``ratio_search`` and ``top100_overlap``) and ``bm25`` (Lucene's default,
  lengths stored in one byte), both under ``lucene_variants``.
  Lucene needs Java 21+ and Anserini's fat jar (``pip install 'crag-evaluators[bench]'``); without
  them this half is skipped with the command to run.
* **Same work**: ``top100_overlap`` is the mean share of each query's top 100 found in both. Lucene
  scores with its own idf (``log(1 + (N - df + 0.5) / (df + 0.5))``; ours is Okapi's, as rank-bm25)
  and, by default, one-byte document lengths, so the lists differ slightly; the run fails (exit 1) if the overlap falls under ``--min-overlap``.
  Our pruned search is also checked against our exhaustive search on ``--exhaustive-queries``
  queries (``pruned_equals_exhaustive``, tie-aware), whose rate is reported too.

    python scripts/bench_scale.py --docs 1000000 --json outputs/bench/scale-1m.json
    python scripts/bench_scale.py --json outputs/bench/scale-8.8m.json          # MS MARCO size
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mining import SynthCorpus, machine  # noqa: E402
from data_prep.bm25 import BM25Params, load_index, topk_equal  # noqa: E402
from data_prep.lucene import dir_bytes  # noqa: E402
from data_prep.mining import MiningConfig, run_mining  # noqa: E402
from data_prep.readers import Source  # noqa: E402
from data_prep.records import Passage, QueryExample  # noqa: E402
from data_prep.tokenization import build_tokenizer  # noqa: E402

logger = logging.getLogger("bench_scale")
MSMARCO_DOCS = 8_841_823
CHUNK = 10_000


class ScaleCorpus(SynthCorpus):
    """MS MARCO-shaped synthetic passages (56 words on average), ids ``"0"``..``"N-1"``."""

    def __init__(self, n_docs: int, seed: int = 0):
        super().__init__(n_docs, mean_len=56, seed=seed)

    def chunk_texts(self, c: int) -> list[str]:
        size = min(CHUNK, self.n_docs - c * CHUNK)
        return [" ".join(self.words[ids]) for ids in self._chunk(c, size)]

    def passages(self, chunk: int = CHUNK):
        for c in range(0, (self.n_docs + CHUNK - 1) // CHUNK):
            for j, text in enumerate(self.chunk_texts(c)):
                yield Passage(id=str(c * CHUNK + j), text=text)

    def scale_queries(self, n: int, seed: int = 1) -> list[QueryExample]:
        """``n`` queries of 3-9 words of random passages (each passage's chunk generated once)."""
        rng = np.random.default_rng(seed)
        rows = rng.integers(self.n_docs, size=n)
        lengths = rng.integers(3, 10, size=n)
        out: list[QueryExample | None] = [None] * n
        for c in np.unique(rows // CHUNK):
            texts = self.chunk_texts(int(c))
            for i in np.flatnonzero(rows // CHUNK == c):
                row = int(rows[i])
                text = texts[row - int(c) * CHUNK]
                words = text.split()
                pick = np.sort(rng.choice(len(words), size=min(int(lengths[i]), len(words)), replace=False))
                out[i] = QueryExample(id=f"q{i}", query=" ".join(words[j] for j in pick),
                                      positives=[Passage(id=str(row), text=text)], source="synthetic")
        return out  # type: ignore[return-value]


class PeakMemory:
    """Samples the resident memory of this process and its children (psutil) until stopped; the
    peak is kept per phase (``phase`` is switched by the caller or by ``watch``)."""

    def __init__(self, interval: float = 0.2, watch: tuple[Path, str] | None = None):
        import psutil

        self._proc = psutil.Process()
        self.interval, self.watch = interval, watch
        self.phase = "start"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        total = 0
        for p in [self._proc, *self._proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a child that just ended
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.watch is not None and self.watch[0].exists():
                self.phase, self.watch = self.watch[1], None
            mb = self._rss() / 2**20
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), mb)
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


# --------------------------------------------------------------------------------------------
# Lucene's input: our tokens as a pretokenized JSON collection (preparation, not timed)


def _lucene_chunk(args: tuple[int, int, int]) -> list[str]:
    n_docs, seed, c = args
    corpus = _worker_corpus(n_docs, seed)
    tok = build_tokenizer()
    return [json.dumps({"id": str(c * CHUNK + j), "contents": " ".join(tok(t))}) for j, t in enumerate(corpus.chunk_texts(c))]


_WORKER: dict = {}


def _worker_corpus(n_docs: int, seed: int) -> ScaleCorpus:
    key = (n_docs, seed)
    if key not in _WORKER:
        _WORKER.clear()
        _WORKER[key] = ScaleCorpus(n_docs, seed)
    return _WORKER[key]


def write_lucene_collection(n_docs: int, seed: int, out: Path, processes: int, n_files: int = 16) -> float:
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    files = [open(out / f"docs-{i:05d}.jsonl", "w", encoding="utf-8") for i in range(n_files)]
    n_chunks = (n_docs + CHUNK - 1) // CHUNK
    try:
        with mp.get_context("fork").Pool(processes) as pool:
            for c, lines in enumerate(pool.imap(_lucene_chunk, [(n_docs, seed, c) for c in range(n_chunks)], chunksize=4)):
                files[c % n_files].write("\n".join(lines) + "\n")
    finally:
        for f in files:
            f.close()
    return time.perf_counter() - t0


def run_lucene(args, corpus_n: int, queries: list[QueryExample], work: Path) -> dict | None:
    from data_prep.lucene import Anserini, LuceneError

    try:
        ans = Anserini.find(heap=args.lucene_heap)
    except LuceneError as e:
        logger.warning("Lucene half skipped: %s", e)
        return None
    coll, index = work / "lucene-collection", work / "lucene-index"
    logger.info("Lucene: writing the pretokenized collection (%d processes; not timed)", args.threads)
    prep_s = write_lucene_collection(corpus_n, args.seed, coll, args.threads)
    tok = build_tokenizer()
    texts = [" ".join(tok(q.query)) for q in queries]
    out = {}
    for variant in args.lucene_variants.split(","):
        accurate = variant == "bm25accurate"
        flag = "-bm25.accurate" if accurate else "-bm25"
        logger.info("Lucene %s: IndexCollection (%d threads)", variant, args.threads)
        index_s = ans.index(coll, index, args.threads, pretokenized=True, store_raw=True, accurate=accurate,
                            log=work / f"lucene-index-{variant}.log")
        logger.info("Lucene %s: SearchCollection over %d queries", variant, len(texts))
        wd = work / f"lucene-run-{variant}"
        wd.mkdir()
        res = ans.search(index, texts, args.k, args.threads, BM25Params().k1, BM25Params().b, True, wd, accurate=accurate)
        out[variant] = {
            "index_s": round(index_s, 1),
            "index_bytes": dir_bytes(index),
            "search_qps": res.logged_qps,
            "search_wall_s": round(res.wall_s, 1),
            "prepare_collection_s": round(prep_s, 1),
            "anserini": ans.version,
            "java": ans.java,
            "settings": f"IndexCollection -collection JsonCollection -pretokenized -storeRaw -threads {args.threads}"
            f"{' -bm25.accurate' if accurate else ''}; SearchCollection {flag} -bm25.k1 {BM25Params().k1} "
            f"-bm25.b {BM25Params().b} -hits {args.k} -threads {args.threads} -pretokenized -topicReader TsvInt",
            "_hits": res.hits,
        }
        shutil.rmtree(index)
    shutil.rmtree(coll)
    return out


# --------------------------------------------------------------------------------------------


def run(args) -> dict:
    corpus = ScaleCorpus(args.docs, args.seed)
    logger.info("generating %d queries", args.queries)
    queries = corpus.scale_queries(args.queries, seed=args.seed + 1)
    res: dict = {"docs": args.docs, "queries": args.queries, "threads": args.threads, "k": args.k}
    res["mean_query_words"] = round(float(np.mean([len(q.query.split()) for q in queries])), 2)
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.tmp) as d:
        work = Path(d)
        out = work / "mined"
        source = Source(name="synthetic", corpus=corpus.passages, queries=lambda: iter(queries),
                        info={"generator": "bench_mining.SynthCorpus", "mean_words": 56})
        cfg = MiningConfig(depth=args.k, window=(3, args.k), n_threads=args.threads, show_progress=not args.no_progress,
                           bm25_backend="auto")
        logger.info("ours: run_mining (index build + mining) on %d passages", args.docs)
        with PeakMemory(watch=(out / "index" / "index.json", "mine")) as mem:
            mem.phase = "index"
            meta = run_mining(source, out, cfg)
        index_t = meta["timings"]["index"]
        ix = load_index(out / "index")
        ix.engine.set_backend("pruned")
        texts = [q.query for q in queries]
        ix.search(texts[:50], args.k, n_threads=args.threads)  # compile/load the kernels, warm the lists
        t0 = time.perf_counter()
        ours_hits = ix.search(texts, args.k, n_threads=args.threads)
        search_s = time.perf_counter() - t0
        ours = {
            "index_s": round(index_t["total_build_s"], 1),
            "index_timings": index_t,
            "peak_rss_mb": round(max(mem.peaks.values()), 1),
            "peak_rss_mb_by_phase": {k: round(v, 1) for k, v in mem.peaks.items()},
            "index_bytes": dir_bytes(out / "index"),
            "search_qps": round(len(texts) / search_s, 1),
            "mine_qps": meta["timings"]["queries_per_s"],
            "backend": meta["params"]["bm25_backend"],
        }
        # pruned against exhaustive on a subset: same top k (tie-aware), and the exhaustive rate
        sub = texts[: args.exhaustive_queries]
        if sub:
            ix.engine.set_backend("numba")
            ix.search(sub[:8], args.k, n_threads=args.threads)
            t0 = time.perf_counter()
            exh = ix.search(sub, args.k, n_threads=args.threads)
            ours["exhaustive_qps"] = round(len(sub) / (time.perf_counter() - t0), 1)
            ours["exhaustive_queries"] = len(sub)
            same = [topk_equal(e, p, rel_tol=1e-6) for e, p in zip(exh, ours_hits)]
            ours["pruned_equals_exhaustive_share"] = round(float(np.mean(same)), 6)
            res["pruned_equals_exhaustive"] = bool(all(same))
        ix.store.close()
        del ix
        shutil.rmtree(out / "index")
        res["ours"] = ours
        variants = None if args.no_lucene else run_lucene(args, args.docs, queries, work)
        if variants:
            for name, lucene in variants.items():
                hits = lucene.pop("_hits")
                overlap = []
                for (rows, _), lh in zip(ours_hits, hits):
                    a, b = {str(int(r)) for r in rows}, {d for d, _ in lh}
                    overlap.append(len(a & b) / max(len(a), len(b), 1))
                lucene["ratio_search"] = round(ours["search_qps"] / lucene["search_qps"], 2) if lucene["search_qps"] else None
                lucene["top100_overlap"] = round(float(np.mean(overlap)), 4)
            first = next(iter(variants))
            res["lucene"] = {k: v for k, v in variants[first].items() if k not in ("ratio_search", "top100_overlap")}
            res["lucene"]["similarity"] = first
            res["ratio_search"] = variants[first]["ratio_search"]
            res["top100_overlap"] = variants[first]["top100_overlap"]
            res["lucene_variants"] = variants
        else:
            res["lucene"] = None
            res["lucene_skipped"] = "install Java 21+ and Anserini's jar: pip install 'crag-evaluators[bench]'"
    res["targets"] = {
        "index_s<=1200": ours["index_s"] <= 1200,
        "peak_rss_mb<=8192": ours["peak_rss_mb"] <= 8192,
        "ratio_search>=1.5": None if res.get("ratio_search") is None else res["ratio_search"] >= 1.5,
        "top100_overlap>=0.97": None if res.get("top100_overlap") is None else res["top100_overlap"] >= 0.97,
    }
    res["machine"] = machine()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the figures here")
    ap.add_argument("--docs", type=int, default=MSMARCO_DOCS, help="passages (default: MS MARCO's 8,841,823)")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=100, help="search depth (mining depth too)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both engines")
    ap.add_argument("--exhaustive-queries", type=int, default=500,
                    help="queries also run through our exhaustive search (equality and its rate)")
    ap.add_argument("--min-overlap", type=float, default=0.9, help="fail when the top-100 overlap is lower")
    ap.add_argument("--no-lucene", action="store_true", help="skip the Lucene half")
    ap.add_argument("--lucene-heap", default=None, help="JVM -Xmx for Anserini (default: the JVM's)")
    ap.add_argument("--lucene-variants", default="bm25accurate,bm25",
                    help="Lucene similarities to run, comma-separated; the first gives ratio_search and top100_overlap. "
                    "bm25accurate: exact document lengths (-bm25.accurate), the closer to our scores; bm25: Lucene's "
                    "default one-byte lengths")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tmp", default=None, help="folder for the indexes (needs ~3x the corpus on disk)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    res = run(args)
    res["command"] = "python scripts/bench_scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    res["python"] = platform.python_version()
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    logger.info("%s", json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2))
    if not res.get("pruned_equals_exhaustive", True):
        logger.error("pruned search differs from exhaustive search")
        return 1
    if res.get("top100_overlap") is not None and res["top100_overlap"] < args.min_overlap:
        logger.error("top-100 overlap with Lucene %.3f < %.3f: the two sides do not compute the same thing",
                     res["top100_overlap"], args.min_overlap)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
