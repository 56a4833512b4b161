"""Our own JSONL schema as input formats: ``queries`` (+ corpus) and ``pairs``."""

from __future__ import annotations

import json

import pytest
from readers_helpers import FIX

from data_prep.io import DataError, MissingInputError, Rejects, write_jsonl
from data_prep.readers import open_pairs, open_source
from data_prep.readers.ours import read_pairs, read_passages, read_queries

SCIFACT = FIX / "beir" / "scifact"


@pytest.fixture
def written(tmp_path):
    """The SciFact subset written in our schema: queries.jsonl, corpus.jsonl, pairs.jsonl."""
    src = open_source("beir", input=SCIFACT)
    write_jsonl(tmp_path / "queries.jsonl", src.queries())
    write_jsonl(tmp_path / "corpus.jsonl", src.corpus())
    write_jsonl(tmp_path / "pairs.jsonl", open_pairs("beir", input=SCIFACT))
    return tmp_path


def test_queries_with_corpus_round_trip(written):
    beir = open_source("beir", input=SCIFACT)
    src = open_source("queries", input=written / "queries.jsonl", corpus=written / "corpus.jsonl")
    assert [q.to_dict() for q in src.queries()] == [q.to_dict() for q in beir.queries()]
    assert [p.to_dict() for p in src.corpus()] == [p.to_dict() for p in beir.corpus()]
    alone = open_source("queries", input=written / "queries.jsonl")
    assert len(list(alone.corpus())) == 5  # the distinct positives (7 judged, 2 shared) without a corpus


def test_pairs_read_and_grouped(written):
    pairs = list(read_pairs(written / "pairs.jsonl"))
    assert len(pairs) == 7 and all(p.label == 1.0 and p.label_source == "human" for p in pairs)
    src = open_source("pairs", input=written / "pairs.jsonl")
    ex = list(src.queries())
    assert [e.id for e in ex] == ["0", "4", "10", "11", "18", "35"] and len(ex[-1].positives) == 2
    assert [p.to_dict() for p in open_pairs("pairs", input=written / "pairs.jsonl")] == [p.to_dict() for p in pairs]


def _append(path, obj_or_bytes):
    data = obj_or_bytes if isinstance(obj_or_bytes, bytes) else (json.dumps(obj_or_bytes) + "\n").encode()
    with open(path, "ab") as f:
        f.write(data)
    return data


def test_positive_missing_from_corpus(written):
    q = json.loads((written / "queries.jsonl").read_text().splitlines()[0])
    q["id"], q["positives"][0]["id"] = "new", "ghost"
    raw = _append(written / "queries.jsonl", q)
    src = open_source("queries", input=written / "queries.jsonl", corpus=written / "corpus.jsonl")
    with pytest.raises(DataError, match=r"queries\.jsonl:7: positive passage id 'ghost' is not in corpus\.jsonl"):
        list(src.queries())
    with Rejects(skip_bad=True, out_dir=written / "rej") as rj:
        src = open_source("queries", input=written / "queries.jsonl", corpus=written / "corpus.jsonl", rejects=rj)
        assert len(list(src.queries())) == 6
    assert rj.counts == {"unknown-passage": 1}
    assert (written / "rej" / "queries.jsonl.rejected").read_bytes() == raw


@pytest.mark.parametrize(
    "file, row, message, kind",
    [
        ("queries.jsonl", {"id": "0", "query": "dup", "negatives": [{"id": "n", "text": "t"}]}, r"queries\.jsonl:7: duplicate query id '0'", "duplicate-id"),
        ("queries.jsonl", {"id": "e", "query": "nothing"}, r"queries\.jsonl:7: query 'e' has no positive and no negative passage", "no-passages"),
        ("queries.jsonl", {"id": "z", "query": " "}, r"queries\.jsonl:7: query example: field 'query' is empty", "empty-query"),
        ("queries.jsonl", {"query": "no id"}, r"queries\.jsonl:7: query example: missing field 'id'", "missing-field"),
        ("corpus.jsonl", {"id": "4983", "text": "dup"}, r"corpus\.jsonl:9: duplicate passage id '4983'", "duplicate-id"),
        ("corpus.jsonl", {"id": "e", "text": ""}, r"corpus\.jsonl:9: passage: field 'text' is empty", "empty-passage"),
        ("pairs.jsonl", {"query_id": "1", "query": "q", "passage": {"id": "p", "text": "t"}}, r"pairs\.jsonl:8: labelled pair: missing field 'label'", "missing-field"),
        ("pairs.jsonl", b"not json\n", r"pairs\.jsonl:8: invalid JSON", "invalid-json"),
    ],
)
def test_bad_rows(written, file, row, message, kind):
    raw = _append(written / file, row)
    readers = {"queries.jsonl": read_queries, "corpus.jsonl": read_passages, "pairs.jsonl": read_pairs}
    with pytest.raises(DataError, match=message):
        list(readers[file](written / file))
    with Rejects(skip_bad=True, out_dir=written / "rej") as rj:
        list(readers[file](written / file, rj))
    assert rj.counts == {kind: 1}
    assert (written / "rej" / f"{file}.rejected").read_bytes() == raw


def test_missing_files(tmp_path):
    with pytest.raises(MissingInputError, match="q.jsonl"):
        open_source("queries", input=tmp_path / "q.jsonl")
    (tmp_path / "q.jsonl").write_text("")
    with pytest.raises(MissingInputError, match="c.jsonl"):
        open_source("queries", input=tmp_path / "q.jsonl", corpus=tmp_path / "c.jsonl")
