"""A corpus on disk, read back by row: the passages of a BM25 index folder, or of a corpus kept
without one (``data_prep mine --bm25-backend lucene --lucene-texts corpus``).

A store folder holds ``corpus.jsonl`` (one :class:`~data_prep.records.Passage` a line) and
``offsets.npy`` (each row's byte offset), for random access by row, so mining never holds all
texts in memory. :class:`CorpusHasher` is a streaming sha256 of the corpus (ids, titles, texts),
which an index records and compares on reuse (:func:`data_prep.bm25.open_index`).

Folders are built under a temporary name beside their target and renamed into place
(:func:`new_build_dir`); :func:`remove_stale_temps` removes what killed builds left.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from array import array
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .records import Passage

logger = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl"
OFFSETS_FILE = "offsets.npy"


class CorpusHasher:
    """Streaming sha256 over (id, title, text) of each passage, length-prefixed (unambiguous)."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.count = 0

    def update(self, p: Passage) -> None:
        for field in (p.id, p.title or "", p.text):
            b = field.encode("utf-8")
            self._h.update(len(b).to_bytes(8, "little"))
            self._h.update(b)
        self.count += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def corpus_sha256(passages: Iterable[Passage]) -> tuple[str, int]:
    """The corpus hash and size of a passage stream (what :func:`open_index` compares)."""
    h = CorpusHasher()
    for p in passages:
        h.update(p)
    return h.hexdigest(), h.count


class CorpusWriter:
    """Appends passages to ``dir/corpus.jsonl`` and records byte offsets and the corpus hash."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self._f = open(self.dir / CORPUS_FILE, "wb")
        self._offsets = array("q", [0])
        self.hasher = CorpusHasher()

    def add(self, p: Passage) -> int:
        # json.dumps(p.to_dict(), ensure_ascii=False) written out: the same bytes, a third of the time
        meta = json.dumps(p.metadata, ensure_ascii=False) if p.metadata else "{}"
        line = (f'{{"id": {_json_str(p.id)}, "title": {_json_str(p.title)}, "text": {_json_str(p.text)}, '
                f'"metadata": {meta}}}\n').encode("utf-8")
        self._f.write(line)
        self._offsets.append(self._offsets[-1] + len(line))
        self.hasher.update(p)
        return len(self._offsets) - 2

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        np.save(self.dir / OFFSETS_FILE, np.frombuffer(self._offsets, dtype=np.int64))


_json_str = json.encoder.encode_basestring  # a JSON string literal, non-ASCII kept (ensure_ascii=False)


class CorpusStore:
    """Random access to the stored corpus by row (``pread`` at recorded offsets; thread safe)."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.offsets = np.load(self.dir / OFFSETS_FILE, mmap_mode="r")
        self._fd = os.open(self.dir / CORPUS_FILE, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> Passage:
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        return Passage.from_dict(json.loads(os.pread(self._fd, end - start, start).decode("utf-8")))

    def get_many(self, rows: Iterable[int]) -> list[Passage]:
        return [self[int(r)] for r in rows]

    def __iter__(self) -> Iterator[Passage]:
        with open(self.dir / CORPUS_FILE, "rb") as f:
            for line in f:
                yield Passage.from_dict(json.loads(line))

    def close(self) -> None:
        fd, self._fd = getattr(self, "_fd", None), None  # idempotent: never close a reused descriptor number
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:  # pragma: no cover - best effort
        self.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temps(parent: Path, name: str) -> int:
    """Remove ``parent/.NAME.tmp-PID`` folders whose process is gone (a build killed with
    ``kill -9`` or by a full disk leaves one; a live build's own is kept). Returns how many."""
    n = 0
    for tmp in Path(parent).glob(f".{name}.tmp-*"):
        try:
            pid = int(tmp.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            logger.warning("removing %s, left by a build (pid %d) that did not finish", tmp, pid)
            shutil.rmtree(tmp, ignore_errors=True)
            n += 1
    return n


def new_build_dir(target: Path) -> Path:
    """An empty ``.NAME.tmp-PID`` folder beside ``target`` to build it in (renamed into place when
    done), after removing those that dead builds left."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target.parent, target.name)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp
