"""The labeller's output folder, which is also its cache: results are appended and flushed one item
at a time, so a run killed at any moment is resumed by running the same command again.

``DIR/labels.jsonl``
    :class:`~data_prep.records.LabelledPair` lines; ``metadata["llm"]["key"]`` is the item's cache
    key and ``metadata["llm"]["lines"]`` how many lines the item wrote (one per sentence for the
    ``sentences`` task). Each item's lines are written with one ``write`` and flushed.
``DIR/failures.jsonl``
    one line per item that failed for good (input, reason, message, last raw response).
``DIR/run.json``
    what the labels were made with (task, backend, model, prompt id and version). A rerun with other
    settings into the same folder is refused: the keys would not match and the file would mix labels.
``DIR/summary.json``
    written at the end of every run (atomically).

On resume (:meth:`LabelStore.open`): a last line without its newline - what a kill in the middle of
a write leaves - is cut off and counted, and so is an item at the end of the file with fewer lines
than it announced; any other line that does not parse is an error naming ``file:line`` (the file
was changed by other means). Failed items are not "done": a rerun asks for them again, and their old
lines in ``failures.jsonl`` are replaced by the new outcome.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..io import DataError, atomic_write, write_json

LABELS = "labels.jsonl"
FAILURES = "failures.jsonl"
RUN = "run.json"
SUMMARY = "summary.json"


@dataclass
class ResumeInfo:
    done: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # key -> its label lines
    partial_lines_dropped: int = 0
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> its failure record
    failure_lines_dropped: int = 0


def _cut_partial(path: Path) -> tuple[list[tuple[int, bytes]], int]:
    """The complete lines of ``path`` as ``(byte offset, line)``; a trailing piece without its newline
    is truncated away (returned count 1)."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    cut = 0
    end = data.rfind(b"\n") + 1
    if end < len(data):
        cut = 1
        with open(path, "r+b") as f:
            f.truncate(end)
    lines, pos = [], 0
    for raw in data[:end].splitlines(keepends=True):
        lines.append((pos, raw))
        pos += len(raw)
    return lines, cut


def _parse(path: Path, n: int, raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(path, n, f"not a line written by the labeller ({e}); fix or remove it, or label into a new "
                                 "folder", "invalid-json") from None
    if not isinstance(obj, dict):
        raise DataError(path, n, "not a line written by the labeller (not an object)", "invalid-json")
    return obj


def _llm(path: Path, n: int, obj: dict[str, Any]) -> dict[str, Any]:
    llm = (obj.get("metadata") or {}).get("llm") if isinstance(obj.get("metadata"), dict) else None
    if not isinstance(llm, dict) or not isinstance(llm.get("key"), str) or not isinstance(llm.get("lines"), int):
        raise DataError(path, n, "a label line without metadata.llm.key / lines; not written by the labeller",
                        "missing-field")
    return llm


class LabelStore:
    def __init__(self, out_dir: str | os.PathLike):
        self.dir = Path(out_dir)
        self.labels_path = self.dir / LABELS
        self.failures_path = self.dir / FAILURES
        self._labels: IO[str] | None = None
        self._failures: IO[str] | None = None

    # ---- resume -------------------------------------------------------------------------------

    def check_settings(self, settings: dict[str, Any]) -> None:
        """Record ``settings`` in ``run.json``, or refuse when the folder holds labels made otherwise."""
        run = self.dir / RUN
        if run.exists():
            old = json.loads(run.read_text(encoding="utf-8"))
            diff = [k for k in settings if old.get(k) != settings[k]]
            if diff:
                what = ", ".join(f"{k} {old.get(k)!r} (now {settings[k]!r})" for k in diff)
                raise ValueError(f"{self.dir} holds labels made with {what}; label into another --output folder")
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(run, settings)

    def open(self) -> ResumeInfo:
        """Read what earlier runs left (see the module docstring) and open the files for appending."""
        self.dir.mkdir(parents=True, exist_ok=True)
        info = ResumeInfo()
        lines, info.partial_lines_dropped = _cut_partial(self.labels_path)
        groups: list[tuple[str, int, int, list[dict[str, Any]]]] = []  # key, lines announced, first offset, lines
        for n, (offset, raw) in enumerate(lines, 1):
            obj = _parse(self.labels_path, n, raw)
            llm = _llm(self.labels_path, n, obj)
            if groups and groups[-1][0] == llm["key"] and len(groups[-1][3]) < groups[-1][1]:
                groups[-1][3].append(obj)
                continue
            if groups and len(groups[-1][3]) < groups[-1][1]:
                raise DataError(self.labels_path, n, f"item {groups[-1][0][:12]}... wrote {len(groups[-1][3])} of its "
                                                     f"{groups[-1][1]} lines before another item's", "incomplete-item")
            groups.append((llm["key"], llm["lines"], offset, [obj]))
        if groups and len(groups[-1][3]) < groups[-1][1]:  # the last item was cut short by a kill
            key, _, offset, got = groups.pop()
            info.partial_lines_dropped += len(got)
            with open(self.labels_path, "r+b") as f:
                f.truncate(offset)
        for key, _, _, objs in groups:
            if key in info.done:
                raise DataError(self.labels_path, None, f"item {key[:12]}... is written twice", "duplicate")
            info.done[key] = objs
        flines, info.failure_lines_dropped = _cut_partial(self.failures_path)
        for n, (_, raw) in enumerate(flines, 1):
            obj = _parse(self.failures_path, n, raw)
            if isinstance(obj.get("key"), str):
                info.failures[obj["key"]] = obj
        return info

    def keep_failures(self, keep: list[dict[str, Any]]) -> None:
        """Rewrite ``failures.jsonl`` with only ``keep`` (the failures that are not asked again)."""
        with atomic_write(self.failures_path) as f:
            for rec in keep:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    # ---- append -------------------------------------------------------------------------------

    def append_labels(self, records: list[dict[str, Any]]) -> None:
        if self._labels is None:
            self._labels = open(self.labels_path, "a", encoding="utf-8")
        self._labels.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        self._labels.flush()

    def append_failure(self, record: dict[str, Any]) -> None:
        if self._failures is None:
            self._failures = open(self.failures_path, "a", encoding="utf-8")
        self._failures.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._failures.flush()

    def write_summary(self, summary: dict[str, Any]) -> Path:
        path = self.dir / SUMMARY
        write_json(path, summary)
        return path

    def close(self) -> None:
        for f in (self._labels, self._failures):
            if f is not None:
                f.close()
        self._labels = self._failures = None
