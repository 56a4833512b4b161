"""File handling shared by every reader and writer.

* :class:`DataError` - a bad row, reported as ``file:line: what is wrong``.
* :class:`Rejects` - the bad-row policy. Strict by default (the first bad row raises); with
  ``skip_bad=True`` a bad row is counted per reason and written *unchanged* to
  ``<rejects_dir>/<input name>.rejected`` with an index ``rejects.jsonl`` of file, line and reason.
* :func:`iter_lines` - streams a (optionally gzipped) text file line by line with line numbers,
  reporting non-UTF-8 bytes instead of crashing or silently replacing them. An input without a
  single non-blank line is an error (:func:`empty_file_error`), and so is a ``.gz`` that is
  truncated or corrupt (:func:`open_binary`), even with ``skip_bad``: the rest of the file is
  unreadable, so what was read is not the dataset.
* :func:`require_records` - the command-level guard: a stream that yields nothing at all is an
  error saying why (every row rejected, or no records), raised inside the output's
  :func:`atomic_write` so that no empty output is left looking like a successful run.
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
import zlib
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
        raise DataError(p, None, "expected a file but found a folder", kind="not-a-file")
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


def empty_file_error(path: str | os.PathLike, detail: str = "") -> DataError:
    """The one error for an input without any record (0 bytes, only blank lines, a ``.gz`` that
    decompresses to nothing): ``file: empty input file: no records[ (detail)]``, kind ``empty-file``."""
    return DataError(path, None, "empty input file: no records" + (f" ({detail})" if detail else ""), "empty-file")


def require_nonempty(path: str | os.PathLike) -> Path:
    """``Path(path)`` when the file has at least one non-blank line, else :func:`empty_file_error`
    (reads only up to the first non-blank line)."""
    for _ in iter_lines(path, Rejects(skip_bad=True)):
        break
    return Path(path)


#: what :mod:`gzip` raises in the middle of a read of a damaged file
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


class _CheckedGzip:
    """A read-only gzip stream whose decompression errors become a :class:`DataError` naming the
    file and the last complete line delivered (kind ``corrupt-gzip``).

    ``gzip`` reports damage only when the read reaches it: ``EOFError`` for a file cut short,
    ``BadGzipFile`` (CRC or length mismatch, not gzip at all) or ``zlib.error`` for corrupt data.
    Reads are done in pieces of at most :attr:`PIECE` bytes, one decompression step each, so all
    the data before the damage is delivered and counted: the line reported is the damaged one.
    """

    PIECE = 1 << 13

    def __init__(self, path: Path):
        self.path = path
        self._f = gzip.open(path, "rb")
        self.lines = 0  # newlines delivered so far
        self.bytes = 0

    def _error(self, e: BaseException) -> DataError:
        msg = str(e) or type(e).__name__
        if self.bytes == 0 and isinstance(e, gzip.BadGzipFile) and msg.startswith("Not a gzipped file"):
            return DataError(self.path, None, f"not gzip data: the name ends in .gz but the file is not gzip-compressed ({msg})",
                             "corrupt-gzip")
        n = self.lines
        where = f"after line {n}" if n else "before the end of the first line"
        return DataError(self.path, n + 1, f"truncated or corrupt gzip data {where} ({msg}); the rest of the file "
                         "cannot be read", "corrupt-gzip")

    def _got(self, data: bytes) -> bytes:
        self.lines += data.count(b"\n")
        self.bytes += len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        parts: list[bytes] = []
        left = -1 if size is None or size < 0 else size
        try:
            while left != 0:
                # read1: one decompression step a call, so everything before the damage is delivered
                data = self._f.read1(self.PIECE if left < 0 else min(left, self.PIECE))
                if not data:
                    break
                parts.append(self._got(data))
                if left > 0:
                    left -= len(data)
        except GZIP_ERRORS as e:
            raise self._error(e) from None
        return b"".join(parts)

    def readline(self, size: int = -1) -> bytes:
        try:
            return self._got(self._f.readline(size))
        except GZIP_ERRORS as e:
            raise self._error(e) from None

    def __iter__(self) -> "_CheckedGzip":
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "_CheckedGzip":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """The file for reading bytes; a ``.gz`` is decompressed, and a truncated or corrupt one raises
    :class:`DataError` (``file:line: truncated or corrupt gzip data after line N (...)``, kind
    ``corrupt-gzip``) where the damage is reached, whatever the bad-row policy."""
    p = require_path(path)
    if p.is_dir():
        raise DataError(p, None, "expected a file but found a folder", kind="not-a-file")
    if p.suffix == ".gz":
        return _CheckedGzip(p)  # type: ignore[return-value]
    return open(p, "rb")


def iter_lines(
    path: str | os.PathLike,
    rejects: Rejects | None = None,
    skip_blank: bool = True,
    allow_empty: bool = False,
    keep: Callable[[bytes], bool] | None = None,
) -> Iterator[tuple[int, str, bytes]]:
    """Yield ``(line_number, text, raw_bytes)`` for each line, 1-based, newline stripped.

    Lines that are not valid UTF-8 go to ``rejects`` (kind ``encoding``); blank lines are skipped.
    A file without a single non-blank line raises :func:`empty_file_error` once it has been read
    (``allow_empty=True``: yields nothing instead, for outputs of this package whose splits may be
    empty). A damaged ``.gz`` raises ``corrupt-gzip`` (see :func:`open_binary`). ``keep(raw)``,
    when given, picks lines by their bytes (a leading byte-order mark removed) before anything else
    is done with them: the others are passed over undecoded and unchecked.
    """
    rejects = rejects or STRICT
    seen = False
    with open_binary(path) as f:
        for n, raw in enumerate(f, 1):
            if keep is not None:
                line = raw[3:] if n == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
                if not keep(line):
                    seen = seen or bool(line.strip())
                    continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                seen = True  # content, if bad content
                rejects.reject(
                    DataError(path, n, f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}", "encoding"),
                    raw,
                )
                continue
            text = text.rstrip("\r\n")
            if n == 1 and text.startswith("\ufeff"):
                text = text[1:]
            blank = not text.strip()
            seen = seen or not blank
            if skip_blank and blank:
                continue
            yield n, text, raw
    if not seen and not allow_empty:
        raise empty_file_error(path)


def iter_json_lines(
    path: str | os.PathLike, rejects: Rejects | None = None, allow_empty: bool = False
) -> Iterator[tuple[int, Any, bytes]]:
    """Yield ``(line_number, parsed_object, raw_bytes)`` for each JSONL line; bad JSON is rejected."""
    rejects = rejects or STRICT
    for n, text, raw in iter_lines(path, rejects, allow_empty=allow_empty):
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


def rejected_line(summary: dict[str, Any], rejects_dir: Any = None) -> str:
    """The line a command prints under ``--skip-bad``: ``rejected N rows (kind: n, ...); raw rows in
    DIR`` from :meth:`Rejects.summary`."""
    reasons = ", ".join(f"{k}: {v}" for k, v in summary["by_reason"].items()) or "none"
    return f"rejected {summary['total']} rows ({reasons})" + (f"; raw rows in {rejects_dir}" if summary["total"] else "")


def _reasons(rejects: Rejects) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(rejects.counts.items()))


def no_records_error(
    path: str | os.PathLike, rejects: Rejects | None = None, what: str = "records", detail: str = ""
) -> DataError:
    """Why a run has nothing to write: ``no valid <what> (N rejected: kind: n, ...; raw rows in
    DIR)`` (kind ``all-rejected``) when bad rows were skipped, else ``no <what> (detail)`` (kind
    ``no-records``). ``what`` says what is missing: ``records``, ``queries to mine``, ..."""
    if rejects is not None and rejects.total:
        where = f"; raw rows in {rejects.out_dir}" if rejects.out_dir is not None else ""
        return DataError(path, None, f"no valid {what} ({rejects.total} rejected: {_reasons(rejects)}{where})"
                         + (f"; {detail}" if detail else ""), "all-rejected")
    return DataError(path, None, f"no {what}" + (f" ({detail})" if detail else ""), "no-records")


def require_records(
    items: Iterable[T],
    path: str | os.PathLike,
    rejects: Rejects | None = None,
    what: str = "records",
    detail: Callable[[], str] | None = None,
) -> Iterator[T]:
    """Yield ``items``; when there was not one, raise :func:`no_records_error` at the end.

    Consumed inside an :func:`atomic_write`, the error removes the half-made output: an input
    whose every row was rejected (``--skip-bad``) never looks like a successful, complete run.
    """
    n = 0
    for item in items:
        n += 1
        yield item
    if n == 0:
        raise no_records_error(path, rejects, what, detail() if detail is not None else "")


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

    # our own outputs: a split of a built dataset may legitimately be empty
    yield from parse_rows(path, iter_json_lines(path, rejects, allow_empty=True), parse, rejects)
