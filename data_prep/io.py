"""File handling shared by every reader and writer.

* :class:`DataError` - a bad row, reported as ``file:line: what is wrong``.
* :class:`Rejects` - the bad-row policy. Strict by default (the first bad row raises); with
  ``skip_bad=True`` a bad row is counted per reason and written *unchanged* to
  ``<rejects_dir>/<input name>.rejected`` with an index ``rejects.jsonl`` of file, line and reason.
* :func:`iter_lines` - streams a (optionally gzipped) text file line by line with line numbers,
  reporting non-UTF-8 bytes instead of crashing or silently replacing them.
* :func:`atomic_write` - every output goes to a temporary file first and is renamed into place
  only when complete, so a killed run never leaves a half file that looks whole.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


class DataError(ValueError):
    """A malformed row: ``path:line: reason``. ``kind`` is a short reason code used for counts."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, reason: str, kind: str = "invalid"):
        self.path = str(path) if path is not None else None
        self.line = line
        self.reason = reason
        self.kind = kind
        where = self.path or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {reason}")


class MissingInputError(FileNotFoundError):
    """A file or folder the caller named does not exist."""

    def __init__(self, path: str | os.PathLike, what: str = "file"):
        self.path = str(path)
        super().__init__(f"{what} not found: {path}")


def require_path(path: str | os.PathLike, what: str = "file", is_dir: bool | None = None) -> Path:
    """Return ``Path(path)`` or raise :class:`MissingInputError` naming it."""
    p = Path(path)
    if not p.exists():
        raise MissingInputError(p, what)
    if is_dir is True and not p.is_dir():
        raise MissingInputError(p, f"{what} (a folder)")
    if is_dir is False and p.is_dir():
        raise DataError(p, None, f"expected a file but found a folder", kind="not-a-file")
    return p


class Rejects:
    """Bad-row policy and bookkeeping.

    ``Rejects()`` is strict: :meth:`reject` raises the :class:`DataError`. ``Rejects(skip_bad=True,
    out_dir=...)`` counts the row under ``error.kind``, appends the raw row unchanged to
    ``out_dir/<input name>.rejected`` and an index line to ``out_dir/rejects.jsonl``.
    """

    def __init__(self, skip_bad: bool = False, out_dir: str | os.PathLike | None = None):
        self.skip_bad = skip_bad
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.counts: Counter[str] = Counter()
        self._files: dict[str, IO[bytes]] = {}
        self._index: IO[str] | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reject(self, error: DataError, raw: bytes | str | None = None) -> None:
        if not self.skip_bad:
            raise error
        self.counts[error.kind] += 1
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        name = Path(error.path).name if error.path else "input"
        if raw is not None:
            f = self._files.get(name)
            if f is None:
                f = self._files[name] = open(self.out_dir / f"{name}.rejected", "ab")
            data = raw.encode("utf-8") if isinstance(raw, str) else raw
            f.write(data if data.endswith(b"\n") else data + b"\n")
        if self._index is None:
            self._index = open(self.out_dir / "rejects.jsonl", "a", encoding="utf-8")
        self._index.write(
            json.dumps({"file": error.path, "line": error.line, "kind": error.kind, "reason": error.reason}) + "\n"
        )

    def summary(self) -> dict[str, Any]:
        return {"total": self.total, "by_reason": dict(sorted(self.counts.items()))}

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        if self._index is not None:
            self._index.close()
            self._index = None

    def __enter__(self) -> "Rejects":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


STRICT = Rejects()


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    p = require_path(path)
    if p.is_dir():
        raise DataError(p, None, "expected a file but found a folder", kind="not-a-file")
    if p.suffix == ".gz":
        return gzip.open(p, "rb")
    return open(p, "rb")


def iter_lines(
    path: str | os.PathLike,
    rejects: Rejects | None = None,
    skip_blank: bool = True,
) -> Iterator[tuple[int, str, bytes]]:
    """Yield ``(line_number, text, raw_bytes)`` for each line, 1-based, newline stripped.

    Lines that are not valid UTF-8 go to ``rejects`` (kind ``encoding``); blank lines are skipped.
    """
    rejects = rejects or STRICT
    with open_binary(path) as f:
        for n, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                rejects.reject(
                    DataError(path, n, f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}", "encoding"),
                    raw,
                )
                continue
            text = text.rstrip("\r\n")
            if n == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if skip_blank and not text.strip():
                continue
            yield n, text, raw


def iter_json_lines(path: str | os.PathLike, rejects: Rejects | None = None) -> Iterator[tuple[int, Any, bytes]]:
    """Yield ``(line_number, parsed_object, raw_bytes)`` for each JSONL line; bad JSON is rejected."""
    rejects = rejects or STRICT
    for n, text, raw in iter_lines(path, rejects):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            rejects.reject(DataError(path, n, f"invalid JSON ({e.msg} at column {e.colno})", "invalid-json"), raw)
            continue
        if not isinstance(obj, dict):
            rejects.reject(DataError(path, n, f"expected a JSON object, got {type(obj).__name__}", "invalid-json"), raw)
            continue
        yield n, obj, raw


def require_fields(path, line: int, obj: dict, fields: Iterable[str]) -> None:
    """Raise :class:`DataError` (kind ``missing-field``) for the first absent field."""
    for k in fields:
        if k not in obj or obj[k] is None:
            raise DataError(path, line, f"missing field '{k}'", "missing-field")


def require_text(path, line: int, value: Any, what: str) -> str:
    """Raise :class:`DataError` (kind ``empty-<what>``) when ``value`` is not a non-empty string."""
    if not isinstance(value, str):
        raise DataError(path, line, f"{what} must be a string, got {type(value).__name__}", "invalid-type")
    if not value.strip():
        raise DataError(path, line, f"empty {what}", f"empty-{what.split()[0]}")
    return value


def parse_rows(
    path,
    rows: Iterable[tuple[int, T, bytes]],
    parse: Callable[[int, T], Any],
    rejects: Rejects | None = None,
) -> Iterator[Any]:
    """Apply ``parse(line, row)`` to each row; a :class:`DataError` it raises goes to ``rejects``.

    ``parse`` may return one record, a list of records, or ``None`` (nothing to yield).
    """
    rejects = rejects or STRICT
    for n, row, raw in rows:
        try:
            out = parse(n, row)
        except DataError as e:
            rejects.reject(e, raw)
            continue
        if out is None:
            continue
        if isinstance(out, list):
            yield from out
        else:
            yield out


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write to a temporary file beside ``path`` and rename it into place only on success.

    A ``.gz`` path is written gzip-compressed. On any exception the temporary file is removed and
    the previous content of ``path`` (if any) is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; outputs get the usual permissions
    binary = "b" in mode
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.suffix == ".gz":
                # mtime=0 keeps outputs byte-identical across runs
                stream: IO = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            else:
                stream = raw
            f = stream if binary else io.TextIOWrapper(stream, encoding=encoding, newline="\n")
            yield f
            f.flush()
            if f is not stream:
                f.detach()
            if stream is not raw:
                stream.close()
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_jsonl(path: str | os.PathLike, items: Iterable[Any]) -> int:
    """Atomically write records (anything with ``to_dict``) or dicts as JSONL; returns the count."""
    n = 0
    with atomic_write(path) as f:
        for item in items:
            d = item.to_dict() if hasattr(item, "to_dict") else item
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_write(path) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, sort_keys=False)
        f.write("\n")


def read_records(path: str | os.PathLike, record_type: type[T], rejects: Rejects | None = None) -> Iterator[T]:
    """Stream records of ``record_type`` from our own JSONL schema, with ``file:line`` errors."""
    from .records import RecordError

    def parse(n: int, obj: dict) -> T:
        try:
            return record_type.from_dict(obj)  # type: ignore[attr-defined]
        except RecordError as e:
            kind = "missing-field" if "missing field" in str(e) else "invalid-record"
            raise DataError(path, n, str(e), kind) from None

    yield from parse_rows(path, iter_json_lines(path, rejects), parse, rejects)
