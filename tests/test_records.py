"""Records: JSONL and datasets round-trips, validation messages, and file:line errors on read."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest

from data_prep.io import DataError, Rejects, read_records, write_jsonl
from data_prep.records import (
    LABEL_SOURCES,
    LabelledPair,
    Passage,
    QueryExample,
    RecordError,
    from_dataset,
    to_dataset,
)

NQ = Path(__file__).resolve().parents[1] / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"


@pytest.fixture(scope="module")
def nq_rows() -> list[dict]:
    with gzip.open(NQ, "rt", encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(3)]


@pytest.fixture(scope="module")
def records(nq_rows):
    """One of each record, from real NQ-open text, with nested and with empty metadata."""
    r0, r1 = nq_rows[0], nq_rows[1]
    gold = Passage(
        id="nq-0",
        title=r0["ctxs"][0]["title"],
        text=r0["ctxs"][0]["text"],
        metadata={"hasanswer": True, "spans": [[62, 87], {"nested": {"deep": [1.5, None, "é"]}}]},
    )
    other = Passage(id="nq-1", title=r1["ctxs"][0]["title"], text=r1["ctxs"][0]["text"])  # empty metadata
    example = QueryExample(
        id="q0",
        query=r0["question"],
        positives=[gold],
        negatives=[Passage(other.id, other.text, other.title, {"rank": 1, "score": 12.5, "kind": "hard"})],
        answers=r0["answers"],
        source="nq-open",
        metadata={"split": "dev", "annotations": {"short_answers": r0["nq_annotated_gold"]["short_answers"]}},
    )
    bare = QueryExample(id="q1", query=r1["question"], positives=[other], answers=r1["answers"])
    pair = LabelledPair("q0", r0["question"], gold, 1, "human", {"role": "positive", "ranks": {"bm25": [3]}})
    pair0 = LabelledPair("q1", r1["question"], other, 0.25, "llm")
    return {"passage": [gold, other], "query": [example, bare], "pair": [pair, pair0]}


@pytest.mark.parametrize("kind,cls", [("passage", Passage), ("query", QueryExample), ("pair", LabelledPair)])
def test_jsonl_round_trip(tmp_path, records, kind, cls):
    path = tmp_path / f"{kind}.jsonl"
    assert write_jsonl(path, records[kind]) == 2
    back = list(read_records(path, cls))
    assert back == records[kind]
    assert "Röntgen" in path.read_text(encoding="utf-8")  # written as UTF-8, not \u escapes


def test_jsonl_round_trip_gzip(tmp_path, records):
    path = tmp_path / "q.jsonl.gz"
    write_jsonl(path, records["query"])
    assert list(read_records(path, QueryExample)) == records["query"]


@pytest.mark.parametrize("kind,cls", [("passage", Passage), ("query", QueryExample), ("pair", LabelledPair)])
def test_dataset_round_trip(records, kind, cls):
    ds = to_dataset(records[kind])
    assert len(ds) == 2
    back = from_dataset(ds, cls)
    assert back == records[kind]
    assert back[0].to_dict() == records[kind][0].to_dict()


def test_dataset_round_trip_keeps_empty_lists_and_metadata(records):
    ex = QueryExample(id="q9", query=records["query"][1].query)  # no positives, negatives, answers
    (back,) = from_dataset(to_dataset([ex]), QueryExample)
    assert back == ex and back.metadata == {} and back.positives == [] and back.answers == []


def test_pair_label_is_float_and_defaults(records):
    p = LabelledPair.from_dict({"query_id": "7", "query": "q", "passage": {"id": 5, "text": "x"}, "label": 1})
    assert p.label == 1.0 and isinstance(p.label, float)
    assert p.label_source == "human" and p.passage.id == "5" and p.metadata == {}


@pytest.mark.parametrize(
    "change,message",
    [
        ({"label": 1.5}, "labelled pair 'q0': label 1.5 is outside [0, 1]"),
        ({"label": -0.1}, "labelled pair 'q0': label -0.1 is outside [0, 1]"),
        ({"label": math.nan}, "labelled pair 'q0': label nan is outside [0, 1]"),
        ({"label": "yes"}, "labelled pair 'q0': label 'yes' is not a number"),
        ({"label_source": "gold"}, "labelled pair 'q0': label_source 'gold' is not one of " + ", ".join(LABEL_SOURCES)),
        ({"query": "   "}, "labelled pair: field 'query' is empty"),
    ],
)
def test_pair_validation_messages(records, change, message):
    d = records["pair"][0].to_dict() | change
    with pytest.raises(RecordError) as e:
        LabelledPair.from_dict(d)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: Passage(id="p", text=""), "passage 'p': field 'text' is empty"),
        (lambda: Passage(id="", text="x"), "passage: field 'id' is empty"),
        (lambda: Passage.from_dict({"id": "p"}), "passage: missing field 'text'"),
        (lambda: QueryExample(id="q", query=" "), "query example 'q': field 'query' is empty"),
        (lambda: QueryExample.from_dict({"id": "q", "query": "x", "answers": "Paris"}),
         "query example: field 'answers' must be a list of strings"),
        (lambda: QueryExample.from_dict({"id": "q", "query": "x", "positives": [{"id": "p", "text": ""}]}),
         "passage: field 'text' is empty"),
        (lambda: LabelledPair.from_dict({"query_id": "q", "query": "x", "label": 1}), "labelled pair: missing field 'passage'"),
    ],
)
def test_record_validation_messages(make, message):
    with pytest.raises(RecordError) as e:
        make()
    assert str(e.value) == message


def _bad_pair_file(tmp_path: Path, records) -> tuple[Path, list[bytes]]:
    good = json.dumps(records["pair"][0].to_dict(), ensure_ascii=False)
    no_label = json.loads(good)
    del no_label["label"]
    lines = [
        good,
        json.dumps(no_label, ensure_ascii=False),  # line 2: missing field
        '{"query_id": "q2", "query": "broken"',  # line 3: bad JSON
        "",  # line 4: blank, ignored
        json.dumps(records["pair"][1].to_dict() | {"label": 2}),  # line 5: out of range
        json.dumps(records["pair"][1].to_dict()),
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, [ln.encode("utf-8") for ln in lines]


def test_read_records_strict_reports_file_and_line(tmp_path, records):
    path, _ = _bad_pair_file(tmp_path, records)
    with pytest.raises(DataError) as e:
        list(read_records(path, LabelledPair))
    assert str(e.value) == f"{path}:2: labelled pair: missing field 'label'"
    assert e.value.line == 2 and e.value.kind == "missing-field"


def test_read_records_bad_json_message(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "q1", "query": "x"}\n{"id": "q2", "query": \n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: invalid JSON \(Expecting value at column 23\)$"):
        list(read_records(path, QueryExample))


def test_read_records_skip_bad_counts_and_keeps_raw_rows(tmp_path, records):
    path, lines = _bad_pair_file(tmp_path, records)
    with Rejects(skip_bad=True, out_dir=tmp_path / "rejects") as rejects:
        got = list(read_records(path, LabelledPair, rejects))
    assert [p.query_id for p in got] == ["q0", "q1"]
    assert rejects.summary() == {"total": 3, "by_reason": {"invalid-json": 1, "invalid-record": 1, "missing-field": 1}}
    rejected = (tmp_path / "rejects" / "pairs.jsonl.rejected").read_bytes().splitlines()
    assert rejected == [lines[1], lines[2], lines[4]]  # unchanged bytes, in file order
    index = [json.loads(x) for x in (tmp_path / "rejects" / "rejects.jsonl").read_text().splitlines()]
    assert [(i["line"], i["kind"]) for i in index] == [(2, "missing-field"), (3, "invalid-json"), (5, "invalid-record")]
    assert index[2]["reason"] == "labelled pair 'q1': label 2.0 is outside [0, 1]"


def test_read_records_reports_non_utf8(tmp_path, records):
    path = tmp_path / "p.jsonl"
    good = json.dumps(records["passage"][1].to_dict()).encode()
    path.write_bytes(good + b"\n" + b'{"id": "x", "text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: invalid UTF-8 byte 0xe9"):
        list(read_records(path, Passage))


def test_read_records_missing_file_names_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        list(read_records(tmp_path / "nope.jsonl", Passage))
