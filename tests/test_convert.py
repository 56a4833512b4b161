"""``python -m data_prep convert`` through ``data_prep.cli.main``."""

from __future__ import annotations

import json
import shutil

from readers_helpers import FIX, SAMPLE, rejects_index

from data_prep.cli import main
from data_prep.readers import open_source
from data_prep.readers.flagembedding import read_flagembedding
from data_prep.records import LabelledPair, QueryExample

SCIFACT = FIX / "beir" / "scifact"


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_beir_to_queries(tmp_path, capsys):
    out = tmp_path / "out" / "scifact.train.jsonl"
    rc = main(["convert", "--format", "beir", "--input", str(SCIFACT), "--split", "train", "--to", "queries", "--output", str(out)])
    assert rc == 0
    got = [QueryExample.from_dict(d) for d in _lines(out)]
    assert [q.to_dict() for q in got] == [q.to_dict() for q in open_source("beir", input=SCIFACT).queries()]
    meta = json.loads((tmp_path / "out" / "scifact.train.jsonl.meta.json").read_text())
    assert meta["written"] == 6 and meta["options"] == {"split": "train"} and meta["rejected"]["total"] == 0
    assert "wrote 6 queries records" in capsys.readouterr().out


def test_existing_output_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    out.write_text("keep me\n")
    args = ["convert", "--format", "nq-open", "--input", str(FIX / "nq" / "nq-open-oracle.head.jsonl"), "--to", "queries", "--output", str(out)]
    assert main(args) == 2
    assert f"error: output exists: {out} (pass --overwrite to replace it)" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"
    assert main(args + ["--overwrite"]) == 0
    assert len(_lines(out)) == 4


def test_skip_bad_writes_rejects_and_prints_counts(tmp_path, capsys):
    d = tmp_path / "scifact"
    shutil.copytree(SCIFACT, d)
    bad_corpus = b'{"_id": "4983", "title": "t", "text": "dup"}\n'
    bad_qrels = b"0\t123\t1\n"
    with open(d / "corpus.jsonl", "ab") as f:
        f.write(bad_corpus)
    with open(d / "qrels" / "train.tsv", "ab") as f:
        f.write(bad_qrels)
    out = tmp_path / "q.jsonl"
    base = ["convert", "--format", "beir", "--input", str(d), "--to", "queries", "--output", str(out)]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "corpus.jsonl:9: duplicate passage id '4983'" in err
    assert not out.exists()
    assert main(base + ["--skip-bad"]) == 0
    printed = capsys.readouterr().out
    assert "rejected 2 rows (duplicate-id: 1, unknown-passage: 1)" in printed
    rej = tmp_path / "q.jsonl.rejects"
    assert (rej / "corpus.jsonl.rejected").read_bytes() == bad_corpus
    assert (rej / "train.tsv.rejected").read_bytes() == bad_qrels
    assert {e["kind"] for e in rejects_index(rej)} == {"duplicate-id", "unknown-passage"}
    assert len(_lines(out)) == 6
    # a rerun starts a clean rejects folder instead of appending to the old one
    assert main(base + ["--skip-bad", "--overwrite"]) == 0
    assert len(rejects_index(rej)) == 2


def test_triples_to_flagembedding_with_mojibake_fixed(tmp_path):
    out = tmp_path / "fe.jsonl"
    rc = main(
        ["convert", "--format", "msmarco-triples", "--input", str(SAMPLE / "msmarco" / "triples.train.small.sample.tsv"),
         "--to", "flagembedding", "--output", str(out), "--fix-mojibake", "--prompt", "Given a web search query, retrieve relevant passages."]
    )  # fmt: skip
    assert rc == 0
    rows = _lines(out)
    assert len(rows) == 100 and rows[0]["pos"][0].startswith("We don\u2019t know")
    assert rows[0]["prompt"] == "Given a web search query, retrieve relevant passages." and len(rows[0]["neg"]) == 1
    assert len(list(read_flagembedding(out))) == 100


def test_popqa_to_pairs_with_rule(tmp_path):
    out = tmp_path / "pairs.jsonl"
    rc = main(["convert", "--format", "popqa", "--input", str(FIX / "crag" / "popqa.sample.jsonl"), "--rule", "answer", "--to", "pairs", "--output", str(out)])
    assert rc == 0
    pairs = [LabelledPair.from_dict(d) for d in _lines(out)]
    assert len(pairs) == 12 and {p.label_source for p in pairs} == {"answer-match"}
    assert sum(p.label for p in pairs) == 4


def test_options_a_format_does_not_take_are_errors(tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    rc = main(["convert", "--format", "beir", "--input", str(SCIFACT), "--rule", "answer", "--to", "pairs", "--output", str(out)])
    assert rc == 2 and "error: format 'beir' does not take --rule" in capsys.readouterr().err
    rc = main(["convert", "--format", "nq-open", "--input", str(FIX / "nq" / "nq-open-oracle.head.jsonl"), "--to", "queries", "--output", str(out), "--prompt", "x"])
    assert rc == 2 and "--prompt applies to --to flagembedding only" in capsys.readouterr().err
    assert not out.exists()


def test_missing_input_names_the_path(tmp_path, capsys):
    missing = tmp_path / "nope" / "train_popqa.txt"
    rc = main(["convert", "--format", "crag-evaluator", "--input", str(missing), "--to", "pairs", "--output", str(tmp_path / "o.jsonl")])
    assert rc == 2
    assert f"not found: {missing}" in capsys.readouterr().err
