"""BEIR folders (fixture: a SciFact subset with consistent qrels)."""

from __future__ import annotations

import json
import shutil

import pytest
from readers_helpers import FIX, rejects_index

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import open_source
from data_prep.readers.beir import read_corpus, read_qrels, read_queries

SCIFACT = FIX / "beir" / "scifact"


def _copy(tmp_path):
    d = tmp_path / "scifact"
    shutil.copytree(SCIFACT, d)
    return d


def _append(path, data: bytes):
    with open(path, "ab") as f:
        f.write(data)


def test_beir_source_on_scifact_subset():
    src = open_source("beir", input=SCIFACT, split="train")
    corpus = {p.id: p for p in src.corpus()}
    queries = {q.id: q for q in src.queries()}
    assert len(corpus) == 8
    assert list(queries) == ["0", "4", "10", "11", "18", "35"]  # qrels order; query 2 is not judged
    assert [p.id for p in queries["35"].positives] == ["5152028", "11705328"]
    assert queries["4"].positives[0].id == queries["18"].positives[0].id == "22942787"
    assert queries["0"].query == "0-dimensional biomaterials lack inductive properties."
    for q in queries.values():
        assert q.negatives == [] and all(corpus[p.id] == p for p in q.positives)
    p = corpus["31715818"]
    assert p.title.startswith("New opportunities: the use of nanotechnologies") and p.text
    assert src.info["split"] == "train"


def test_beir_score_zero_is_a_judged_negative_and_split_selects_file(tmp_path):
    d = _copy(tmp_path)
    (d / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n0\t31715818\t2\n0\t4983\t0\n", encoding="utf-8")
    (q,) = open_source("beir", input=d, split="dev").queries()
    assert [p.id for p in q.positives] == ["31715818"] and [p.id for p in q.negatives] == ["4983"]
    assert q.metadata["relevance"] == {"31715818": 2, "4983": 0}
    with pytest.raises(MissingInputError, match=r"qrels/test\.tsv"):
        open_source("beir", input=d, split="test")


def test_beir_empty_text_uses_title(tmp_path):
    d = _copy(tmp_path)
    _append(d / "corpus.jsonl", b'{"_id": "x1", "title": "Only a title", "text": ""}\n')
    p = [p for p in read_corpus(d / "corpus.jsonl") if p.id == "x1"][0]
    assert p.text == "Only a title" and p.title == "" and p.metadata == {"text_from_title": True}


@pytest.mark.parametrize(
    "file, row, message, kind",
    [
        ("corpus.jsonl", b'{"_id": "4983", "title": "t", "text": "dup"}\n', r"corpus\.jsonl:9: duplicate passage id '4983'", "duplicate-id"),
        ("corpus.jsonl", b'{"_id": "9", "title": "t"}\n', r"corpus\.jsonl:9: missing field 'text'", "missing-field"),
        ("corpus.jsonl", b'{"_id": "9", "title": "", "text": " "}\n', r"corpus\.jsonl:9: empty passage \(no text and no title\)", "empty-passage"),
        ("corpus.jsonl", b'{"_id": "9", "text": "x"\n', r"corpus\.jsonl:9: invalid JSON", "invalid-json"),
        ("corpus.jsonl", b'{"_id": "9", "text": "caf\xe9"}\n', r"corpus\.jsonl:9: invalid UTF-8 byte 0xe9", "encoding"),
        ("queries.jsonl", b'{"_id": "0", "text": "again"}\n', r"queries\.jsonl:8: duplicate query id '0'", "duplicate-id"),
        ("queries.jsonl", b'{"_id": "99", "text": ""}\n', r"queries\.jsonl:8: empty query", "empty-query"),
        ("queries.jsonl", b'{"text": "no id"}\n', r"queries\.jsonl:8: missing field '_id'", "missing-field"),
        ("qrels/train.tsv", b"0\t123\t1\n", r"train\.tsv:9: passage id '123' is not in corpus\.jsonl", "unknown-passage"),
        ("qrels/train.tsv", b"777\t4983\t1\n", r"train\.tsv:9: query id '777' is not in queries\.jsonl", "unknown-query"),
        ("qrels/train.tsv", b"0 4983 1\n", r"train\.tsv:9: wrong number of columns: expected 3 tab-separated \(query-id, corpus-id, score\), got 1", "columns"),
    ],
)
def test_beir_bad_rows_strict_and_skipped(tmp_path, file, row, message, kind):
    d = _copy(tmp_path)
    _append(d / file, row)
    with pytest.raises(DataError, match=message):
        src = open_source("beir", input=d)
        list(src.corpus()), list(src.queries())
    out = tmp_path / "rej"
    with Rejects(skip_bad=True, out_dir=out) as rj:
        src = open_source("beir", input=d, rejects=rj)
        assert len(list(src.queries())) == 6 and len(list(src.corpus())) == 8
    assert rj.counts == {kind: 1}
    name = file.rsplit("/", 1)[-1]
    assert (out / f"{name}.rejected").read_bytes() == row
    (entry,) = rejects_index(out)
    assert entry["kind"] == kind and entry["file"].endswith(file)


def test_beir_streaming_functions_and_missing_paths(tmp_path):
    assert [q for q, _ in read_queries(SCIFACT / "queries.jsonl")] == ["0", "2", "4", "10", "11", "18", "35"]
    rows = list(read_qrels(SCIFACT / "qrels" / "train.tsv"))
    assert (rows[0].qid, rows[0].pid, rows[0].score, rows[0].line) == ("0", "31715818", 1, 2)  # header skipped
    with pytest.raises(MissingInputError, match="not-there"):
        open_source("beir", input=tmp_path / "not-there")
    d = _copy(tmp_path)
    (d / "corpus.jsonl").unlink()
    with pytest.raises(MissingInputError, match=r"corpus\.jsonl"):
        open_source("beir", input=d)


def test_beir_metadata_kept(tmp_path):
    d = _copy(tmp_path)
    _append(d / "corpus.jsonl", json.dumps({"_id": "m", "title": "", "text": "t", "metadata": {"url": "u"}}).encode() + b"\n")
    assert [p.metadata for p in read_corpus(d / "corpus.jsonl") if p.id == "m"] == [{"url": "u"}]
