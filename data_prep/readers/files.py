"""The row sources of the readers: the file formats the datasets ship in, parsed into rows.

* :func:`iter_tsv` - tab-separated rows with a column-count check.
* :func:`iter_json_array` - a streaming parser for one (possibly multi-GB) JSON array of objects,
  reporting each bad element at the line where it starts; :func:`iter_json_records` picks it or
  JSONL by the first byte of the file.
* :func:`iter_parquet_rows` - parquet rows through pyarrow, in batches.

Each yields the row's line (or row number), its parsed value and its raw text, and sends a bad
row to a :class:`~data_prep.io.Rejects` policy; what a row means is the reader's business.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from typing import Any, Callable, Iterator

from ..io import STRICT, DataError, Rejects, empty_file_error, iter_json_lines, iter_lines, open_binary, require_path

PathLike = str | os.PathLike


def iter_tsv(
    path: PathLike, columns: tuple[str, ...], rejects: Rejects | None = None, sep: str | None = "\t",
    keep: Callable[[bytes], bool] | None = None,
) -> Iterator[tuple[int, list[str], bytes]]:
    """Yield ``(line, fields, raw)`` for rows with exactly ``len(columns)`` fields.

    ``sep=None`` splits on any whitespace (TREC qrels). ``keep(raw)`` reads only the lines it
    picks (see :func:`~data_prep.io.iter_lines`).
    """
    rejects = rejects or STRICT
    n_cols = len(columns)
    how = "tab-separated" if sep == "\t" else "whitespace-separated"
    for n, text, raw in iter_lines(path, rejects, keep=keep):
        fields = text.split(sep)
        if len(fields) != n_cols:
            rejects.reject(
                DataError(
                    path, n, f"wrong number of columns: expected {n_cols} {how} ({', '.join(columns)}), got {len(fields)}", "columns"
                ),
                raw,
            )
            continue
        yield n, fields, raw


_WS = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_STRUCT = re.compile(r'[{}\[\]"]')
_SCALAR = re.compile(r"[^,\]\s]*")


def _element_end(buf: str, pos: int) -> int:
    """Index just past the JSON value starting at ``buf[pos]``, or -1 when ``buf`` ends inside it.

    Only the structure is followed (brackets outside strings); the value may still be invalid.
    """
    c = buf[pos]
    if c == '"':
        m = _STRING.match(buf, pos)
        return m.end() if m else -1
    if c not in "{[":
        end = _SCALAR.match(buf, pos).end()
        return end if end < len(buf) else -1
    depth = 0
    i = pos
    while True:
        m = _STRUCT.search(buf, i)
        if m is None:
            return -1
        ch = m.group(0)
        if ch == '"':
            s = _STRING.match(buf, m.start())
            if s is None:
                return -1
            i = s.end()
            continue
        depth += 1 if ch in "{[" else -1
        i = m.end()
        if depth == 0:
            return i


class _ArrayReader:
    """Incremental reader of ``[ {...}, {...}, ... ]``: a growing text buffer over the file,
    decoded with ``surrogateescape`` so bad UTF-8 bytes survive until their element is rejected."""

    def __init__(self, f, chunk_size: int):
        self.f = f
        self.chunk_size = chunk_size
        self.dec = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.buf = ""
        self.pos = 0
        self.line = 1  # line number at self.pos
        self.eof = False

    def fill(self) -> bool:
        """Read more (at least as much as is buffered, so big elements cost O(n)); False at EOF."""
        if self.eof:
            return False
        data = self.f.read(max(self.chunk_size, len(self.buf) - self.pos))
        if not data:
            self.eof = True
            self.buf = self.buf[self.pos :] + self.dec.decode(b"", final=True)
        else:
            self.buf = self.buf[self.pos :] + self.dec.decode(data)
        self.pos = 0
        return True

    def advance(self, to: int) -> None:
        self.line += self.buf.count("\n", self.pos, to)
        self.pos = to

    def skip_ws(self) -> str:
        """Skip whitespace; the next character, or '' at the end of the file."""
        while True:
            end = _WS.match(self.buf, self.pos).end()
            self.advance(end)
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""


def iter_json_array(
    path: PathLike, rejects: Rejects | None = None, chunk_size: int = 1 << 20
) -> Iterator[tuple[int, Any, str | bytes]]:
    """Stream the objects of a file holding one JSON array, as ``(line, object, raw)``.

    ``line`` is the line where the element starts. The file is never loaded whole: the buffer
    holds at most the current element plus one chunk. A bad element (invalid JSON, not an object,
    invalid UTF-8) goes to ``rejects`` and parsing resumes after it; a broken array structure
    (a missing comma, a file cut short) always raises.
    """
    rejects = rejects or STRICT
    decoder = json.JSONDecoder()
    with open_binary(path) as f:
        r = _ArrayReader(f, chunk_size)
        r.fill()
        if r.buf.startswith("\ufeff"):
            r.pos = 1
        c = r.skip_ws()
        if c == "":
            raise empty_file_error(path)
        if c != "[":
            raise DataError(path, r.line, f"expected a JSON array ('['), found {c!r}", "invalid-json")
        r.advance(r.pos + 1)
        first = True
        while True:
            c = r.skip_ws()
            if c == "]" and first:
                r.advance(r.pos + 1)
                break
            if c == "":
                raise DataError(path, r.line, "file ends inside the JSON array (no closing ']')", "invalid-json")
            start_line = r.line
            item = _read_element(r, decoder, path, rejects, start_line)
            if item is not None:
                yield item
            first = False
            c = r.skip_ws()
            if c == ",":
                r.advance(r.pos + 1)
                continue
            if c == "]":
                r.advance(r.pos + 1)
                break
            found = "the end of the file" if c == "" else repr(c)
            raise DataError(path, r.line, f"expected ',' or ']' after the array element, found {found}", "invalid-json")
        c = r.skip_ws()
        if c != "":
            raise DataError(path, r.line, f"unexpected data after the closing ']': {c!r}", "invalid-json")


def _read_element(r: _ArrayReader, decoder: json.JSONDecoder, path, rejects: Rejects, start_line: int):
    while True:
        try:
            obj, end = decoder.raw_decode(r.buf, r.pos)
        except json.JSONDecodeError as e:
            end = _element_end(r.buf, r.pos)
            if end == -1:
                if r.fill():
                    continue
                raise DataError(path, start_line, "file ends inside this array element", "invalid-json") from None
            raw = r.buf[r.pos : end]
            err_line = start_line + r.buf.count("\n", r.pos, e.pos)
            error = _encoding_error(path, start_line, raw) or DataError(
                path, start_line, f"invalid JSON in the array element starting here ({e.msg} at line {err_line})", "invalid-json"
            )
            r.advance(end)
            rejects.reject(error, raw.encode("utf-8", "surrogateescape"))
            return None
        if end == len(r.buf) and not r.eof:  # a scalar could continue in the next chunk
            if r.fill():
                continue
        raw = r.buf[r.pos : end]
        r.advance(end)
        bad = _encoding_error(path, start_line, raw)
        if bad is not None:
            rejects.reject(bad, raw.encode("utf-8", "surrogateescape"))
            return None
        if not isinstance(obj, dict):
            rejects.reject(DataError(path, start_line, f"expected a JSON object, got {type(obj).__name__}", "invalid-json"), raw)
            return None
        return start_line, obj, raw


def _encoding_error(path, start_line: int, raw: str) -> DataError | None:
    """Bytes that were not UTF-8 decode to lone surrogates (``surrogateescape``); find the first."""
    if raw.isascii():
        return None
    try:
        raw.encode("utf-8")  # far faster than a regex search for the surrogate range
        return None
    except UnicodeEncodeError as e:
        pos = e.start
    byte = ord(raw[pos]) - 0xDC00
    at = start_line + raw.count("\n", 0, pos)
    return DataError(path, start_line, f"invalid UTF-8 byte 0x{byte:02x} (line {at})", "encoding")


def _first_byte(path: PathLike) -> bytes:
    with open_binary(path) as f:
        head = f.read(4096)
        while head:
            s = head.lstrip(b" \t\r\n")
            if s.startswith(b"\xef\xbb\xbf"):
                s = s[3:].lstrip(b" \t\r\n")
            if s:
                return s[:1]
            head = f.read(4096)
    return b""


def iter_json_records(path: PathLike, rejects: Rejects | None = None) -> Iterator[tuple[int, Any, str | bytes]]:
    """Objects of a JSON-array file or a JSONL file (chosen by the first non-blank byte)."""
    require_path(path)
    if _first_byte(path) == b"[":
        yield from iter_json_array(path, rejects)
    else:
        yield from iter_json_lines(path, rejects)


def iter_parquet_rows(path: PathLike, batch_size: int = 1024) -> Iterator[tuple[int, dict, str]]:
    """Rows of a parquet file as ``(row_number, dict, raw_json)`` (row numbers are 1-based)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = require_path(path)
    if p.stat().st_size == 0:
        raise empty_file_error(p)
    n = 0
    try:
        pf = pq.ParquetFile(p)
        for batch in pf.iter_batches(batch_size=batch_size):
            for row in batch.to_pylist():
                n += 1
                yield n, row, json.dumps(row, ensure_ascii=False, default=str)
    except (pa.ArrowException, OSError) as e:  # a truncated or corrupt file, where pyarrow meets it
        where = f"after row {n}" if n else "before the first row"
        raise DataError(p, None, f"cannot read parquet data {where} ({e}); the rest of the file cannot be read",
                        "corrupt-parquet") from None
    if n == 0:
        raise empty_file_error(p, "a parquet file with no rows")
