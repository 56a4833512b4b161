"""CRAG's evaluator pair file and PopQA with retrieved contexts (both labelling rules)."""

from __future__ import annotations

import json

import pytest
from readers_helpers import FIX

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import open_pairs, open_source
from data_prep.readers.common import stable_id
from data_prep.readers.crag import read_evaluator_pairs, read_popqa, read_popqa_pairs, write_evaluator_pairs

EVAL = FIX / "crag" / "crag_evaluator.sample.txt"
POPQA = FIX / "crag" / "popqa.sample.jsonl"


def _popqa_rows():
    return [json.loads(x) for x in POPQA.read_text(encoding="utf-8").splitlines()]


def test_evaluator_file_reads_as_title_match_pairs():
    pairs = list(read_evaluator_pairs(EVAL))
    rows = _popqa_rows()
    assert len(pairs) == 12  # the file ends without a newline, as CRAG's script writes it
    assert [p.label for p in pairs[:4]] == [1.0, 0.0, 1.0, 0.0]
    assert all(p.label_source == "title-match" for p in pairs)
    assert pairs[0].query == rows[0]["question"]
    assert pairs[0].passage.text == rows[0]["ctxs"][0]["text"].strip()
    assert pairs[0].passage.id == stable_id("", pairs[0].passage.text)
    assert len({p.query_id for p in pairs}) == 3


def test_evaluator_source_groups_a_question_and_writer_round_trips(tmp_path):
    src = open_source("crag-evaluator", input=EVAL)
    ex = list(src.queries())
    assert [(len(e.positives), len(e.negatives)) for e in ex] == [(2, 2), (2, 2), (2, 2)]
    assert len(list(src.corpus())) == 10
    out = tmp_path / "train_popqa.txt"
    assert write_evaluator_pairs(out, read_evaluator_pairs(EVAL)) == 12
    assert out.read_text(encoding="utf-8") == EVAL.read_text(encoding="utf-8") + "\n"


@pytest.mark.parametrize(
    "line, message, kind",
    [
        ("who is he [SEP] a passage", r"wrong number of columns: expected 2 tab-separated \(question \[SEP\] passage, label\), got 1", "columns"),
        ("who is he [SEP] a\tpassage\t1", r"wrong number of columns: expected 2 tab-separated .* got 3", "columns"),
        ("who is he [SEP] a passage\t2", r"label '2' is not 0 or 1", "invalid-label"),
        ("who is he [SEP] a passage\t-1", r"label '-1' is not 0 or 1", "invalid-label"),
        ("who is he - a passage\t1", r"missing ' \[SEP\] ' between question and passage", "missing-sep"),
        ("who is he [SEP]  \t1", r"empty passage", "empty-passage"),
        ("who is he [SEP]\t1", r"empty passage", "empty-passage"),  # the official empty passage, stripped
        (" [SEP] a passage\t0", r"empty query", "empty-query"),
    ],
)
def test_evaluator_bad_lines(tmp_path, line, message, kind):
    lines = EVAL.read_text(encoding="utf-8").split("\n")
    lines.insert(2, line)
    path = tmp_path / "train_popqa.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError, match=r"train_popqa\.txt:3: " + message):
        list(read_evaluator_pairs(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(read_evaluator_pairs(path, rj))) == 12
    assert rj.counts == {kind: 1}
    assert (tmp_path / "rej" / "train_popqa.txt.rejected").read_text(encoding="utf-8") == line + "\n"


def test_evaluator_accepts_spaces_around_label_and_crlf(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"q one [SEP] passage [SEP] with sep\t 1 \r\nq two [SEP] other\t0\r\n")
    a, b = read_evaluator_pairs(path)
    assert (a.query, a.passage.text, a.label) == ("q one", "passage [SEP] with sep", 1.0)
    assert (b.query, b.label) == ("q two", 0.0)


# ---------------------------------------------------------------- PopQA


def test_popqa_title_match_reproduces_crags_labels():
    pairs = list(read_popqa_pairs(POPQA, rule="title-match"))
    official = list(read_evaluator_pairs(EVAL))  # written with CRAG's own labelling code
    assert [p.label for p in pairs] == [p.label for p in official]
    assert [p.passage.text.strip() for p in pairs] == [p.passage.text for p in official]
    assert all(p.label_source == "title-match" for p in pairs)
    assert [p.metadata["rank"] for p in pairs[:4]] == [0, 1, 2, 3]


def test_popqa_answer_rule_differs_where_it_should():
    title = {e.query: e for e in read_popqa(POPQA, rule="title-match")}
    answer = {e.query: e for e in read_popqa(POPQA, rule="answer")}
    dna = "where can you find dna in the body"
    # the second "DNA" passage has the right title but not the answer
    assert len(title[dna].positives) == 2 and len(answer[dna].positives) == 1
    assert "inside the cell nucleus" in answer[dna].positives[0].text
    beijing = "what was the city of beijing previously known as"
    assert len(answer[beijing].positives) == 2  # both Beijing passages say "Peking"
    assert all(e.metadata["label_source"] == "answer-match" for e in answer.values())


def test_popqa_answers_from_possible_answers_json_string():
    rows = _popqa_rows()
    assert isinstance(rows[1]["possible_answers"], str)
    ex = list(read_popqa(POPQA))
    assert ex[1].answers == json.loads(rows[1]["possible_answers"])
    assert [e.id for e in ex] == ["4222", "4223", "4224"]
    assert ex[0].metadata["s_wiki_title"] == "DNA"


def test_popqa_top_k_and_source_corpus():
    assert len(list(read_popqa_pairs(POPQA, top_k=2))) == 6
    assert len(list(read_popqa_pairs(POPQA, top_k=None))) == 12
    src = open_source("popqa", input=POPQA, rule="answer")
    ids = {p.id for p in src.corpus()}
    assert len(ids) == 10 and all(p.id in ids for e in src.queries() for p in e.positives + e.negatives)
    assert {p.label_source for p in open_pairs("popqa", input=POPQA, rule="answer")} == {"answer-match"}


@pytest.mark.parametrize(
    "edit, rule, message, kind",
    [
        (lambda r: r.pop("s_wiki_title"), "title-match", r"missing field 's_wiki_title' \(needed by rule 'title-match'\)", "missing-field"),
        (lambda r: r.pop("answers"), "answer", r"missing field 'answers' \(or 'possible_answers'\)", "missing-field"),
        (lambda r: r.pop("ctxs"), "title-match", r"missing field 'ctxs'", "missing-field"),
        (lambda r: r["ctxs"][1].update(text=""), "answer", r"ctxs\[1\]: empty passage", "empty-passage"),
        (lambda r: r.update(id=4222), "title-match", r"duplicate query id '4222'", "duplicate-id"),
    ],
)
def test_popqa_bad_rows(tmp_path, edit, rule, message, kind):
    rows = _popqa_rows()
    edit(rows[2])
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    path = tmp_path / "popqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"popqa\.jsonl:3: " + message):
        list(read_popqa(path, rule=rule))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(read_popqa_pairs(path, rule=rule, rejects=rj))) == 8
    assert rj.counts == {kind: 1}
    assert (tmp_path / "rej" / "popqa.jsonl.rejected").read_text(encoding="utf-8") == lines[2] + "\n"


def test_popqa_unknown_rule_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown labelling rule 'llm'"):
        open_source("popqa", input=POPQA, rule="llm")
    with pytest.raises(MissingInputError, match="popqa_longtail_w_gs.jsonl"):
        open_source("popqa", input=tmp_path / "popqa_longtail_w_gs.jsonl")
    with pytest.raises(MissingInputError, match="train_popqa.txt"):
        list(open_pairs("crag-evaluator", input=tmp_path / "train_popqa.txt"))
