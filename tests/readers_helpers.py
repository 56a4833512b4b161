"""Shared helpers for the reader tests: fixture paths and a reader of the rejects folder."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
SAMPLE = ROOT / "data" / "sample"


def rejects_index(out_dir: Path) -> list[dict]:
    """The ``rejects.jsonl`` index written by :class:`data_prep.io.Rejects`."""
    return [json.loads(line) for line in (out_dir / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]
