"""SQuAD JSON (v1.1 cut from the real file, a constructed v2.0 layout of the same paragraphs, and
the full bundled v1.1 file)."""

from __future__ import annotations

import copy
import gzip
import json
import logging

import pytest
from readers_helpers import FIX, SAMPLE, rejects_index

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import open_source
from data_prep.readers.common import once, stable_id
from data_prep.readers.squad import read_squad
from data_prep.records import QueryExample

V11 = FIX / "squad" / "squad-v1.1.sample.json"
V20 = FIX / "squad" / "squad-v2.0.sample.json"
FULL = SAMPLE / "squad" / "squad-v1.1-train-articles.json.gz"
IMPOSSIBLE = {"5733bf84d058e614000b61be", "56be88473aeaaa14008c9083"}


def _raw(path=V11) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _questions(raw: dict):
    for a in raw["data"]:
        for k, p in enumerate(a["paragraphs"]):
            for q in p["qas"]:
                yield a, k, p, q


def _check_spans(examples):
    n = 0
    for ex in examples:
        for pos in ex.positives:
            assert pos.metadata["answer_spans"], ex.id
            for s, e in pos.metadata["answer_spans"]:
                assert pos.text[s:e] in ex.answers, (ex.id, s, e)
                n += 1
    return n


# ---------------------------------------------------------------- good files


def test_v11_sample_counts_records_and_spans():
    raw = _raw()
    src = open_source("squad", input=V11)
    corpus = list(src.corpus())
    queries = list(src.queries())
    assert len(corpus) == 6 and len(queries) == 59
    assert src.name == "squad" and src.files == [str(V11)]
    assert src.info == {
        "label_source": "human", "version": "1.1", "articles": 2, "paragraphs": 6, "passages": 6,
        "duplicate_paragraphs": 0, "questions": 59, "impossible": 0, "answers": 59, "empty_answers": 0,
    }  # fmt: skip
    want = [
        (a["title"], k, p["context"]) for a in raw["data"] for k, p in enumerate(a["paragraphs"])
    ]
    for passage, (title, k, context) in zip(corpus, want):
        assert passage.title == title.replace("_", " ") and passage.text == context  # exactly as given
        assert passage.id == stable_id(passage.title, context)
        assert passage.metadata == {"article": title, "paragraph_index": k}
    assert corpus[0].title == "University of Notre Dame" and corpus[3].title == "Beyoncé"
    by_id = {p.id: p for p in corpus}
    for ex, (a, k, p, q) in zip(queries, _questions(raw)):
        assert ex.id == q["id"] and ex.query == q["question"].strip()
        assert ex.answers == [q["answers"][0]["text"]] and ex.source == "squad"
        assert ex.negatives == [] and ex.metadata == {}
        (pos,) = ex.positives
        start = q["answers"][0]["answer_start"]
        assert pos.metadata["answer_spans"] == [[start, start + len(ex.answers[0])]]
        assert pos.text[start : start + len(ex.answers[0])] == ex.answers[0]
        assert pos.id == stable_id(a["title"].replace("_", " "), p["context"])
        base = by_id[pos.id]
        assert (pos.text, pos.title) == (base.text, base.title)
        assert {k_: v for k_, v in pos.metadata.items() if k_ != "answer_spans"} == base.metadata
    assert _check_spans(queries) == 59
    # questions are stripped: the fixture has one with a trailing space
    assert any(q["question"] != q["question"].strip() for *_, q in _questions(raw))


def test_v20_sample_impossible_questions():
    src = open_source("squad", input=V20)
    queries = {q.id: q for q in src.queries()}
    v11 = {q.id: q for q in open_source("squad", input=V11).queries()}
    corpus = {p.id: p for p in src.corpus()}
    assert list(queries) == list(v11) and len(queries) == 59
    assert corpus == {p.id: p for p in open_source("squad", input=V11).corpus()}
    assert src.info["version"] == "v2.0" and src.info["impossible"] == 2 and src.info["questions"] == 59
    assert src.info["answers"] == 57
    for qid, ex in queries.items():
        if qid in IMPOSSIBLE:
            assert ex.positives == [] and ex.answers == []
            (neg,) = ex.negatives
            assert neg == corpus[neg.id]  # the on-topic paragraph, without answer spans
            assert ex.metadata == {"is_impossible": True, "plausible_answers": v11[qid].answers}
        else:
            assert ex.to_dict() == v11[qid].to_dict()  # answerable: the same as the v1.1 reading
    assert queries["5733bf84d058e614000b61be"].metadata["plausible_answers"] == ["September 1876"]


def test_ids_stable_across_reads_and_gz(tmp_path):
    gz = tmp_path / "squad.json.gz"
    gz.write_bytes(gzip.compress(V11.read_bytes()))
    a = open_source("squad", input=V11)
    first = [q.to_dict() for q in a.queries()]
    assert [q.to_dict() for q in a.queries()] == first
    assert [q.to_dict() for q in open_source("squad", input=gz).queries()] == first
    assert [q.to_dict() for q in read_squad(V11)] == first
    assert [p.id for p in a.corpus()] == [p.id for p in open_source("squad", input=gz).corpus()]
    assert [q["id"] for q in first] == [q["id"] for *_, q in _questions(_raw())]


def test_multiple_answers_distinct_texts_and_spans(tmp_path):
    raw = _raw()
    q = raw["data"][0]["paragraphs"][0]["qas"][0]
    ctx = raw["data"][0]["paragraphs"][0]["context"]
    a = q["answers"][0]  # "Saint Bernadette Soubirous" at 515
    other = {"text": "Bernadette Soubirous", "answer_start": ctx.index("Bernadette Soubirous")}
    q["answers"] = [a, dict(a), other, {"text": "", "answer_start": 0}, {"text": " ", "answer_start": -1}]
    path = tmp_path / "multi.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    src = open_source("squad", input=path)
    ex = next(iter(src.queries()))
    assert ex.answers == ["Saint Bernadette Soubirous", "Bernadette Soubirous"]
    assert ex.positives[0].metadata["answer_spans"] == [[515, 541], [521, 541]]
    assert _check_spans([ex]) == 2


def test_empty_answers_are_ignored_counted_and_logged(tmp_path, caplog):
    raw = _raw()
    raw["data"][1]["paragraphs"][0]["qas"][2]["answers"].insert(0, {"text": "", "answer_start": 0})
    raw["data"][1]["paragraphs"][1]["qas"][0]["answers"].append({"text": "", "answer_start": 3})
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    src = open_source("squad", input=path)
    with caplog.at_level(logging.WARNING, logger="data_prep.readers.squad"):
        queries = list(src.queries())
        list(src.corpus())
    assert len(queries) == 59 and src.info["empty_answers"] == 2 and src.info["answers"] == 59
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{path}: ignored 2 empty answer text(s)"]  # once per Source, not per read
    assert [q.to_dict() for q in queries] == [q.to_dict() for q in open_source("squad", input=V11).queries()]


def test_version_field_optional_and_int_ids(tmp_path):
    raw = _raw()
    del raw["version"]
    raw["data"][0]["paragraphs"][0]["qas"][0]["id"] = 17
    path = tmp_path / "noversion.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    src = open_source("squad", input=path)
    assert next(iter(src.queries())).id == "17" and len(list(src.queries())) == 59
    assert src.info["version"] is None


def test_duplicate_paragraph_is_one_passage(tmp_path):
    raw = _raw()
    para = copy.deepcopy(raw["data"][0]["paragraphs"][1])
    for q in para["qas"]:
        q["id"] += "-again"
    raw["data"][0]["paragraphs"].append(para)
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    src = open_source("squad", input=path)
    corpus, queries = list(src.corpus()), list(src.queries())
    assert len(corpus) == 6 and len(queries) == 64
    assert src.info["paragraphs"] == 7 and src.info["passages"] == 6 and src.info["duplicate_paragraphs"] == 1
    again = [q for q in queries if q.id.endswith("-again")]
    assert {q.positives[0].id for q in again} == {corpus[1].id}
    assert again[0].positives[0].metadata["paragraph_index"] == 1  # the first occurrence


def test_full_bundled_file():
    src = open_source("squad", input=FULL)
    queries = list(src.queries())
    corpus = {p.id: p for p in src.corpus()}
    assert len(queries) == 11877 and len({q.id for q in queries}) == 11877
    info = src.info
    assert (info["articles"], info["paragraphs"], info["questions"]) == (44, 2430, 11877)
    # one paragraph of Human_Development_Index appears twice with the same text: one passage
    assert (info["passages"], info["duplicate_paragraphs"], len(corpus)) == (2429, 1, 2429)
    assert (info["answers"], info["empty_answers"], info["impossible"]) == (11877, 0, 0)
    assert _check_spans(queries) == 11877  # every span matches its answer text
    assert all(len(q.positives) == 1 and len(q.answers) == 1 and q.positives[0].id in corpus for q in queries)
    raw = json.loads(gzip.open(FULL).read())
    assert len({a["title"] for a in raw["data"]}) == len({p.metadata["article"] for p in corpus.values()}) == 44


# ---------------------------------------------------------------- bad units

QA = ("data", 1, "paragraphs", 1, "qas", 4)  # Beyoncé, paragraph 1: answer "2010" at 586


def _at(raw, loc):
    node = raw
    for part in loc:
        node = node[part]
    return node


def _fmt(loc):
    from data_prep.readers.squad import format_loc

    return format_loc(loc)


def _set(loc, key, value):
    return lambda raw: _at(raw, loc).__setitem__(key, value)


def _pop(loc, key):
    return lambda raw: _at(raw, loc).pop(key)


def _dup_id(raw):
    qas = _at(raw, QA[:-1])
    qas[4]["id"] = qas[1]["id"]


ANS = QA + ("answers", 0)
CASES = [
    # (edit, location of the message, skipped unit, reason, kind)
    (_pop(("data", 1), "title"), ("data", 1), ("data", 1), "missing field 'title'", "missing-field"),
    (_set(("data", 1), "title", " "), ("data", 1), ("data", 1), "empty title", "empty-title"),
    (_pop(("data", 0), "paragraphs"), ("data", 0), ("data", 0), "missing field 'paragraphs'", "missing-field"),
    (_set(("data", 0), "paragraphs", {}), ("data", 0, "paragraphs"), ("data", 0), "paragraphs must be a list, got object", "invalid-type"),
    (_pop(("data", 0, "paragraphs", 2), "context"), ("data", 0, "paragraphs", 2), ("data", 0, "paragraphs", 2), "missing field 'context'", "missing-field"),
    (_set(("data", 0, "paragraphs", 2), "context", " \n"), ("data", 0, "paragraphs", 2), ("data", 0, "paragraphs", 2), "empty context", "empty-context"),
    (_pop(("data", 0, "paragraphs", 2), "qas"), ("data", 0, "paragraphs", 2), ("data", 0, "paragraphs", 2), "missing field 'qas'", "missing-field"),
    (_pop(QA, "id"), QA, QA, "missing field 'id'", "missing-field"),
    (_set(QA, "id", ""), QA, QA, "empty id", "empty-id"),
    (_pop(QA, "question"), QA, QA, "missing field 'question'", "missing-field"),
    (_set(QA, "question", "  "), QA, QA, "empty question", "empty-question"),
    (_set(QA, "question", 7), QA + ("question",), QA, "question must be a string, got integer", "invalid-type"),
    (lambda raw: _at(raw, QA[:-1]).__setitem__(4, "what?"), QA, QA, "a question must be an object, got string", "invalid-type"),
    (lambda raw: _at(raw, ("data",)).__setitem__(1, None), ("data", 1), ("data", 1), "an article must be an object, got null", "invalid-type"),
    (_dup_id, QA, QA, "duplicate question id '56be86cf3aeaaa14008c9078' (first at data[1].paragraphs[1].qas[1])", "duplicate-id"),
    (_pop(QA, "answers"), QA, QA, "missing field 'answers'", "missing-field"),
    (_set(QA, "answers", []), QA, QA, "no answers (answers is empty) and is_impossible is not true", "no-answers"),
    (_set(QA, "answers", [{"text": "", "answer_start": 0}]), QA, QA,
     "no answers (all 1 answer(s) are empty) and is_impossible is not true", "no-answers"),
    (_set(ANS, "answer_start", "586"), ANS, QA, "answer_start must be an integer, got string '586'", "invalid-type"),
    (_set(ANS, "answer_start", 586.0), ANS, QA, "answer_start must be an integer, got number 586.0", "invalid-type"),
    (_pop(ANS, "answer_start"), ANS, QA, "missing field 'answer_start'", "missing-field"),
    (_set(ANS, "answer_start", 587), ANS, QA,
     "answer '2010' does not match the context at answer_start 587 (context[587:591] is '010,')", "answer-span"),
    (_set(ANS, "answer_start", 1013), ANS, QA, "answer '2010' at answer_start 1013 runs outside the context (1016 characters)", "answer-span"),
    (_set(ANS, "answer_start", -1), ANS, QA, "answer '2010' at answer_start -1 runs outside the context (1016 characters)", "answer-span"),
    (_set(QA, "is_impossible", "no"), QA + ("is_impossible",), QA, "is_impossible must be true or false, got string", "invalid-type"),
    (_set(QA, "is_impossible", True), QA, QA, "is_impossible is true but the question has 1 answer(s)", "invalid-answer"),
]  # fmt: skip


def _units(raw, unit):
    """(questions, passages) left when ``unit`` (of the unedited ``raw``) is skipped."""
    n_q = sum(1 for _ in _questions(raw))
    n_p = sum(len(a["paragraphs"]) for a in raw["data"])
    node = _at(raw, unit)
    if len(unit) == 2:  # an article
        return n_q - sum(len(p["qas"]) for p in node["paragraphs"]), n_p - len(node["paragraphs"])
    if len(unit) == 4:  # a paragraph
        return n_q - len(node["qas"]), n_p - 1
    return n_q - 1, n_p


@pytest.mark.parametrize("edit, loc, unit, reason, kind", CASES, ids=[c[4] + ":" + c[3][:40] for c in CASES])
def test_bad_units_strict_and_skipped(tmp_path, edit, loc, unit, reason, kind):
    raw = _raw()
    before = _units(raw, unit)
    edit(raw)
    path = tmp_path / "squad-bad.json"
    path.write_text(json.dumps(raw), encoding="utf-8")  # one line, like the official files
    message = f"{path}:1: {_fmt(loc)}: {reason}"
    with pytest.raises(DataError) as e:
        list(open_source("squad", input=path).queries())
    assert str(e.value) == message and e.value.kind == kind and e.value.line == 1
    n_q, n_p = before
    out = tmp_path / "rej"
    with Rejects(skip_bad=True, out_dir=out) as rj:
        src = open_source("squad", input=path, rejects=rj)
        assert len(list(src.queries())) == n_q
        assert len(list(src.corpus())) == n_p
        assert len(list(src.queries())) == n_q  # re-reading does not count it again
    assert rj.counts == {kind: 1}
    assert rejects_index(out) == [{"file": str(path), "line": 1, "kind": kind, "reason": f"{_fmt(loc)}: {reason}"}]
    kept = (out / "squad-bad.json.rejected").read_text(encoding="utf-8")
    assert kept == json.dumps(_at(raw, unit)) + "\n"  # the unit's JSON text, unchanged


def test_v2_impossible_question_empty_answers_ignored(tmp_path):
    raw = _raw(V20)
    qa = raw["data"][0]["paragraphs"][1]["qas"][0]
    qa["answers"] = [{"text": "", "answer_start": -1}]
    qa["plausible_answers"].append({"text": "", "answer_start": 0})
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    src = open_source("squad", input=path)
    ex = {q.id: q for q in src.queries()}[qa["id"]]
    assert ex.metadata == {"is_impossible": True, "plausible_answers": ["September 1876"]} and ex.answers == []
    assert src.info["empty_answers"] == 2


def test_bad_plausible_answer_in_v2(tmp_path):
    raw = _raw(V20)
    qa = raw["data"][1]["paragraphs"][2]["qas"][1]
    qa["plausible_answers"][0]["answer_start"] += 1
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(DataError, match=r"v2\.json:1: data\[1\]\.paragraphs\[2\]\.qas\[1\]\.plausible_answers\[0\]: "
                       r"answer 'influential' does not match the context at answer_start 936"):  # fmt: skip
        list(open_source("squad", input=path).queries())


def test_many_bad_questions_on_one_line_are_all_counted(tmp_path):
    """Every problem of a one-line file is on line 1: each is still counted and kept once."""
    raw = _raw()
    for j in range(3):
        raw["data"][1]["paragraphs"][0]["qas"][j]["question"] = ""
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    for wrap in (lambda r: r, once):
        out = tmp_path / f"rej{id(wrap)}"
        with Rejects(skip_bad=True, out_dir=out) as rj:
            src = open_source("squad", input=path, rejects=wrap(rj))
            assert len(list(src.queries())) == 56 and len(list(src.corpus())) == 6
            list(src.queries())
        assert rj.counts == {"empty-question": 3}
        assert [r["reason"] for r in rejects_index(out)] == [f"data[1].paragraphs[0].qas[{j}]: empty question" for j in range(3)]
        assert len((out / "squad.json.rejected").read_text(encoding="utf-8").splitlines()) == 3


def test_pretty_printed_file_reports_lines(tmp_path):
    raw = _raw()
    qa = raw["data"][1]["paragraphs"][1]["qas"][4]
    qa["question"] = ""
    art = raw["data"][0]["paragraphs"][1]
    art["context"] = ""
    text = json.dumps(raw, indent=2)
    path = tmp_path / "pretty.json"
    path.write_text(text, encoding="utf-8")
    lines = text.splitlines()

    def opening(marker, indent):
        i = next(n for n, line in enumerate(lines) if marker in line)
        while lines[i] != " " * indent + "{":
            i -= 1
        return i + 1

    q_line = opening(f'"id": "{qa["id"]}"', 12)
    p_line = opening('"context": ""', 8)
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(open_source("squad", input=path, rejects=rj).queries())) == 59 - 5 - 1
    got = [(r["line"], r["reason"]) for r in rejects_index(tmp_path / "rej")]
    assert got == [(p_line, "data[0].paragraphs[1]: empty context"), (q_line, "data[1].paragraphs[1].qas[4]: empty question")]
    # the rejects file holds the two units' text exactly as in the file (several lines each)
    kept = (tmp_path / "rej" / "pretty.json.rejected").read_text(encoding="utf-8")
    dec = json.JSONDecoder()
    para, end = dec.raw_decode(kept)
    assert para == art and kept[:end] in text and kept[:end].startswith("{\n" + " " * 10 + '"context": ""')
    question, end2 = dec.raw_decode(kept, end + 1)
    assert question == qa and kept[end + 1 : end2] in text and kept[end2:] == "\n"
    with pytest.raises(DataError) as e:
        list(open_source("squad", input=path).corpus())
    assert str(e.value) == f"{path}:{p_line}: data[0].paragraphs[1]: empty context"


# ---------------------------------------------------------------- bad files (always fatal)


def _truncated_gz(tmp_path):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(V11.read_bytes())[:-40])
    return p, ("truncated or corrupt gzip data before the end of the first line (Compressed file ended before the "
               "end-of-stream marker was reached); the rest of the file cannot be read")  # the shared corrupt-gzip error


def _corrupt_gz(tmp_path):
    b = bytearray(gzip.compress(V11.read_bytes()))
    b[100] ^= 0xFF
    p = tmp_path / "corrupt.json.gz"
    p.write_bytes(bytes(b))
    return p, ("truncated or corrupt gzip data before the end of the first line (Error -3 while decompressing data: "
               "invalid distance too far back); the rest of the file cannot be read")


def _plain_named_gz(tmp_path):
    p = tmp_path / "plain.json.gz"
    p.write_bytes(V11.read_bytes())
    return p, "not gzip data: the name ends in .gz but the file is not gzip-compressed (Not a gzipped file (b'{\"'))"


def _file(name, data, reason, line=1):
    def make(tmp_path):
        p = tmp_path / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        return p, reason, line

    return make


_TEXT = V11.read_text(encoding="utf-8")
BAD_FILES = [
    (_truncated_gz, 1),
    (_corrupt_gz, 1),
    (_plain_named_gz, None),
    (_file("cut.json", _TEXT[:-1], f"the JSON ends early: the file is truncated (Expecting ',' delimiter: line 1 column {len(_TEXT)})"), 1),
    (_file("cut2.json", _TEXT[:4000], "the JSON ends early: the file is truncated (Unterminated string starting at: line 1 column 3952)"), 1),
    (_file("notjson.json", "hello\n", "invalid JSON (Expecting value: line 1 column 1)"), 1),
    (_file("empty.json", "\n", "empty input file: no records (expected SQuAD JSON)"), None),
    (_file("list.json", "[1, 2]", "expected a JSON object with a 'data' list at the top, got array"), 1),
    (_file("nodata.json", '{"version": "1.1", "articles": []}', "no top-level 'data' list (not a SQuAD file? top-level keys: 'version', 'articles')"), None),
    (_file("dataobj.json", '{"data": {"title": "x"}}', "top-level 'data' must be a list of articles, got object"), None),
    (_file("latin1.json", b'{"data": [\n{"title": "Caf\xe9"}]}', "invalid UTF-8 byte 0xe9 (byte offset 25)"), 2),
]  # fmt: skip


@pytest.mark.parametrize("make, line", BAD_FILES, ids=[str(i) for i in range(len(BAD_FILES))])
def test_bad_files_raise_even_with_skip_bad(tmp_path, make, line):
    path, reason, *_ = make(tmp_path)
    where = f"{path}:{line}" if line is not None else str(path)
    for rejects in (None, Rejects(skip_bad=True, out_dir=tmp_path / "rej")):
        src = open_source("squad", input=path, rejects=rejects)
        for read in (src.queries, src.corpus):
            with pytest.raises(DataError) as e:
                list(read())
            assert str(e.value) == f"{where}: {reason}"


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(MissingInputError, match=r"SQuAD file not found: .*nope\.json"):
        open_source("squad", input=tmp_path / "nope.json")
    with pytest.raises(DataError, match="expected a file but found a folder"):
        open_source("squad", input=tmp_path)
    with pytest.raises(ValueError, match="does not take split"):
        open_source("squad", input=V11, split="train")


# ---------------------------------------------------------------- command line


def test_convert_cli_to_queries(tmp_path, capsys):
    from data_prep.cli import main

    out = tmp_path / "squad.queries.jsonl"
    rc = main(["convert", "--format", "squad", "--input", str(V20), "--to", "queries", "--output", str(out)])
    assert rc == 0 and "wrote 59 queries records" in capsys.readouterr().out
    got = [QueryExample.from_dict(json.loads(x)) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [q.to_dict() for q in got] == [q.to_dict() for q in open_source("squad", input=V20).queries()]
    meta = json.loads((tmp_path / "squad.queries.jsonl.meta.json").read_text())
    assert meta["format"] == "squad" and meta["written"] == 59 and meta["rejected"]["total"] == 0
    # with --skip-bad a bad question is kept unchanged in <output>.rejects/
    raw = _raw()
    raw["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw), encoding="utf-8")
    out2 = tmp_path / "bad.queries.jsonl"
    base = ["convert", "--format", "squad", "--input", str(bad), "--to", "queries", "--output", str(out2)]
    assert main(base) == 2
    assert f"error: {bad}:1: data[0].paragraphs[0].qas[1].answers[0]: answer " in capsys.readouterr().err
    assert main(base + ["--skip-bad"]) == 0
    assert "rejected 1 rows (answer-span: 1)" in capsys.readouterr().out
    assert len(out2.read_text(encoding="utf-8").splitlines()) == 58
    rej = (tmp_path / "bad.queries.jsonl.rejects" / "bad.json.rejected").read_text(encoding="utf-8")
    assert json.loads(rej) == raw["data"][0]["paragraphs"][0]["qas"][1]


def test_mine_cli_on_v11_sample(tmp_path):
    from data_prep.cli import main

    out = tmp_path / "mined"
    rc = main(["mine", "--format", "squad", "--input", str(V11), "--output", str(out), "--no-progress",
               "--negatives", "2", "--window", "0:10", "--depth", "10"])  # fmt: skip
    assert rc == 0
    meta = json.loads((out / "meta.json").read_text())
    ex = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert meta["counts"]["queries"] == len(ex) == 59 and meta["corpus_size"] == 6
    for e in ex:
        (pos,) = e["positives"]
        assert pos["metadata"]["answer_spans"] and e["source"] == "squad"
        assert all(n["id"] != pos["id"] for n in e["negatives"]) and len(e["negatives"]) <= 2
    assert sum(len(e["negatives"]) for e in ex) > 0
