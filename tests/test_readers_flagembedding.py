"""FlagEmbedding JSONL: read, write (atomically), and a byte-for-byte round trip of the real files."""

from __future__ import annotations

import json

import pytest
from readers_helpers import FIX, SAMPLE

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import open_source
from data_prep.readers.flagembedding import read_flagembedding, write_flagembedding
from data_prep.records import Passage, QueryExample

HEAD = FIX / "flagembedding" / "msmarco.head.jsonl"


def test_read_fixture_keeps_scores_prompt_and_type():
    rows = [json.loads(x) for x in HEAD.read_text(encoding="utf-8").splitlines()]
    ex = list(read_flagembedding(HEAD))
    assert len(ex) == 3
    for e, r in zip(ex, rows):
        assert e.query == r["query"]
        assert [p.text for p in e.positives] == r["pos"] and [p.text for p in e.negatives] == r["neg"]
        assert e.metadata == {k: r[k] for k in ("pos_scores", "neg_scores", "prompt", "type")}
    src = open_source("flagembedding", input=FIX / "flagembedding" / "nq.head.jsonl")
    assert len(list(src.queries())) == 2 and len(list(src.corpus())) == 8


@pytest.mark.parametrize("name", ["msmarco.jsonl", "nq.jsonl", "reranker_examples.jsonl"])
def test_real_files_round_trip_byte_for_byte(tmp_path, name):
    src = SAMPLE / "flagembedding" / name
    out = tmp_path / name
    n = write_flagembedding(out, read_flagembedding(src))
    assert n == 10
    assert out.read_bytes() == src.read_bytes()


def test_write_mined_examples(tmp_path):
    ex = [
        QueryExample(
            "q1",
            "who wrote hamlet",
            positives=[Passage("p1", "Hamlet is a tragedy by Shakespeare.", title="Hamlet", metadata={"score": 0.9})],
            negatives=[Passage("n1", "Macbeth is a tragedy.", metadata={"score": 0.5}), Passage("n2", "Othello.", metadata={"score": 0.4})],
        ),
        QueryExample("q2", "no negatives", positives=[Passage("p2", "x")]),
        QueryExample("q3", "no positives", negatives=[Passage("n3", "y")]),
    ]
    out = tmp_path / "train.jsonl"
    assert write_flagembedding(out, ex, prompt="Given a question, retrieve passages that answer it.") == 1
    (row,) = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert row == {
        "query": "who wrote hamlet",
        "pos": ["Hamlet Hamlet is a tragedy by Shakespeare."],
        "neg": ["Macbeth is a tragedy.", "Othello."],
        "pos_scores": [0.9],
        "neg_scores": [0.5, 0.4],
        "prompt": "Given a question, retrieve passages that answer it.",
    }
    assert write_flagembedding(tmp_path / "all.jsonl", ex, require_negatives=False) == 2


def test_write_is_atomic(tmp_path):
    out = tmp_path / "train.jsonl"
    out.write_text("previous\n")

    def examples():
        yield from read_flagembedding(HEAD)
        raise RuntimeError("killed half way")

    with pytest.raises(RuntimeError):
        write_flagembedding(out, examples())
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.jsonl"]  # no temporary file left


@pytest.mark.parametrize(
    "edit, message, kind",
    [
        (lambda r: r.pop("pos"), r"missing field 'pos'", "missing-field"),
        (lambda r: r.update(pos=[]), r"field 'pos' is an empty list", "no-positive"),
        (lambda r: r.update(query=""), r"empty query", "empty-query"),
        (lambda r: r["neg"].__setitem__(1, " "), r"neg\[1\]: empty passage", "empty-passage"),
        (lambda r: r["neg_scores"].pop(), r"field 'neg_scores' has 2 scores but 'neg' has 3 texts", "invalid-scores"),
        (lambda r: r.update(neg="text"), r"field 'neg' must be a list of strings, got str", "invalid-type"),
    ],
)
def test_bad_rows(tmp_path, edit, message, kind):
    lines = HEAD.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    edit(row)
    lines[1] = json.dumps(row)
    path = tmp_path / "fe.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"fe\.jsonl:2: " + message):
        list(read_flagembedding(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(read_flagembedding(path, rj))) == 2
    assert rj.counts == {kind: 1}
    assert (tmp_path / "rej" / "fe.jsonl.rejected").read_text(encoding="utf-8") == lines[1] + "\n"


def test_invalid_json_and_missing_file(tmp_path):
    lines = HEAD.read_bytes().split(b"\n")
    path = tmp_path / "fe.jsonl"
    path.write_bytes(lines[0] + b"\n" + b'{"query": "x", "pos": ["a"' + b"\n")
    with pytest.raises(DataError, match=r"fe\.jsonl:2: invalid JSON"):
        list(read_flagembedding(path))
    with pytest.raises(MissingInputError, match="absent.jsonl"):
        open_source("flagembedding", input=tmp_path / "absent.jsonl")
