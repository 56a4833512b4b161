"""Natural Questions readers: DPR (JSON array streamed, and JSONL) and NQ-open with a passage pool."""

from __future__ import annotations

import gzip
import json

import pytest
from readers_helpers import FIX, ROOT, SAMPLE

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import open_source
from data_prep.readers.common import stable_id, text_query_id
from data_prep.readers.nq import read_dpr, read_nq_open

DPR = FIX / "nq" / "dpr-nq.sample.json"
NQ_HEAD = FIX / "nq" / "nq-open-oracle.head.jsonl"
NQ_FULL = SAMPLE / "nq_open" / "nq-open-oracle.jsonl.gz"


def test_nq_open_full_sample_through_open_source(monkeypatch):
    monkeypatch.chdir(ROOT)  # the exact call the mining code makes, relative to the repo root
    src = open_source("nq-open", input="data/sample/nq_open/nq-open-oracle.jsonl.gz")
    queries = list(src.queries())
    corpus = {p.id: p for p in src.corpus()}
    assert len(queries) == 2655 and len(corpus) == 2600  # some gold passages serve several questions
    assert all(len(q.positives) == 1 and q.answers for q in queries)
    assert all(corpus[p.id] == p for q in queries for p in q.positives)
    first = json.loads(gzip.open(NQ_FULL).readline())
    q0 = queries[0]
    assert q0.id == text_query_id(first["question"]) and q0.answers == first["answers"]
    ctx = first["ctxs"][0]
    assert q0.positives[0].id == stable_id(ctx["title"], ctx["text"]) and q0.positives[0].title == ctx["title"]
    assert q0.metadata["label_source"] == "human"


def test_nq_open_without_isgold_falls_back_to_hasanswer(tmp_path):
    row = json.loads(NQ_HEAD.read_text(encoding="utf-8").splitlines()[0])
    other = json.loads(NQ_HEAD.read_text(encoding="utf-8").splitlines()[1])["ctxs"][0]
    row["ctxs"] = [
        {"title": "x", "text": "a distractor that mentions Wilhelm Conrad Röntgen", "hasanswer": True},
        {**other, "hasanswer": False},
        {"title": "y", "text": "another distractor", "hasanswer": False},
    ]
    for c in row["ctxs"]:
        c.pop("isgold", None)
    path = tmp_path / "nq-open-20.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (ex,) = read_nq_open(path)
    assert [p.title for p in ex.positives] == ["x"] and [p.title for p in ex.negatives] == [other["title"], "y"]
    assert ex.metadata["label_source"] == "answer-match"
    # with isgold present, a non-gold context that contains an answer is neither positive nor negative
    row["ctxs"][1]["isgold"] = True
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (ex,) = read_nq_open(path)
    assert [p.title for p in ex.positives] == [other["title"]] and [p.title for p in ex.negatives] == ["y"]
    assert len(list(open_source("nq-open", input=path).corpus())) == 3  # every context is in the corpus


@pytest.mark.parametrize(
    "edit, message, kind",
    [
        (lambda r: r.pop("ctxs"), r"missing field 'ctxs'", "missing-field"),
        (lambda r: r.pop("answers"), r"missing field 'answers'", "missing-field"),
        (lambda r: r.update(question=""), r"empty query", "empty-query"),
        (lambda r: r["ctxs"][0].update(text=" "), r"ctxs\[0\]: empty passage", "empty-passage"),
        (lambda r: r.update(answers="Paris"), r"field 'answers' must be a list of strings", "invalid-type"),
    ],
)
def test_nq_open_bad_rows(tmp_path, edit, message, kind):
    lines = NQ_HEAD.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    edit(row)
    lines[1] = json.dumps(row)
    path = tmp_path / "nq.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"nq\.jsonl:2: " + message):
        list(read_nq_open(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        src = open_source("nq-open", input=path, rejects=rj)
        assert len(list(src.queries())) == 3 and len(list(src.corpus())) == 3
    assert rj.counts == {kind: 1}
    assert (tmp_path / "rej" / "nq.jsonl.rejected").read_text(encoding="utf-8") == lines[1] + "\n"


def test_nq_open_invalid_json_and_missing_file(tmp_path):
    lines = NQ_HEAD.read_bytes().split(b"\n")
    path = tmp_path / "nq.jsonl"
    path.write_bytes(lines[0] + b"\n" + lines[1][:-5] + b"\n")
    with pytest.raises(DataError, match=r"nq\.jsonl:2: invalid JSON"):
        list(read_nq_open(path))
    with pytest.raises(MissingInputError, match="missing.jsonl.gz"):
        open_source("nq-open", input=tmp_path / "missing.jsonl.gz")


# ---------------------------------------------------------------- DPR


def test_dpr_array_fixture():
    raw = json.loads(DPR.read_text(encoding="utf-8"))
    ex = list(read_dpr(DPR))
    assert len(ex) == 3
    for e, r in zip(ex, raw):
        assert e.query == r["question"] and e.answers == r["answers"]
        assert [p.text for p in e.positives] == [c["text"] for c in r["positive_ctxs"]]
        assert [p.text for p in e.negatives] == [c["text"] for c in r["hard_negative_ctxs"] + r["negative_ctxs"]]
        assert e.metadata["num_hard_negatives"] == 1
    src = open_source("dpr", input=DPR)
    ids = [p.id for p in src.corpus()]
    assert len(ids) == len(set(ids)) == 7  # 9 contexts, two negatives shared between questions


def test_dpr_jsonl_and_gz_read_the_same(tmp_path):
    raw = json.loads(DPR.read_text(encoding="utf-8"))
    jl = tmp_path / "nq-train.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in raw), encoding="utf-8")
    gz = tmp_path / "nq-train.json.gz"
    gz.write_bytes(gzip.compress(DPR.read_bytes()))
    want = [e.to_dict() for e in read_dpr(DPR)]
    assert [e.to_dict() for e in read_dpr(jl)] == want
    assert [e.to_dict() for e in read_dpr(gz)] == want


def test_dpr_passage_ids_used_when_present(tmp_path):
    raw = json.loads(DPR.read_text(encoding="utf-8"))
    raw[0]["positive_ctxs"][0]["passage_id"] = "11828866"
    raw[0]["hard_negative_ctxs"][0]["psg_id"] = 42
    path = tmp_path / "x.json"
    path.write_text(json.dumps(raw, indent=4), encoding="utf-8")
    e = next(read_dpr(path))
    assert e.positives[0].id == "11828866" and e.negatives[0].id == "42"


def _dpr_with_bad_second_element(tmp_path, edit):
    raw = json.loads(DPR.read_text(encoding="utf-8"))
    edit(raw[1])
    text = json.dumps(raw, indent=4)
    path = tmp_path / "nq-train.json"
    path.write_text(text, encoding="utf-8")
    start = [i + 1 for i, line in enumerate(text.splitlines()) if line == "    {"][1]
    return path, start


@pytest.mark.parametrize(
    "edit, message, kind",
    [
        (lambda r: r.pop("positive_ctxs"), r"missing field 'positive_ctxs'", "missing-field"),
        (lambda r: r.pop("question"), r"missing field 'question'", "missing-field"),
        (lambda r: r["hard_negative_ctxs"][0].pop("text"), r"missing field 'hard_negative_ctxs\[0\]\.text'", "missing-field"),
        (lambda r: r["negative_ctxs"][0].update(text=""), r"negative_ctxs\[0\]: empty passage", "empty-passage"),
        (lambda r: r.update(question="   "), r"empty query", "empty-query"),
    ],
)
def test_dpr_bad_element_reported_at_its_start_line(tmp_path, edit, message, kind):
    path, start = _dpr_with_bad_second_element(tmp_path, edit)
    with pytest.raises(DataError, match=rf"nq-train\.json:{start}: {message}"):
        list(read_dpr(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(open_source("dpr", input=path, rejects=rj).queries())) == 2
    assert rj.counts == {kind: 1}
    rejected = (tmp_path / "rej" / "nq-train.json.rejected").read_text(encoding="utf-8")
    assert rejected.startswith("{") and rejected.endswith("}\n") and rejected.count("\n") > 5  # the element as written
