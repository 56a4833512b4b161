"""Helper scripts under scripts/ (the benchmarks themselves are run, not unit-tested)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "crag_title_labels.py"


def _pair(qid, title, label, role, pid):
    return {"query_id": qid, "query": f"question {qid}", "label": label, "label_source": "answer-match",
            "passage": {"id": pid, "title": title, "text": f"text of {pid}"}, "metadata": {"role": role}}


def test_crag_title_labels(tmp_path):
    rows = [
        _pair("q1", "Paris", 1.0, "positive", "p1"),      # gold
        _pair("q1", "Paris", 0.0, "negative", "p2"),      # same article, no answer: relevant by title
        _pair("q1", "Lyon", 1.0, "negative", "p3"),       # answer but another article: not relevant
        _pair("q2", "Rome", 0.0, "negative", "p4"),       # no gold passage: query skipped and counted
        _pair("q3", "", 1.0, "positive", "p5"),           # gold without a title: skipped and counted
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, stats_path = tmp_path / "out.jsonl", tmp_path / "stats.json"
    run = lambda *extra: subprocess.run([sys.executable, str(SCRIPT), "--input", str(src), "--output", str(out), *extra],
                                        capture_output=True, text=True)
    r = run("--json", str(stats_path))
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["passage"]["id"], g["label"], g["label_source"]) for g in got] == [
        ("p1", 1.0, "title-match"), ("p2", 1.0, "title-match"), ("p3", 0.0, "title-match")]
    stats = json.loads(stats_path.read_text())
    assert stats["skipped_queries"] == {"no-gold-passage": 1, "gold-without-title": 1}
    assert stats["label_changes"] == {"0->1": 1, "1->0": 1, "1->1": 1}
    assert (stats["queries"], stats["pairs"], stats["positives"]) == (1, 3, 2)
    # an existing output is refused without --overwrite; a bad row names file and line
    r = run()
    assert r.returncode != 0 and "exists" in r.stderr
    src.write_text(json.dumps(rows[0]) + "\n{not json\n")
    r = run("--overwrite")
    assert r.returncode != 0 and f"{src}:2" in r.stderr and "Traceback" not in r.stderr
