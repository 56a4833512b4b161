"""``data_prep.readers.rows.open_pair_rows``: any input as (query, passage, ids, label) rows, the
one opener of ``python -m inference score|evaluate`` and of data_prep's labelling; and CRAG's
official evaluator file as it is, empty passages included (``question [SEP] <TAB>0``), scored by
default and counted, or skipped with ``--skip-empty-passages``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from readers_helpers import FIX

from data_prep.io import DataError, MissingInputError, Rejects, read_records
from data_prep.readers import open_pairs, open_source
from data_prep.readers.common import stable_id, text_query_id
from data_prep.readers.crag import read_evaluator_lines, read_evaluator_pairs, read_popqa_pairs
from data_prep.readers.rows import EMPTY_PASSAGE_ID, PairRow, open_pair_rows, resolve_format
from data_prep.readers.simple import PairRow as SimplePairRow
from data_prep.readers.simple import detect_format
from data_prep.records import LabelledPair, Passage

EVAL = FIX / "crag" / "crag_evaluator.sample.txt"
POPQA = FIX / "crag" / "popqa.sample.jsonl"
#: lines (0-based) whose passage is emptied, and how: the official writer's ``q [SEP] <TAB>l``, or
#: the same line after a ``.strip()`` of its text, ``q [SEP]<TAB>l``
EMPTIED = {0: "stripped", 6: "official", 9: "official"}


def _lines() -> list[tuple[str, str, str]]:
    out = []
    for line in EVAL.read_text(encoding="utf-8").split("\n"):
        content, label = line.split("\t")
        q, p = content.split(" [SEP] ", 1)
        out.append((q, p, label))
    return out


def crag_with_empty_passages(path: Path) -> Path:
    """The bundled CRAG evaluator sample with the passages of ``EMPTIED`` removed, written as the
    official file writes an empty passage (``question + " [SEP] " + "" + "\\t" + label``) or as a
    stripped copy of it; no newline at the end, as CRAG's script writes it."""
    lines = []
    for i, (q, p, label) in enumerate(_lines()):
        form = EMPTIED.get(i)
        lines.append(f"{q} [SEP] {p}\t{label}" if form is None else
                     f"{q} [SEP] \t{label}" if form == "official" else f"{q} [SEP]\t{label}")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture
def crag_file(tmp_path) -> Path:
    return crag_with_empty_passages(tmp_path / "test_popqa.txt")


# --------------------------------------------------------------------------------------------
# the reader


def test_empty_passages_are_bad_rows_by_default(crag_file, tmp_path):
    """What training and dataset building see: a Passage needs text."""
    assert (crag_file.read_text().split("\n")[0].endswith(" [SEP]\t1")
            and crag_file.read_text().split("\n")[6].endswith(" [SEP] \t0"))
    with pytest.raises(DataError, match=r"test_popqa\.txt:1: empty passage") as e:
        list(read_evaluator_pairs(crag_file))
    assert e.value.kind == "empty-passage"
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(read_evaluator_pairs(crag_file, rj))) == 12 - len(EMPTIED)
    assert rj.counts == {"empty-passage": len(EMPTIED)}
    with pytest.raises(DataError, match="empty passage"):
        list(open_pairs("crag-evaluator", input=crag_file))
    with pytest.raises(DataError, match="empty passage"):
        list(open_source("crag-evaluator", input=crag_file).queries())


def test_evaluator_lines_keep_and_pairs_skip(crag_file):
    kept = list(read_evaluator_lines(crag_file, empty_passages="keep"))
    assert len(kept) == 12 and [ln.line for ln in kept] == list(range(1, 13))
    assert [i for i, ln in enumerate(kept) if ln.passage == ""] == sorted(EMPTIED)
    assert [ln.question for ln in kept] == [q for q, _, _ in _lines()]
    assert [ln.label for ln in kept] == [float(lab) for _, _, lab in _lines()]
    pairs = list(read_evaluator_pairs(crag_file, empty_passages="skip"))
    assert len(pairs) == 12 - len(EMPTIED) and all(p.passage.text for p in pairs)
    with pytest.raises(ValueError, match="a LabelledPair needs passage text"):
        list(read_evaluator_pairs(crag_file, empty_passages="keep"))
    with pytest.raises(ValueError, match="unknown empty-passage policy 'drop'"):
        list(read_evaluator_lines(crag_file, empty_passages="drop"))


def test_detect_format_reads_a_first_line_with_an_empty_passage(crag_file, tmp_path):
    assert detect_format(crag_file) == "crag-evaluator"  # its first line is "q [SEP]<TAB>1"
    official = tmp_path / "official.txt"
    official.write_text("who is he [SEP] \t0\nwho is he [SEP] a passage\t1\n", encoding="utf-8")
    assert detect_format(official) == "crag-evaluator"


# --------------------------------------------------------------------------------------------
# open_pair_rows


@pytest.mark.parametrize("policy", ["keep", "skip"])
def test_open_pair_rows_crag_policies(crag_file, policy):
    fmt, rows = open_pair_rows(crag_file, empty_passages=policy)
    assert fmt == "crag-evaluator" and rows.empty_passages == 0  # nothing read yet
    got = list(rows)
    assert rows.empty_passages == len(EMPTIED) and rows.policy == policy
    lines = _lines()
    if policy == "keep":
        assert len(got) == 12
        for i, r in enumerate(got):
            q, p, label = lines[i]
            assert (r.query, r.query_id, r.label) == (q, text_query_id(q), float(label))
            if i in EMPTIED:
                assert r.passage == "" and r.passage_id == EMPTY_PASSAGE_ID == stable_id("", "")
            else:
                assert r.passage == Passage(stable_id("", p), p) and r.passage_id == stable_id("", p)
    else:
        assert len(got) == 12 - len(EMPTIED) and all(r.passage != "" for r in got)
    # without empty passages: the rows read_evaluator_pairs gives
    full = [PairRow(p.query, p.passage, p.query_id, p.passage.id, p.label) for p in read_evaluator_pairs(EVAL)]
    assert list(open_pair_rows(EVAL, "crag-evaluator", empty_passages=policy)[1]) == full


def test_open_pair_rows_default_policy_is_error(crag_file):
    fmt, rows = open_pair_rows(crag_file)
    with pytest.raises(DataError, match=r"test_popqa\.txt:1: empty passage"):
        list(rows)


def test_empty_passages_in_other_formats_stay_bad_rows(tmp_path):
    simple = tmp_path / "simple.jsonl"
    simple.write_text(json.dumps({"query": "q", "passage": "a passage"}) + "\n"
                      + json.dumps({"query": "q", "passage": " "}) + "\n", encoding="utf-8")
    for policy in ("keep", "skip"):
        fmt, rows = open_pair_rows(simple, empty_passages=policy)
        assert fmt == "simple"
        with pytest.raises(DataError, match=r"simple\.jsonl:2: empty passage"):
            list(rows)
    with Rejects(skip_bad=True) as rj:
        _, rows = open_pair_rows(simple, rejects=rj, empty_passages="keep")
        assert [r.passage for r in rows] == ["a passage"] and rows.empty_passages == 0
    assert rj.counts == {"empty-passage": 1}


def test_open_pair_rows_reads_every_format_as_inference_did(tmp_path):
    from training_data import make_evaluator_data

    data = make_evaluator_data(tmp_path / "data", n_queries=4, n_dev=2)
    fmt, rows = open_pair_rows(data["dev_pairs"])
    pairs = list(read_records(data["dev_pairs"], LabelledPair))
    assert fmt == "pairs" and list(rows) == [PairRow(p.query, p.passage, p.query_id, p.passage.id, p.label) for p in pairs]
    fmt, rows = open_pair_rows(POPQA, "popqa", rule="answer", corpus=None, fix_mojibake=False)
    want = [PairRow(p.query, p.passage, p.query_id, p.passage.id, p.label) for p in read_popqa_pairs(POPQA, "answer")]
    assert fmt == "popqa" and list(rows) == want and len(want) == 12
    assert PairRow is SimplePairRow


def test_open_pair_rows_refusals(tmp_path):
    with pytest.raises(ValueError, match="format 'simple' does not take --rule"):
        open_pair_rows(EVAL, "simple", rule="answer")
    with pytest.raises(ValueError, match="format 'crag-evaluator' does not take --corpus, --split"):
        open_pair_rows(EVAL, corpus="c.jsonl", split="dev")
    with pytest.raises(ValueError, match=r"unknown format 'tsv'; known formats: auto, simple, .*crag-evaluator"):
        open_pair_rows(EVAL, "tsv")
    with pytest.raises(ValueError, match="unknown empty-passage policy 'drop'; choose one of error, keep, skip"):
        open_pair_rows(EVAL, empty_passages="drop")
    with pytest.raises(TypeError, match="unexpected options: top_k"):
        open_pair_rows(EVAL, top_k=3)
    sentences = tmp_path / "gold.jsonl"
    sentences.write_text(json.dumps({"query": "q", "passage": "A. B.", "gold_sentences": ["A."]}) + "\n")
    with pytest.raises(ValueError, match="format 'sentences' .* holds no"):
        open_pair_rows(sentences)
    with pytest.raises(MissingInputError, match="input file not found: .*nowhere.txt"):
        open_pair_rows(tmp_path / "nowhere.txt")
    assert resolve_format(EVAL) == "crag-evaluator" and resolve_format(EVAL, "popqa") == "popqa"


# --------------------------------------------------------------------------------------------
# python -m inference evaluate | score on the official file as it is


def _cli(*argv) -> int:
    from inference.cli import main

    return main([str(a) for a in argv] + ["--no-progress", "--device", "cpu"])


def _expected_scores(export: Path) -> tuple[list[float], list[float]]:
    """Every line's calibrated score and label, the empty passages as empty strings."""
    import inference

    model = inference.load(export, device="cpu")
    lines = list(read_evaluator_lines(crag_with_empty_passages(export.parent / "expected.txt"), empty_passages="keep"))
    scores = model.score_texts([ln.question for ln in lines], [ln.passage for ln in lines])[0].tolist()
    return scores, [ln.label for ln in lines]


def test_an_empty_passage_is_the_query_alone_in_the_pair_template(ce_export):
    from transformers import AutoTokenizer

    import inference
    from inference.inputs import PairEncoder

    model = inference.load(ce_export, device="cpu")
    tok = AutoTokenizer.from_pretrained(ce_export)
    q = _lines()[0][0]
    enc = PairEncoder(tok, model.spec).encode([q], [""])[0]["input_ids"][0]
    # the tokenizer's own pair encoding (a batch: a single call takes text_pair="" for no pair)
    assert enc == tok([q], [""])["input_ids"][0] and enc[-2:] == [tok.sep_token_id, tok.sep_token_id]
    with pytest.raises(ValueError, match="empty passage"):  # the model's own API still refuses one
        model.score([(q, "")])


def test_cli_evaluate_scores_every_line_or_skips_the_empty_ones(ce_export, crag_file, tmp_path, capsys):
    from inference.metrics import evaluate_scores

    import inference

    model = inference.load(ce_export, device="cpu")
    scores, labels = _expected_scores(ce_export)
    qids = [text_query_id(q) for q, _, _ in _lines()]
    out = tmp_path / "metrics.json"
    assert _cli("evaluate", "--model", ce_export, "--data", crag_file, "--output-json", out, "--chunk-size", 5) == 0
    m = json.loads(out.read_text())
    assert m["format"] == "crag-evaluator" and m["n"] == 12 and m["positives"] == 6
    assert m["empty_passages"] == {"n": len(EMPTIED), "policy": "scored"}
    want = evaluate_scores(scores, labels, model.theta_high, model.theta_low, qids)
    for k in ("accuracy", "auc", "f1", "ece", "mrr@10"):
        assert m[k] == pytest.approx(want[k], abs=1e-6), k
    assert f"empty passages: {len(EMPTIED)} scored" in capsys.readouterr().out

    skipped = tmp_path / "skipped.json"
    assert _cli("evaluate", "--model", ce_export, "--data", crag_file, "--output-json", skipped,
                "--skip-empty-passages") == 0
    s = json.loads(skipped.read_text())
    assert s["n"] == 12 - len(EMPTIED) and s["positives"] == 5
    assert s["empty_passages"] == {"n": len(EMPTIED), "policy": "skipped"}
    keep = [i for i in range(12) if i not in EMPTIED]
    want = evaluate_scores([scores[i] for i in keep], [labels[i] for i in keep], model.theta_high, model.theta_low,
                           [qids[i] for i in keep])
    assert s["accuracy"] == pytest.approx(want["accuracy"], abs=1e-6) and s["auc"] == pytest.approx(want["auc"], abs=1e-6)
    assert f"empty passages: {len(EMPTIED)} skipped" in capsys.readouterr().out


def test_cli_score_writes_empty_passage_rows_and_counts(ce_export, crag_file, tmp_path, capsys):
    scores, labels = _expected_scores(ce_export)
    out = tmp_path / "scores.jsonl"
    assert _cli("score", "--model", ce_export, "--input", crag_file, "--output", out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and [r["label"] for r in rows] == labels
    assert [i for i, r in enumerate(rows) if r["passage_id"] == EMPTY_PASSAGE_ID] == sorted(EMPTIED)
    np.testing.assert_allclose([r["score"] for r in rows], scores, atol=1e-6)
    meta = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())
    assert meta["empty_passages"] == {"n": len(EMPTIED), "policy": "scored"} and meta["pairs"] == 12
    assert f"empty passages: {len(EMPTIED)} scored" in capsys.readouterr().out

    assert _cli("score", "--model", ce_export, "--input", crag_file, "--output", out, "--overwrite",
                "--skip-empty-passages") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 - len(EMPTIED) and EMPTY_PASSAGE_ID not in {r["passage_id"] for r in rows}
    meta = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())
    assert meta["empty_passages"] == {"n": len(EMPTIED), "policy": "skipped"}

    # a file of empty passages only, skipped: nothing to score is an error, and it says why
    only = tmp_path / "only_empty.txt"
    only.write_text("who is he [SEP] \t0\nwho is she [SEP]\t1\n", encoding="utf-8")
    fresh = tmp_path / "fresh.jsonl"
    assert _cli("score", "--model", ce_export, "--input", only, "--output", fresh, "--skip-empty-passages") == 2
    assert "no rows to score (2 empty passages skipped)" in capsys.readouterr().err and not fresh.exists()
    assert _cli("evaluate", "--model", ce_export, "--data", only, "--output-json", tmp_path / "m.json",
                "--skip-empty-passages") == 2
    assert "no pairs to evaluate (2 empty passages skipped)" in capsys.readouterr().err


def test_cli_other_formats_report_no_empty_passages(ce_export, tmp_path):
    out = tmp_path / "scores.jsonl"
    assert _cli("score", "--model", ce_export, "--input", EVAL, "--output", out) == 0
    assert json.loads((tmp_path / "scores.jsonl.meta.json").read_text())["empty_passages"] == {"n": 0, "policy": "scored"}
