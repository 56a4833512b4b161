"""``python -m pipeline index --skip-bad``: a Self-RAG/PopQA file with an empty retrieved passage
stops the build at that row (exit code 2, ``file:line``) unless ``--skip-bad``, which leaves the
row out, counts it (printed and in index.json) and keeps it unchanged in ``<out>.rejects/``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.index import HybridIndex

POPQA = Path(__file__).resolve().parent / "fixtures" / "crag" / "popqa.sample.jsonl"


def popqa_with_empty_passage(d: Path, blank: tuple[int, ...] = (1,)) -> tuple[Path, list[str]]:
    """The PopQA fixture (3 rows of 4 contexts) with ``ctxs[2]`` of the rows ``blank`` (0-based)
    emptied, as a retrieval that returned nothing writes it; returns the file and its lines."""
    lines = []
    for i, line in enumerate(POPQA.read_text(encoding="utf-8").splitlines()):
        if i in blank:
            row = json.loads(line)
            row["ctxs"][2]["text"] = "  "
            line = json.dumps(row, ensure_ascii=False)
        lines.append(line)
    path = d / "popqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def index_args(path: Path, out: Path, *extra) -> list:
    return ["index", "--format", "popqa", "--input", path, "--out", out, "--dense-model", "none", "--no-progress", *extra]


def test_empty_passage_stops_the_build_without_skip_bad(tmp_path, capsys):
    path, _ = popqa_with_empty_passage(tmp_path)
    out = tmp_path / "idx"
    rc, _, err = run(capsys, *index_args(path, out))
    assert rc == 2
    assert err.strip() == f"error: {path}:2: ctxs[2]: empty passage"
    assert not out.exists() and not (tmp_path / "idx.rejects").exists()


def test_skip_bad_builds_counts_and_keeps_the_row(tmp_path, capsys):
    path, lines = popqa_with_empty_passage(tmp_path)
    out = tmp_path / "idx"
    rdir = tmp_path / "idx.rejects"
    rc, stdout, _ = run(capsys, *index_args(path, out, "--skip-bad"))
    assert rc == 0
    assert f"rejected 1 rows (empty-passage: 1); raw rows in {rdir}" in stdout.splitlines()
    assert (rdir / "popqa.jsonl.rejected").read_text(encoding="utf-8") == lines[1] + "\n"  # unchanged
    index_rows = [json.loads(x) for x in (rdir / "rejects.jsonl").read_text().splitlines()]
    assert index_rows == [{"file": str(path), "line": 2, "kind": "empty-passage", "reason": "ctxs[2]: empty passage"}]
    info = json.loads((out / "index.json").read_text())
    assert info["rejects"] == {"total": 1, "by_reason": {"empty-passage": 1}, "dir": str(rdir)}
    assert len(HybridIndex.load(out)) == info["n_chunks"] > 0
    chunks = [json.loads(x) for x in (out / "bm25" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    kept = {c["title"] for c in chunks}  # the other rows' contexts are indexed, the skipped row's are not
    skipped_title = json.loads(lines[1])["s_wiki_title"]
    assert kept and skipped_title not in kept
    assert json.loads(lines[0])["s_wiki_title"] in kept
    # a rebuild starts the rejects afresh: a clean input leaves none
    clean = tmp_path / "clean.jsonl"
    clean.write_text(POPQA.read_text(encoding="utf-8"), encoding="utf-8")
    rc, stdout, _ = run(capsys, *index_args(clean, out, "--skip-bad", "--overwrite"))
    assert rc == 0 and "rejected 0 rows (none)" in stdout.splitlines()
    assert not rdir.exists()
    assert json.loads((out / "index.json").read_text())["rejects"] == {"total": 0, "by_reason": {}, "dir": None}


def test_skip_bad_with_every_row_bad_is_an_error(tmp_path, capsys):
    path, _ = popqa_with_empty_passage(tmp_path, blank=(0, 1, 2))
    out = tmp_path / "idx"
    rc, _, err = run(capsys, *index_args(path, out, "--skip-bad"))
    assert rc == 2
    assert err.strip() == (f"error: {path}: no valid passages to index (3 rejected: empty-passage: 3; raw rows in "
                           f"{tmp_path / 'idx.rejects'})")
    assert not out.exists()


def test_skip_bad_needs_a_reader_format(tmp_path, capsys):
    doc = tmp_path / "doc.txt"
    doc.write_text("Some text.\n")
    rc, _, err = run(capsys, "index", "--files", doc, "--out", tmp_path / "idx", "--dense-model", "none", "--skip-bad")
    assert rc == 2 and "--skip-bad skips bad rows of a reader format" in err


def test_help_names_the_rejects_folder(capsys):
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--skip-bad" in text and "<out>.rejects/ beside the index folder" in text
