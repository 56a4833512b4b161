"""scripts/bench_models.py end to end on tiny exports and a slice of the bundled NQ-open sample: every
set scored with margins, 95% intervals and the summary; a baseline identical to the model gives a
margin of 0 that is not ``ahead``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import nq_rows, write_export

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_models", ROOT / "scripts" / "bench_models.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_models", mod)
    spec.loader.exec_module(mod)
    return mod


def test_margins_are_paired_and_seeded(bench):
    rng = np.random.default_rng(0)
    units = [f"q{i}" for i in range(40) for _ in range(6)]
    labels = np.tile(np.r_[1.0, np.zeros(5)], 40)
    base = rng.normal(0, 1, len(labels)) + 0.5 * labels
    m = bench.auc_margins(base + 2.0 * labels, {"better_than": base, "same": base + 2.0 * labels}, labels, units, 13, 300)
    assert m["metric"] == "auc" and m["resamples"] == 300
    assert m["better_than"]["ahead"] and m["better_than"]["ci95"][0] > 0
    assert m["same"] == {"margin": 0.0, "ci95": [0.0, 0.0], "ahead": False}
    assert bench.auc_margins(base, {"b": base + labels}, labels, units, 13, 300) == \
        bench.auc_margins(base, {"b": base + labels}, labels, units, 13, 300)


def test_bench_models_report(tmp_path, tiny_bert, bench, capsys):
    # constant exports (every score sigmoid(0.3)): the evaluator scores exactly as each model does
    ans = write_export(tiny_bert, tmp_path / "ans", "answer_classifier", 0.3)
    ext = write_export(tiny_bert, tmp_path / "ext", "extractor", 0.3)
    eva = write_export(tiny_bert, tmp_path / "eva", "evaluator", 0.3)
    nq = tmp_path / "nq.jsonl"
    nq.write_text("".join(json.dumps(r) + "\n" for r in nq_rows(80)), encoding="utf-8")
    work = tmp_path / "work"
    dataset = bench.nq_ood(work, nq)  # stands in for the recipe's dataset (its dev split)
    out = tmp_path / "models.json"
    assert bench.main(["--answer-model", str(ans), "--extractor-model", str(ext), "--evaluator-model", str(eva),
                       "--dataset", str(dataset), "--work", str(work), "--nq", str(nq),
                       "--scifact", str(ROOT / "tests" / "fixtures" / "beir" / "scifact"),
                       "--max-queries", "8", "--resamples", "100", "--json", str(out), "--record"]) == 0
    res = json.loads(out.read_text())
    assert list(res)[-1] == "summary"
    a, e = res["answer_classifier"], res["extractor"]
    for name in ("dev", "nq_ood", "nq_answerability", "msmarco_ood"):
        r = a[name]
        assert 0 < r["queries"] <= 8 and set(r["baselines"]) == {"evaluator", "bm25_pair", "minilm_cosine"}, name
        m = r["margins"]
        assert m["metric"] == "auc" and m["resamples"] == 100, name
        for b in ("evaluator", "bm25_pair", "minilm_cosine"):
            lo, hi = m[b]["ci95"]
            assert lo <= hi and m[b]["ahead"] == (lo > 0), name
        assert m["evaluator"] == {"margin": 0.0, "ci95": [0.0, 0.0], "ahead": False}, name
        assert r["model"]["auc"] == 0.5, name  # constant scores: ties count one half
    kinds = a["nq_answerability"]["by_negative_kind"]
    assert {"answer-removed", "answer-swapped"} <= set(kinds)
    for k in kinds.values():
        assert k["n"] > 0 and set(k["auc"]) == {"model", "evaluator", "bm25_pair", "minilm_cosine"}
        assert not k["margins"] or k["margins"]["evaluator"]["margin"] == 0.0
    about = a["nq_answerability"]["about"]
    # NQ-open's dev split only (the questions every recipe's NQ build holds out), as nq_ood's
    assert 0 < about["questions_with_hard_negatives"] <= about["questions"] < 30
    assert {p.query_id for p in bench.load_pairs(work / "answerability" / "pairs.jsonl", None)
            if not p.metadata.get("origin_query_id")} <= {p.query_id for p in bench.load_pairs(dataset / "answer" / "dev.pairs.jsonl", None)}
    ms = a["msmarco_ood"]["about"]["files"]
    assert [v["queries"] for v in ms.values()] == [100, 10] and a["msmarco_ood"]["positives"] == 8
    assert {p.metadata.get("negative_kind") for p in bench.load_pairs(work / "answerability" / "pairs.jsonl", None)} \
        >= {None, "answer-removed", "answer-swapped"}
    for name in ("dev", "nq_ood"):
        for metric in ("p@1", "r@3"):
            m = e[name]["margins"][metric]
            assert set(m) >= {"first_sentences", "bm25", "lexical_overlap", "minilm_cosine", "evaluator"}, name
            # ties rank sentences in passage order: the constant model is "first sentences" and the evaluator
            for b in ("evaluator", "first_sentences"):
                assert m[b] == {"margin": 0.0, "ci95": [0.0, 0.0], "ahead": False}, (name, metric, b)
    assert e["scifact_rationales"]["available"] is False and "rationale" in e["scifact_rationales"]["why"]
    s = res["summary"]
    assert len(s["rows"]) == 4 * 3 + 2 * 2 * 5
    assert all(set(r) == {"model", "set", "metric", "baseline", "margin", "ci95", "ahead"} for r in s["rows"])
    t = s["targets"]
    assert t["met"] is False and t["answer_classifier"]["sets"] == ["dev", "nq_ood", "nq_answerability", "msmarco_ood"]
    assert all("evaluator auc" in t["answer_classifier"]["failed"][name]
               for name in ("dev", "nq_ood", "nq_answerability", "msmarco_ood"))
    assert t["extractor"]["met"] == (not t["extractor"]["failed"]) and t["extractor"]["sets"] == ["dev", "nq_ood"]
    printed = capsys.readouterr().out
    assert "| model | set | metric | baseline | margin | 95% CI | ahead |" in printed
    assert "| answer_classifier | nq_answerability | auc | evaluator | +0.00 | [+0.00, +0.00] | no |" in printed
    assert "answer-swapped" in printed and "**answer_classifier** target" in printed

    # --record: each export's manifest and model card hold its figures, and the export still loads
    import inference

    for task, export, names in (("answer_classifier", ans, ["dev", "nq_ood", "nq_answerability", "msmarco_ood"]),
                                ("extractor", ext, ["dev", "nq_ood"])):
        held = inference.load(export, task=task).manifest.metrics["held_out"]
        assert list(held["sets"]) == names and "not met" in held["about"]
        card = (export / "README.md").read_text()
        assert "## Held-out figures" in card
    held = inference.load(ans, task="answer_classifier").manifest.metrics["held_out"]["sets"]["nq_answerability"]
    assert held["auc vs evaluator"] == "+0.0 [+0.0, +0.0]" and held["auc"] == 0.5
    assert "| nq_answerability | " in (ans / "README.md").read_text()
