"""MS MARCO readers: TSV release files, triples (real sample, mojibake), Hugging Face rows."""

from __future__ import annotations

import json
import shutil

import pytest
from readers_helpers import FIX, SAMPLE, rejects_index

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import open_source
from data_prep.readers.msmarco import read_collection, read_hf_msmarco, read_qrels, read_queries, read_triples

PASSAGE = FIX / "msmarco" / "passage"
TRIPLES = SAMPLE / "msmarco" / "triples.train.small.sample.tsv"
HF = FIX / "hf_msmarco" / "ms_marco_v2.1.sample.jsonl"


def _copy_passage(tmp_path):
    d = tmp_path / "msmarco"
    shutil.copytree(PASSAGE, d)
    return d


def _append(path, data: bytes):
    with open(path, "ab") as f:
        f.write(data)


# ---------------------------------------------------------------- triples (real file)


def test_triples_real_sample_keeps_mojibake_by_default():
    rows = list(read_triples(TRIPLES))
    assert len(rows) == 100
    first = rows[0]
    assert first.query == "is a little caffeine ok during pregnancy"
    assert first.positives[0].text.startswith("We donâ\x80\x99t know a lot")
    assert first.negatives[0].text.startswith("It is generally safe for pregnant women")
    fixed = list(read_triples(TRIPLES, fix_mojibake=True))
    assert fixed[0].positives[0].text.startswith("We don\u2019t know a lot")
    assert fixed[0].positives[0].id != first.positives[0].id  # ids follow the text actually read


def test_triples_source_groups_rows_and_dedupes_passages():
    src = open_source("msmarco-triples", input=TRIPLES)
    queries = list(src.queries())
    corpus = list(src.corpus())
    ids = [p.id for p in corpus]
    assert len(queries) == 100 and len(ids) == len(set(ids)) == 146
    assert all(p.id in set(ids) for q in queries for p in q.positives + q.negatives)


def test_triples_consecutive_rows_of_one_query_merge(tmp_path):
    lines = TRIPLES.read_bytes().split(b"\n")[:2]
    q, pos, neg = lines[0].split(b"\t")
    _, pos2, neg2 = lines[1].split(b"\t")
    path = tmp_path / "t.tsv"
    path.write_bytes(b"\n".join([lines[0], b"\t".join([q, pos2, neg2]), lines[1]]) + b"\n")
    ex = list(open_source("msmarco-triples", input=path).queries())
    assert [(len(e.positives), len(e.negatives)) for e in ex] == [(2, 2), (1, 1)]


def test_triples_wrong_column_count(tmp_path):
    path = tmp_path / "triples.tsv"
    lines = TRIPLES.read_bytes().split(b"\n")
    path.write_bytes(lines[0] + b"\n" + lines[1].rsplit(b"\t", 1)[0] + b"\n" + lines[2] + b"\n")
    with pytest.raises(DataError, match=r"triples\.tsv:2: wrong number of columns: expected 3 tab-separated \(query, positive, negative\), got 2"):
        list(read_triples(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(read_triples(path, rj))) == 2
    assert (tmp_path / "rej" / "triples.tsv.rejected").read_bytes() == lines[1].rsplit(b"\t", 1)[0] + b"\n"


# ---------------------------------------------------------------- collection + queries + qrels


def test_msmarco_source_joins_qrels_queries_and_collection():
    src = open_source("msmarco", input=PASSAGE)
    corpus = {p.id: p for p in src.corpus()}
    queries = list(src.queries())
    assert len(corpus) == 14 and len(queries) == 8
    triples = list(read_triples(FIX / "msmarco" / "triples.train.small.head.tsv"))
    for ex, t in zip(queries, triples):
        assert ex.query == t.query
        (pos,) = ex.positives
        assert corpus[pos.id] == pos and pos.text == t.positives[0].text
        assert ex.metadata["relevance"] == {pos.id: 1}
    assert queries[0].id == "1000" and queries[0].positives[0].id == "7000"


def test_msmarco_explicit_files_and_split(tmp_path):
    d = _copy_passage(tmp_path)
    (d / "queries.train.tsv").rename(d / "queries.dev.small.tsv")
    (d / "qrels.train.tsv").rename(d / "qrels.dev.small.tsv")
    assert len(list(open_source("msmarco", input=d, split="dev.small").queries())) == 8
    src = open_source("msmarco", corpus=d / "collection.tsv", queries=d / "queries.dev.small.tsv", qrels=d / "qrels.dev.small.tsv")
    assert len(list(src.queries())) == 8
    with pytest.raises(MissingInputError, match=r"queries\.train\.tsv"):
        open_source("msmarco", input=d)


def test_msmarco_qrels_judged_zero_is_a_negative(tmp_path):
    d = _copy_passage(tmp_path)
    _append(d / "qrels.train.tsv", b"1000 0 7001 0\n")
    ex = next(iter(open_source("msmarco", input=d).queries()))
    assert [p.id for p in ex.positives] == ["7000"] and [p.id for p in ex.negatives] == ["7001"]


@pytest.mark.parametrize(
    "file, row, message, kind",
    [
        ("collection.tsv", b"7003\tdup text\n", r"collection\.tsv:15: duplicate passage id '7003'", "duplicate-id"),
        ("collection.tsv", b"7100 no tab in this line\n", r"collection\.tsv:15: wrong number of columns: expected 2 tab-separated \(pid, passage\), got 1", "columns"),
        ("collection.tsv", b"7000\tthe judged passage again\n", r"collection\.tsv:15: duplicate passage id '7000'", "duplicate-id"),
        ("collection.tsv", b"7100\ttext\textra\n", r"collection\.tsv:15: wrong number of columns: expected 2 tab-separated \(pid, passage\), got 3", "columns"),
        ("collection.tsv", b"7100\t   \n", r"collection\.tsv:15: empty passage", "empty-passage"),
        ("collection.tsv", b"7100\tcaf\xe9\n", r"collection\.tsv:15: invalid UTF-8 byte 0xe9 at column 9", "encoding"),
        ("queries.train.tsv", b"1003\tdup query\n", r"queries\.train\.tsv:9: duplicate query id '1003'", "duplicate-id"),
        ("queries.train.tsv", b"1100\t\n", r"queries\.train\.tsv:9: empty query", "empty-query"),
        ("qrels.train.tsv", b"1000 0 9999 1\n", r"qrels\.train\.tsv:9: passage id '9999' is not in collection\.tsv", "unknown-passage"),
        ("qrels.train.tsv", b"4242 0 7000 1\n", r"qrels\.train\.tsv:9: query id '4242' is not in queries\.train\.tsv", "unknown-query"),
        ("qrels.train.tsv", b"1000 0 7000\n", r"qrels\.train\.tsv:9: wrong number of columns: expected 4 whitespace-separated", "columns"),
        ("qrels.train.tsv", b"1000 0 7001 yes\n", r"qrels\.train\.tsv:9: relevance 'yes' is not a number", "invalid-score"),
        ("qrels.train.tsv", b"1000 0 7000 1\n", r"qrels\.train\.tsv:9: duplicate qrels entry for query '1000' and passage '7000'", "duplicate-id"),
    ],
)
def test_msmarco_bad_rows_strict_and_skipped(tmp_path, file, row, message, kind):
    d = _copy_passage(tmp_path)
    _append(d / file, row)
    with pytest.raises(DataError, match=message):
        src = open_source("msmarco", input=d)
        list(src.corpus()), list(src.queries())
    out = tmp_path / "rej"
    with Rejects(skip_bad=True, out_dir=out) as rj:
        src = open_source("msmarco", input=d, rejects=rj)
        corpus, queries = list(src.corpus()), list(src.queries())
        list(src.queries())  # a second pass must not count the row again
    assert len(queries) == 8 and len(corpus) >= 14
    assert rj.counts == {kind: 1}
    assert (out / f"{file}.rejected").read_bytes() == row
    assert rejects_index(out)[0]["kind"] == kind


def test_msmarco_streaming_functions(tmp_path):
    assert [q for q, _ in read_queries(PASSAGE / "queries.train.tsv")][:2] == ["1000", "1001"]
    assert [(r.qid, r.pid, r.score) for r in read_qrels(PASSAGE / "qrels.train.tsv")][0] == ("1000", "7000", 1)
    assert sum(1 for _ in read_collection(PASSAGE / "collection.tsv")) == 14
    with pytest.raises(MissingInputError, match="nowhere"):
        open_source("msmarco", input=tmp_path / "nowhere")


# ---------------------------------------------------------------- Hugging Face ms_marco rows


def test_hf_msmarco_rows():
    rows = [json.loads(x) for x in HF.read_text(encoding="utf-8").splitlines()]
    ex = list(read_hf_msmarco(HF))
    assert len(ex) == 5
    for e, r in zip(ex, rows):
        assert e.id == str(r["query_id"]) and e.query == r["query"]
        (pos,) = e.positives
        assert pos.text == r["passages"]["passage_text"][1] and pos.metadata == {"url": r["passages"]["url"][1]}
        assert [n.text for n in e.negatives] == [r["passages"]["passage_text"][i] for i in (0, 2)]
        assert e.metadata["query_type"] == "DESCRIPTION"
    assert ex[3].answers == []  # "No Answer Present." dropped
    assert ex[0].answers == rows[0]["answers"]
    src = open_source("hf-msmarco", input=HF)
    ids = {p.id for p in src.corpus()}
    assert all(p.id in ids for e in src.queries() for p in e.positives + e.negatives)


def test_hf_msmarco_parquet_matches_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(x) for x in HF.read_text(encoding="utf-8").splitlines()]
    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert [e.to_dict() for e in read_hf_msmarco(path)] == [e.to_dict() for e in read_hf_msmarco(HF)]


@pytest.mark.parametrize(
    "edit, message, kind",
    [
        (lambda r: r["passages"]["is_selected"].pop(), r"passages: is_selected has 2 items, passage_text 3, url 3", "invalid-passages"),
        (lambda r: r.pop("passages"), r"missing field 'passages'", "missing-field"),
        (lambda r: r.update(query="  "), r"empty query", "empty-query"),
        (lambda r: r["passages"]["passage_text"].__setitem__(2, ""), r"passages\.passage_text\[2\]: empty passage", "empty-passage"),
        (lambda r: r.update(query_id=19700), r"duplicate query id '19700'", "duplicate-id"),
    ],
)
def test_hf_msmarco_bad_rows(tmp_path, edit, message, kind):
    lines = HF.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[2])
    edit(row)
    lines[2] = json.dumps(row, ensure_ascii=False)
    path = tmp_path / "hf.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"hf\.jsonl:3: " + message):
        list(read_hf_msmarco(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(read_hf_msmarco(path, rj))) == 4
    assert rj.counts == {kind: 1}
    assert (tmp_path / "rej" / "hf.jsonl.rejected").read_text(encoding="utf-8") == lines[2] + "\n"
