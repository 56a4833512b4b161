"""Malformed inputs, made from real rows of the bundled samples and fixtures, through every reader
and through ``python -m data_prep convert|build|mine`` and ``python -m inference score``.

Three classes of problem (docs/data.md, "Refusals and errors"):

1. an example with no positive and no negative passage is a bad row (``no-passages``) in every
   reader; examples without a positive (legitimate in some formats) are counted with their ids by
   ``convert`` and ``mine``; ``build`` counts the empty ones it is given (``skipped.input``);
2. an empty input (0 bytes, blank lines only, a ``.gz`` of nothing) is ``file: empty input file:
   no records``; an input whose every row was rejected under ``--skip-bad`` is an error too
   (``no valid records (N rejected: ...; raw rows in DIR)``), with the raw rows kept;
3. a truncated or corrupt ``.gz`` is ``file:line: truncated or corrupt gzip data after line N
   (...)``, even with ``--skip-bad``, and leaves no output.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from pathlib import Path

import pytest
from readers_helpers import FIX, SAMPLE, rejects_index

from data_prep import build as B
from data_prep.cli import main
from data_prep.io import DataError, Rejects, iter_lines, write_jsonl
from data_prep.readers import open_pairs, open_source
from data_prep.readers.common import text_query_id
from data_prep.readers.files import iter_json_array
from data_prep.records import Passage, QueryExample

NQ_GZ = SAMPLE / "nq_open" / "nq-open-oracle.jsonl.gz"
NQ_HEAD = FIX / "nq" / "nq-open-oracle.head.jsonl"
DPR = FIX / "nq" / "dpr-nq.sample.json"
HF = FIX / "hf_msmarco" / "ms_marco_v2.1.sample.jsonl"
POPQA = FIX / "crag" / "popqa.sample.jsonl"
CRAG = FIX / "crag" / "crag_evaluator.sample.txt"
FE = SAMPLE / "flagembedding" / "nq.jsonl"
TRIPLES = SAMPLE / "msmarco" / "triples.train.small.sample.tsv"
SCIFACT = FIX / "beir" / "scifact"
MSMARCO = FIX / "msmarco" / "passage"
SQUAD2 = FIX / "squad" / "squad-v2.0.sample.json"
EOF_MSG = "Compressed file ended before the end-of-stream marker was reached"


def _nq_lines(n: int) -> list[bytes]:
    with gzip.open(NQ_GZ) as f:
        return [next(f) for _ in range(n)]


def _cut_gz(data: bytes, dst: Path, keep: float = 0.6) -> int:
    """``data`` gzipped and cut to ``keep`` of its compressed size; the number of complete lines
    that can still be decompressed (what a reader sees before the damage)."""
    comp = gzip.compress(data, mtime=0)
    cut = comp[: int(len(comp) * keep)]
    dst.write_bytes(cut)
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut).count(b"\n")


def _gz_error(path: Path, n: int, why: str = EOF_MSG) -> str:
    where = f"after line {n}" if n else "before the end of the first line"
    return f"{path}:{n + 1}: truncated or corrupt gzip data {where} ({why}); the rest of the file cannot be read"


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []


# ============================================================================================
# 3. truncated or corrupt .gz


def _inputs(tmp: Path, fmt: str) -> tuple[dict, Path, bytes]:
    """(open_source kwargs, the file to damage, its real content) for each line-based format."""
    if fmt == "nq-open":
        return {}, tmp / "nq.jsonl.gz", b"".join(_nq_lines(200))
    if fmt == "flagembedding":
        return {}, tmp / "fe.jsonl.gz", FE.read_bytes()
    if fmt == "msmarco-triples":
        return {}, tmp / "triples.tsv.gz", TRIPLES.read_bytes()
    if fmt == "hf-msmarco":
        return {}, tmp / "hf.jsonl.gz", HF.read_bytes()
    if fmt == "popqa":
        return {}, tmp / "popqa.jsonl.gz", POPQA.read_bytes()
    if fmt == "queries":
        data = b"".join((json.dumps(e.to_dict()) + "\n").encode() for e in open_source("nq-open", input=NQ_HEAD).queries())
        return {}, tmp / "queries.jsonl.gz", data
    if fmt == "dpr":  # the JSONL layout (the array layout is tested below)
        data = b"".join((json.dumps(e) + "\n").encode() for e in json.loads(DPR.read_text(encoding="utf-8")))
        return {}, tmp / "dpr.jsonl.gz", data
    if fmt == "beir":
        kw = {"queries": SCIFACT / "queries.jsonl", "qrels": SCIFACT / "qrels" / "train.tsv"}
        return kw, tmp / "corpus.jsonl.gz", (SCIFACT / "corpus.jsonl").read_bytes()
    if fmt == "msmarco":
        kw = {"queries": MSMARCO / "queries.train.tsv", "qrels": MSMARCO / "qrels.train.tsv"}
        return kw, tmp / "collection.tsv.gz", (MSMARCO / "collection.tsv").read_bytes()
    raise AssertionError(fmt)


GZ_FORMATS = ["nq-open", "flagembedding", "msmarco-triples", "hf-msmarco", "popqa", "queries", "dpr", "beir", "msmarco"]


@pytest.mark.parametrize("fmt", GZ_FORMATS)
def test_truncated_gz_is_an_error_naming_file_and_line_even_with_skip_bad(tmp_path, fmt):
    kw, path, data = _inputs(tmp_path, fmt)
    n = _cut_gz(data, path)
    assert 0 < n < data.count(b"\n")  # rows before the damage were readable
    key = "corpus" if fmt in ("beir", "msmarco") else "input"
    for rejects in (None, Rejects(skip_bad=True, out_dir=tmp_path / "rej")):
        src = open_source(fmt, rejects=rejects, **{key: path}, **kw)
        with pytest.raises(DataError) as e:
            list(src.queries())
        assert str(e.value) == _gz_error(path, n)
        assert e.value.kind == "corrupt-gzip"
    assert not (tmp_path / "rej").exists()  # nothing was a bad row: the file is


def test_cut_after_the_last_line_is_still_an_error(tmp_path):
    """All rows decompress, but the end-of-stream marker is missing: the file may be incomplete."""
    data = b"".join(_nq_lines(30))
    path = tmp_path / "nq.jsonl.gz"
    path.write_bytes(gzip.compress(data, mtime=0)[:-8])  # the CRC and length trailer lost
    with pytest.raises(DataError) as e:
        list(iter_lines(path))
    assert str(e.value) == _gz_error(path, 30)


def test_corrupt_and_not_gzip_data(tmp_path):
    data = b"".join(_nq_lines(100))
    comp = bytearray(gzip.compress(data, mtime=0))
    comp[len(comp) // 2] ^= 0xFF
    bad = tmp_path / "flipped.jsonl.gz"
    bad.write_bytes(bytes(comp))
    with pytest.raises(DataError, match=r"flipped\.jsonl\.gz:(\d+): truncated or corrupt gzip data after line \d+ \(") as e:
        list(open_source("nq-open", input=bad, rejects=Rejects(skip_bad=True)).queries())
    assert e.value.kind == "corrupt-gzip" and e.value.line > 1
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(data)
    with pytest.raises(DataError) as e:
        list(iter_lines(plain))
    assert str(e.value) == (f"{plain}: not gzip data: the name ends in .gz but the file is not gzip-compressed "
                            "(Not a gzipped file (b'{\"'))")


def test_truncated_gz_json_array(tmp_path):
    """The streaming JSON-array reader (DPR) reads in pieces: the line is where the damage was met."""
    elements = json.loads(DPR.read_text(encoding="utf-8"))
    data = json.dumps(elements * 60, indent=4).encode()
    path = tmp_path / "nq-train.json.gz"
    n = _cut_gz(data, path)
    with pytest.raises(DataError) as e:
        list(iter_json_array(path, Rejects(skip_bad=True)))
    assert e.value.kind == "corrupt-gzip" and 0 < e.value.line <= n + 1
    assert str(e.value) == _gz_error(path, e.value.line - 1)
    with pytest.raises(DataError, match=r"nq-train\.json\.gz:\d+: truncated or corrupt gzip data after line"):
        list(open_source("dpr", input=path).queries())


def test_convert_truncated_gz_exit_2_and_no_output(tmp_path, capsys):
    path = tmp_path / "nq.jsonl.gz"
    n = _cut_gz(b"".join(_nq_lines(200)), path)
    out = tmp_path / "out" / "nq.queries.jsonl"
    base = ["convert", "--format", "nq-open", "--input", str(path), "--output", str(out)]
    for to in ("queries", "flagembedding", "pairs"):
        for extra in ([], ["--skip-bad"]):
            assert main(base + ["--to", to] + extra) == 2
            assert capsys.readouterr().err == f"error: {_gz_error(path, n)}\n"
            assert _files(tmp_path / "out") == ["nq.queries.jsonl.lock"]  # only the output's lock (data_prep.locking)
    # an existing output is kept as it was: nothing already written is lost
    out.write_text("earlier output\n")
    assert main(base + ["--to", "queries", "--overwrite"]) == 2
    assert out.read_text() == "earlier output\n" and _files(tmp_path / "out") == ["nq.queries.jsonl", "nq.queries.jsonl.lock"]


def test_build_truncated_gz_exit_2_and_no_output(tmp_path, capsys):
    examples = list(open_source("nq-open", input=NQ_GZ).queries())[:300]
    data = b"".join((json.dumps(e.to_dict(), ensure_ascii=False) + "\n").encode() for e in examples)
    path = tmp_path / "examples.jsonl.gz"
    n = _cut_gz(data, path)
    for extra in ([], ["--skip-bad"]):
        out = tmp_path / "ds"
        assert main(["build", "--input", str(path), "--output", str(out), *extra]) == 2
        assert capsys.readouterr().err == f"error: {_gz_error(path, n)}\n"
        assert not out.exists()  # no task file, no empty task folder, no meta.json


def test_mine_truncated_gz_exit_2_and_no_output(tmp_path, capsys):
    path = tmp_path / "nq.jsonl.gz"
    n = _cut_gz(b"".join(_nq_lines(200)), path)
    out = tmp_path / "mined"
    assert main(["mine", "--format", "nq-open", "--input", str(path), "--output", str(out), "--no-progress", "--skip-bad"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"error: {_gz_error(path, n)}"
    assert _files(out) == []  # no index, no examples.jsonl, no meta.json


def test_inference_reading_layer_raises_for_truncated_gz(tmp_path):
    from inference.cli import open_rows, build_parser

    rows = [{"query": json.loads(r)["question"], "passage": json.loads(r)["ctxs"][0]["text"]} for r in _nq_lines(120)]
    path = tmp_path / "pairs.jsonl.gz"
    n = _cut_gz(b"".join((json.dumps(r) + "\n").encode() for r in rows), path)
    args = build_parser().parse_args(["score", "--model", "m", "--input", str(path), "--output", "o"])
    fmt, it = open_rows(args, path, Rejects(skip_bad=True))
    assert fmt == "simple"
    with pytest.raises(DataError) as e:
        list(it)
    assert str(e.value) == _gz_error(path, n)


def test_inference_score_truncated_and_empty_gz(tmp_path, ce_export, capsys):
    from inference.cli import main as inference_main

    rows = [{"query": json.loads(r)["question"], "passage": json.loads(r)["ctxs"][0]["text"]} for r in _nq_lines(120)]
    path = tmp_path / "pairs.jsonl.gz"
    n = _cut_gz(b"".join((json.dumps(r) + "\n").encode() for r in rows), path)
    out = tmp_path / "scores.jsonl"
    for extra in ([], ["--skip-bad"]):
        rc = inference_main(["score", "--model", str(ce_export), "--input", str(path), "--output", str(out), "--no-progress",
                             "--device", "cpu", "--chunk-size", "16", *extra])
        assert rc == 2
        assert capsys.readouterr().err.splitlines()[-1] == f"error: {_gz_error(path, n)}"
        assert _files(tmp_path) == ["pairs.jsonl.gz", "scores.jsonl.lock"]  # only the output's lock (data_prep.locking)
    empty = tmp_path / "empty.jsonl.gz"
    empty.write_bytes(gzip.compress(b""))
    assert inference_main(["score", "--model", str(ce_export), "--input", str(empty), "--output", str(out), "--no-progress",
                           "--device", "cpu"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"error: {empty}: empty input file: no records"
    assert not out.exists()


# ============================================================================================
# 2. empty input files

EMPTY = {"zero-bytes": b"", "blank-lines": b"\n   \n\t\n", "gz-of-nothing": None}


def _write_empty(path: Path, variant: str) -> Path:
    if variant == "gz-of-nothing":
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(b""))
    else:
        path.write_bytes(EMPTY[variant])
    return path


def _empty_case(tmp: Path, case: str, variant: str) -> tuple[str, dict, Path, str]:
    """(format, open_source kwargs, the empty file, the reason expected)."""
    reason = "empty input file: no records"
    single = {"nq-open": "nq.jsonl", "dpr": "nq-train.json", "flagembedding": "fe.jsonl", "msmarco-triples": "triples.tsv",
              "hf-msmarco": "hf.jsonl", "crag-evaluator": "train_popqa.txt", "popqa": "popqa.jsonl", "queries": "q.jsonl",
              "pairs": "pairs.jsonl", "squad": "train-v2.0.json"}
    if case in single:
        path = _write_empty(tmp / single[case], variant)
        return case, {"input": path}, path, reason + (" (expected SQuAD JSON)" if case == "squad" else "")
    fmt, which = case.split(":")
    if fmt == "beir":
        files = {"corpus": SCIFACT / "corpus.jsonl", "queries": SCIFACT / "queries.jsonl", "qrels": SCIFACT / "qrels" / "train.tsv"}
    else:
        files = {"corpus": MSMARCO / "collection.tsv", "queries": MSMARCO / "queries.train.tsv", "qrels": MSMARCO / "qrels.train.tsv"}
    files[which] = _write_empty(tmp / files[which].name, variant)
    return fmt, files, files[which], reason


EMPTY_CASES = ["nq-open", "dpr", "flagembedding", "msmarco-triples", "hf-msmarco", "crag-evaluator", "popqa", "queries",
               "pairs", "squad", "beir:corpus", "beir:queries", "beir:qrels", "msmarco:corpus", "msmarco:queries",
               "msmarco:qrels"]


@pytest.mark.parametrize("variant", list(EMPTY))
@pytest.mark.parametrize("case", EMPTY_CASES)
def test_every_reader_refuses_an_empty_file(tmp_path, case, variant):
    fmt, kw, path, reason = _empty_case(tmp_path, case, variant)
    for rejects in (None, Rejects(skip_bad=True)):
        src = open_source(fmt, rejects=rejects, **kw)
        reads = [src.queries, lambda: open_pairs(fmt, rejects=rejects, **kw)]
        if ":" not in case or case.endswith(":corpus"):  # a folder format's corpus() reads only its corpus file
            reads.append(src.corpus)
        for read in reads:
            with pytest.raises(DataError) as e:
                list(read())
            assert str(e.value) == f"{path}: {reason}"
            assert e.value.kind == "empty-file" and e.value.line is None


def test_header_only_qrels_and_empty_parquet(tmp_path):
    qrels = tmp_path / "train.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n\n")
    src = open_source("beir", corpus=SCIFACT / "corpus.jsonl", queries=SCIFACT / "queries.jsonl", qrels=qrels)
    with pytest.raises(DataError) as e:
        list(src.queries())
    assert str(e.value) == f"{qrels}: empty input file: no records (only the header row)"
    pq = tmp_path / "ms_marco.parquet"
    pq.write_bytes(b"")
    with pytest.raises(DataError) as e:
        list(open_source("hf-msmarco", input=pq).queries())
    assert str(e.value) == f"{pq}: empty input file: no records"
    pq.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataError, match=r"ms_marco\.parquet: cannot read parquet data before the first row \(") as e:
        list(open_source("hf-msmarco", input=pq).queries())
    assert e.value.kind == "corrupt-parquet"


@pytest.mark.parametrize("variant", list(EMPTY))
def test_commands_refuse_an_empty_file_and_write_nothing(tmp_path, capsys, variant):
    path = _write_empty(tmp_path / "nq.jsonl", variant)
    want = f"error: {path}: empty input file: no records"
    out = tmp_path / "out"
    assert main(["convert", "--format", "nq-open", "--input", str(path), "--to", "queries", "--output", str(out / "q.jsonl"),
                 "--skip-bad"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == want
    assert main(["build", "--input", str(path), "--output", str(out / "ds")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == want
    assert main(["mine", "--format", "nq-open", "--input", str(path), "--output", str(out / "mined"), "--no-progress"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == want
    assert _files(out) == ["ds.lock", "mined.lock", "q.jsonl.lock"]  # only the outputs' locks (data_prep.locking)
    assert all((out / f).stat().st_size == 0 for f in _files(out))


def _all_bad(tmp: Path) -> tuple[Path, list[bytes]]:
    """Three real NQ-open rows, each cut short (invalid JSON)."""
    rows = [line.rstrip(b"\n")[:-7] + b"\n" for line in _nq_lines(3)]
    path = tmp / "nq.jsonl"
    path.write_bytes(b"".join(rows))
    return path, rows


def test_convert_every_row_rejected_is_an_error_with_rejects_kept(tmp_path, capsys):
    path, rows = _all_bad(tmp_path)
    out = tmp_path / "out" / "q.jsonl"
    rej = tmp_path / "out" / "q.jsonl.rejects"
    assert main(["convert", "--format", "nq-open", "--input", str(path), "--to", "queries", "--output", str(out), "--skip-bad"]) == 2
    assert capsys.readouterr().err == f"error: {path}: no valid records to write (3 rejected: invalid-json: 3; raw rows in {rej})\n"
    assert not out.exists() and not (tmp_path / "out" / "q.jsonl.meta.json").exists()
    assert (rej / "nq.jsonl.rejected").read_bytes() == b"".join(rows)
    assert [(e["line"], e["kind"]) for e in rejects_index(rej)] == [(1, "invalid-json"), (2, "invalid-json"), (3, "invalid-json")]
    # the same through a native pair reader
    assert main(["convert", "--format", "popqa", "--input", str(path), "--to", "pairs", "--output", str(out), "--skip-bad"]) == 2
    assert capsys.readouterr().err == f"error: {path}: no valid pairs to write (3 rejected: invalid-json: 3; raw rows in {rej})\n"
    assert not out.exists()


def test_convert_some_rows_rejected_still_writes_and_counts(tmp_path, capsys):
    path, bad = _all_bad(tmp_path)
    good = _nq_lines(5)[3:]
    path.write_bytes(bad[0] + good[0] + bad[1] + good[1])
    out = tmp_path / "q.jsonl"
    assert main(["convert", "--format", "nq-open", "--input", str(path), "--to", "queries", "--output", str(out), "--skip-bad"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 2 queries records" in printed and "rejected 2 rows (invalid-json: 2)" in printed
    assert (tmp_path / "q.jsonl.rejects" / "nq.jsonl.rejected").read_bytes() == bad[0] + bad[1]


def test_build_every_row_rejected_keeps_only_the_rejects(tmp_path, capsys):
    examples = list(open_source("nq-open", input=NQ_HEAD).queries())
    rows = [(json.dumps(e.to_dict()) + "\n").encode()[:-9] + b"\n" for e in examples]
    path = tmp_path / "examples.jsonl"
    path.write_bytes(b"".join(rows))
    out = tmp_path / "ds"
    assert main(["build", "--input", str(path), "--output", str(out), "--skip-bad"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: no valid records (4 rejected: invalid-json: 4; raw rows in {out / 'rejects'})\n"
    assert _files(out) == ["rejects/examples.jsonl.rejected", "rejects/rejects.jsonl"]
    assert (out / "rejects" / "examples.jsonl.rejected").read_bytes() == b"".join(rows)


def test_mine_every_row_rejected(tmp_path, capsys):
    path, rows = _all_bad(tmp_path)
    out = tmp_path / "mined"
    assert main(["mine", "--format", "nq-open", "--input", str(path), "--output", str(out), "--no-progress", "--skip-bad"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == f"error: {path}: no valid passages to index (3 rejected: invalid-json: 3; raw rows in {out / 'rejects'})"
    assert _files(out) == ["rejects/nq.jsonl.rejected", "rejects/rejects.jsonl"]
    assert (out / "rejects" / "nq.jsonl.rejected").read_bytes() == b"".join(rows)


# ============================================================================================
# 1. examples with nothing in them


def _jsonl(path: Path, objs: list[dict]) -> list[bytes]:
    raws = [(json.dumps(o, ensure_ascii=False) + "\n").encode() for o in objs]
    path.write_bytes(b"".join(raws))
    return raws


def _no_passage_case(tmp: Path, fmt: str) -> tuple[Path, int, str, str]:
    """A file of real rows, one of them made empty: (path, its line, query id, the reason's detail)."""
    if fmt == "dpr":
        rows = json.loads(DPR.read_text(encoding="utf-8"))
        rows[1].update(positive_ctxs=[], hard_negative_ctxs=[], negative_ctxs=[])
        qid, why = text_query_id(rows[1]["question"]), "positive_ctxs, hard_negative_ctxs and negative_ctxs are all empty"
    elif fmt == "nq-open":
        rows = [json.loads(x) for x in NQ_HEAD.read_text(encoding="utf-8").splitlines()]
        rows[1]["ctxs"] = []
        qid, why = text_query_id(rows[1]["question"]), "ctxs is empty"
    elif fmt == "nq-open-answer-only":
        rows = [json.loads(x) for x in NQ_HEAD.read_text(encoding="utf-8").splitlines()]
        for c in rows[1]["ctxs"]:
            c.update(isgold=False, hasanswer=True)
        qid = text_query_id(rows[1]["question"])
        why = "none of its 1 contexts is gold and all contain an answer, so none is a negative either"
    elif fmt == "hf-msmarco":
        rows = [json.loads(x) for x in HF.read_text(encoding="utf-8").splitlines()]
        rows[1]["passages"] = {"is_selected": [], "passage_text": [], "url": []}
        qid, why = str(rows[1]["query_id"]), "passages.passage_text is empty"
    elif fmt == "popqa":
        rows = [json.loads(x) for x in POPQA.read_text(encoding="utf-8").splitlines()]
        rows[1]["ctxs"] = []
        qid, why = str(rows[1]["id"]), "ctxs is empty"
    elif fmt == "queries":
        rows = [e.to_dict() for e in open_source("nq-open", input=NQ_HEAD).queries()]
        rows[1].update(positives=[], negatives=[])
        qid, why = rows[1]["id"], "'positives' and 'negatives' are empty"
    else:
        raise AssertionError(fmt)
    path = tmp / f"{fmt}.jsonl"
    _jsonl(path, rows)
    return path, 2, qid, why


NO_PASSAGE_FORMATS = ["dpr", "nq-open", "nq-open-answer-only", "hf-msmarco", "popqa", "queries"]


@pytest.mark.parametrize("case", NO_PASSAGE_FORMATS)
def test_example_without_any_passage_is_a_bad_row(tmp_path, case):
    fmt = case.replace("-answer-only", "")
    path, line, qid, why = _no_passage_case(tmp_path, case)
    raw = path.read_bytes().splitlines(keepends=True)[line - 1]
    want = f"{path}:{line}: query {qid!r} has no positive and no negative passage ({why})"
    with pytest.raises(DataError) as e:
        list(open_source(fmt, input=path).queries())
    assert str(e.value) == want and e.value.kind == "no-passages"
    with pytest.raises(DataError) as e:  # the corpus read applies the same rule
        list(open_source(fmt, input=path).corpus())
    assert str(e.value) == want
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        src = open_source(fmt, input=path, rejects=rj)
        got = list(src.queries())
        list(src.corpus())  # a second read does not count the row again
    assert qid not in {ex.id for ex in got} and got
    assert all(ex.positives or ex.negatives for ex in got)
    assert rj.counts == {"no-passages": 1}
    assert (tmp_path / "rej" / path.name).with_suffix(".jsonl.rejected").read_bytes() == raw
    assert rejects_index(tmp_path / "rej") == [{"file": str(path), "line": line, "kind": "no-passages", "reason": want.split(": ", 1)[1]}]


def test_convert_counts_examples_without_positives_squad_v2(tmp_path, capsys):
    """SQuAD v2 unanswerable questions legitimately have no positive (the paragraph is a negative)."""
    impossible = [q["id"] for a in json.loads(SQUAD2.read_text())["data"] for p in a["paragraphs"] for q in p["qas"]
                  if q.get("is_impossible")]
    out = tmp_path / "squad.jsonl"
    assert main(["convert", "--format", "squad", "--input", str(SQUAD2), "--to", "queries", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"note: 2 of 59 examples have no positive passage (e.g. {', '.join(impossible)}); build gives them no evaluator pairs" in printed
    meta = json.loads((tmp_path / "squad.jsonl.meta.json").read_text())
    assert meta["written"] == 59 and meta["skipped"] == {}
    assert meta["examples"] == {"read": 59, "without_positives": 2, "without_negatives": 57,
                                "first_without_positives": impossible, "first_without_negatives": meta["examples"]["first_without_negatives"]}
    assert len(meta["examples"]["first_without_negatives"]) == 5
    # FlagEmbedding needs a positive and a negative: none of the SQuAD examples has both
    fe = tmp_path / "squad.fe.jsonl"
    assert main(["convert", "--format", "squad", "--input", str(SQUAD2), "--to", "flagembedding", "--output", str(fe)]) == 2
    assert capsys.readouterr().err == (f"error: {SQUAD2}: no records to write (59 examples read, none has both a positive "
                                       "and a negative passage (no-negatives: 57, no-positives: 2))\n")
    assert not fe.exists() and not (tmp_path / "squad.fe.jsonl.meta.json").exists()


def test_convert_flagembedding_counts_what_it_leaves_out(tmp_path, capsys):
    """DPR rows without a positive but with negatives are legitimate: passed on, counted."""
    rows = json.loads(DPR.read_text(encoding="utf-8"))
    rows[0]["positive_ctxs"] = []
    path = tmp_path / "dpr.jsonl"
    _jsonl(path, rows)
    out = tmp_path / "fe.jsonl"
    assert main(["convert", "--format", "dpr", "--input", str(path), "--to", "flagembedding", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    qid = text_query_id(rows[0]["question"])
    assert f"note: 1 of {len(rows)} examples have no positive passage (e.g. {qid})" in printed
    assert "skipped 1 examples FlagEmbedding cannot hold (no-positives: 1)" in printed
    meta = json.loads((tmp_path / "fe.jsonl.meta.json").read_text())
    assert meta["written"] == len(rows) - 1 and meta["skipped"] == {"no-positives": 1}
    assert meta["examples"]["without_positives"] == 1 and meta["examples"]["first_without_positives"] == [qid]


def test_build_counts_examples_without_passages(tmp_path, capsys):
    examples = list(open_source("nq-open", input=NQ_GZ).queries())[:30]
    pool = [p for e in examples for p in e.positives]
    for i, e in enumerate(examples):
        e.negatives = [pool[(i + k) % len(pool)] for k in (1, 2, 3)]
    empty = QueryExample("nothing-here", examples[0].query, answers=examples[0].answers, source="nq-open")
    path = tmp_path / "examples.jsonl"
    write_jsonl(path, examples[:10] + [empty] + examples[10:])
    out = tmp_path / "ds"
    assert main(["build", "--input", str(path), "--output", str(out), "--group-size", "4"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["records_read"] == 31 and meta["skipped"]["input"] == {"no-passages": 1}
    assert meta["skipped_examples"]["input:no-passages"] == ["nothing-here"]
    assert sum(meta["queries"].values()) == 30
    assert all("nothing-here" not in p.read_text() for p in out.rglob("*.jsonl"))
    # nothing but empty examples: an error, no dataset left behind
    only = tmp_path / "only-empty.jsonl"
    write_jsonl(only, [empty, QueryExample("also-empty", examples[1].query)])
    assert main(["build", "--input", str(only), "--output", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (f"error: {only}: no task records to write (2 records read, none gave "
                                       "evaluator/answer/extractor data; skipped: input: no-passages 2)\n")
    assert not (tmp_path / "none").exists()


def test_mine_reports_queries_without_positives_and_without_passages(tmp_path):
    from data_prep.mining import MiningConfig, run_mining
    from data_prep.readers import Source

    rows = [json.loads(x) for x in _nq_lines(40)]
    passages = {}
    for r in rows:
        c = r["ctxs"][0]
        passages.setdefault(c["text"], Passage(f"p{len(passages)}", c["text"], c["title"]))
    queries = [QueryExample(f"q{i}", r["question"], [passages[r["ctxs"][0]["text"]]], answers=r["answers"]) for i, r in enumerate(rows)]
    queries[3].positives = []  # judged nothing relevant: mined negatives only
    queries.append(QueryExample("unmatched", "xyzzy plugh qwzx"))  # no positive, and no term of the corpus
    src = Source("test", corpus=lambda: iter(passages.values()), queries=lambda: iter(queries))
    meta = run_mining(src, tmp_path / "m", MiningConfig(depth=10, window=(0, 10), negatives=3, show_progress=False))
    assert meta["counts"]["queries_no_positives"] == 2 and meta["counts"]["queries_no_passages"] == 1
    assert meta["examples"] == {"first_no_positives": ["q3", "unmatched"], "first_no_passages": ["unmatched"]}
    # and build, given the mined file, counts the empty one instead of passing it on
    bmeta = B.build(B.BuildConfig(str(tmp_path / "m" / "examples.jsonl"), str(tmp_path / "ds"), group_size=4))
    assert bmeta["skipped"]["input"] == {"no-passages": 1} and bmeta["skipped"]["evaluator"]["no-positives"] == 1
    assert bmeta["skipped_examples"]["input:no-passages"] == ["unmatched"]
