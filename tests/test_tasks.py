"""The answer-existence classifier and the key-sentence extractor on the one model core: a recipe's
dataset is mined and built from the SQuAD fixture, a tiny BERT trains a few steps per task, the
export reloads with the scores it had in memory, ``inference.load`` returns the task's object, and
``python -m inference evaluate`` reports the task's metrics.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import inference
from data_prep.io import read_records
from data_prep.records import LabelledPair, Passage
from inference.answer import AnswerClassifier
from inference.cli import main as cli_main
from inference.extractor import Extractor
from inference.inputs import PairEncoder, pad_batch, passage_text
from inference.manifest import ExportError
from inference.modeling import relevance_logits
from training.config import AnswerClassifierConfig, ConfigError, ExtractorConfig, build_config
from training.core import train_model
from training.prepare import prepare_dataset

ROOT = Path(__file__).resolve().parents[1]
SQUAD = ROOT / "tests" / "fixtures" / "squad" / "squad-v1.1.sample.json"


def _prepare_data(dataset_dir: Path, mined_dir: Path) -> dict:
    return {"format": "squad", "input": str(SQUAD), "mined_dir": str(mined_dir),
            "mine": {"negatives": 2, "window": "3:6", "depth": 6, "answer_hits": 2, "seed": 13, "show_progress": False},
            "build": {"dev_ratio": 0.25, "seed": 13}}


@pytest.fixture(scope="module")
def squad_dataset(tmp_path_factory) -> Path:
    """Mined and built once, as a recipe's prepare_data does (functions, not a command line)."""
    d = tmp_path_factory.mktemp("squad-data")
    cfg = AnswerClassifierConfig(model_name_or_path="unused", dataset_dir=str(d / "built"),
                                 prepare_data=_prepare_data(d / "built", d / "mined"))
    prepare_dataset(cfg)
    return d / "built"


def _cfg(cls, model: Path, dataset: Path, out: Path, **kw):
    base = dict(model_name_or_path=str(model), dataset_dir=str(dataset), output_dir=str(out / "run"),
                export_dir=str(out / "export"), max_steps=16, eval_steps=8, save_steps=8, learning_rate=2e-3,
                max_length=128, max_query_length=24, logging_steps=4, per_device_train_batch_size=8, warmup_ratio=0.0,
                min_dev_pairs=20, report_to="none")
    base.update(kw)
    return cls(**base)


@pytest.fixture(scope="module")
def nq_dataset(tmp_path_factory) -> Path:
    """150 NQ-open questions of the bundled sample, mined with their top hits kept for the answer task
    (a tiny random model cannot learn SQuAD's on-topic hits in a few steps; it can learn these)."""
    from conftest import nq_rows

    d = tmp_path_factory.mktemp("nq-data")
    src = d / "nq.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in nq_rows(150)), encoding="utf-8")
    cfg = AnswerClassifierConfig(model_name_or_path="unused", dataset_dir=str(d / "built"), prepare_data={
        "format": "nq-open", "input": str(src), "mined_dir": str(d / "mined"),
        "mine": {"negatives": 3, "answer_hits": 3, "seed": 13, "show_progress": False},
        "build": {"dev_ratio": 0.2, "seed": 13, "tasks": ["answer"]}})
    prepare_dataset(cfg)
    return d / "built"


@pytest.fixture(scope="module")
def answer_run(tiny_bert, nq_dataset, tmp_path_factory):
    return train_model(_cfg(AnswerClassifierConfig, tiny_bert, nq_dataset, tmp_path_factory.mktemp("answer")))


@pytest.fixture(scope="module")
def extractor_run(tiny_bert, squad_dataset, tmp_path_factory):
    return train_model(_cfg(ExtractorConfig, tiny_bert, squad_dataset, tmp_path_factory.mktemp("extractor"),
                            max_length=64, metric_for_best_model="p@1"))


def _memory_logits(res, pairs: list[LabelledPair]) -> np.ndarray:
    from transformers import AutoTokenizer

    spec = res.manifest.spec
    tok = AutoTokenizer.from_pretrained(res.export_dir)
    enc, _ = PairEncoder(tok, spec).encode([p.query for p in pairs], [passage_text(p.passage, spec.passage_format) for p in pairs])
    batch = pad_batch([{k: v[i] for k, v in enc.items()} for i in range(len(pairs))], tok.pad_token_id)
    res.model.eval()
    with torch.no_grad():
        return relevance_logits(res.model, batch, spec.head).double().numpy()


def _assert_training_loss_fell(res, initial: Path, train_file: Path) -> None:
    """The mean BCE over the training pairs is lower after training than with the initial weights."""
    from inference.modeling import load_backbone

    pairs = list(read_records(train_file, LabelledPair))
    y = torch.tensor([p.label for p in pairs], dtype=torch.float64)
    after = torch.from_numpy(_memory_logits(res, pairs))
    before = torch.from_numpy(_memory_logits(type(res)(res.export_dir, {}, res.manifest, load_backbone(str(initial), "cross-encoder")), pairs))
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    assert bce(after, y) < bce(before, y) - 0.01, (float(bce(before, y)), float(bce(after, y)))


# --------------------------------------------------------------------------------------------
# data


def test_recipe_dataset_has_answer_hits_and_span_labelled_sentences(squad_dataset):
    meta = json.loads((squad_dataset / "meta.json").read_text())
    assert set(meta["parameters"]["tasks"]) == {"evaluator", "answer", "extractor"}
    answer = list(read_records(squad_dataset / "answer" / "train.pairs.jsonl", LabelledPair))
    roles = {p.metadata["role"] for p in answer}
    assert roles == {"positive", "hit", "negative"}
    # on-topic hits with and without the answer: what the evaluator's negatives cannot give
    hits = [p for p in answer if p.metadata["role"] == "hit"]
    assert {p.label for p in hits} == {0.0, 1.0}
    assert all(p.label == 1.0 and p.label_source == "human" for p in answer if p.metadata["role"] == "positive")
    # groups for group-ce: one answer-bearing passage first, then passages of the same question without it
    from data_prep.records import QueryExample

    groups = list(read_records(squad_dataset / "answer" / "train.groups.jsonl", QueryExample))
    labels = {(p.query_id, p.passage.id): p.label for p in answer}
    assert groups and all(len(g.positives) == 1 and len(g.negatives) == 7 for g in groups)
    for g in groups:
        qid = g.metadata["query_id"]
        assert labels[(qid, g.positives[0].id)] == 1.0
        assert all(labels[(qid, n.id)] == 0.0 for n in g.negatives)
    # the evaluator's negatives still exclude answer-bearing hits
    from data_prep.text import contains_answer

    mined = [json.loads(line) for line in (squad_dataset.parent / "mined" / "examples.jsonl").read_text().splitlines()]
    for ex in mined:
        assert not any(contains_answer(f"{n['title']} {n['text']}", ex["answers"]) for n in ex["negatives"])
    # extractor: the sentence holding the annotated span is the key sentence, offsets into the paragraph
    sents = list(read_records(squad_dataset / "extractor" / "train.pairs.jsonl", LabelledPair))
    by_q: dict[str, list[LabelledPair]] = {}
    for p in sents:
        by_q.setdefault(p.query_id, []).append(p)
    squad = {q["id"]: (q, para["context"]) for a in json.loads(SQUAD.read_text())["data"] for para in a["paragraphs"]
             for q in para["qas"]}
    for qid, ps in by_q.items():
        q, ctx = squad[qid]
        start = q["answers"][0]["answer_start"]
        for p in ps:
            m = p.passage.metadata
            assert ctx[m["start"]:m["end"]] == p.passage.text
            assert p.label == float(m["start"] <= start < m["end"] or m["start"] < start + len(q["answers"][0]["text"]) <= m["end"])
        assert sum(p.label for p in ps) >= 1 and all(p.label_source == "human" for p in ps)


# --------------------------------------------------------------------------------------------
# answer classifier


def test_answer_classifier_trains_exports_and_reloads(answer_run, nq_dataset, tiny_bert):
    res = answer_run
    man = json.loads((res.export_dir / "answer_classifier.json").read_text())
    assert man["task"] == "answer_classifier" and set(man["thresholds"]) >= {"threshold", "rule", "method"}
    assert man["thresholds"]["rule"] == "f1" and 0 <= man["thresholds"]["threshold"] <= 1
    assert "actions" not in man["metrics"]["dev"] and man["metrics"]["dev"]["threshold"] == man["thresholds"]["threshold"]
    assert not (res.export_dir / "evaluator.json").exists()
    card = (res.export_dir / "README.md").read_text()
    assert "Answer-existence classifier" in card and "holds the answer at probability >=" in card
    _assert_training_loss_fell(res, tiny_bert, nq_dataset / "answer" / "train.pairs.jsonl")

    model = inference.load(res.export_dir, task="answer_classifier", device="cpu")
    assert isinstance(model, AnswerClassifier)
    dev = list(read_records(nq_dataset / "answer" / "dev.pairs.jsonl", LabelledPair))[:16]
    # the export reproduces the scores of the trained model
    np.testing.assert_allclose(model.logits([(p.query, p.passage) for p in dev]), _memory_logits(res, dev), atol=1e-5)
    checks = model.has_answer(dev[0].query, [p.passage for p in dev[:5]])
    assert [c.index for c in checks] == list(range(5))
    assert all(c.has_answer == (c.score >= model.threshold) for c in checks)
    assert checks[0].passage_id == dev[0].passage.id
    np.testing.assert_allclose([c.score for c in checks], model.score([(dev[0].query, p.passage) for p in dev[:5]]))
    assert all(c.has_answer for c in model.has_answer(dev[0].query, [p.passage for p in dev[:3]], threshold=0.0))
    assert model.has_answer("q", []) == []
    with pytest.raises(TypeError, match="a list of passages"):
        model.has_answer("q", "one passage")
    with pytest.raises(ValueError, match="threshold must be a number in"):
        model.has_answer("q", ["p"], threshold=2)
    with pytest.raises(ExportError, match="this is an answer_classifier export"):
        inference.load(res.export_dir, task="evaluator")


def test_answer_classifier_cli(answer_run, nq_dataset, tmp_path, capsys):
    data = nq_dataset / "answer" / "dev.pairs.jsonl"
    out = tmp_path / "m.json"
    assert cli_main(["evaluate", "--model", str(answer_run.export_dir), "--data", str(data), "--output-json", str(out),
                     "--device", "cpu", "--no-progress"]) == 0
    m = json.loads(out.read_text())
    assert m["task"] == "answer_classifier" and "actions" not in m and m["decision_threshold"]["name"] == "threshold"
    for k in ("auc", "accuracy", "f1", "precision", "recall", "ece"):
        assert k in m
    model = inference.load(answer_run.export_dir, device="cpu")
    pairs = list(read_records(data, LabelledPair))
    from inference.metrics import evaluate_scores

    want = evaluate_scores(model.score([(p.query, p.passage) for p in pairs]), [p.label for p in pairs],
                           model.threshold, None, [p.query_id for p in pairs], actions=False)
    for k in ("n", "auc", "accuracy", "f1", "ece"):
        assert m[k] == pytest.approx(want[k], abs=1e-6), k
    # any pair format, the official CRAG evaluator file included
    crag = ROOT / "tests" / "fixtures" / "crag" / "crag_evaluator.sample.txt"
    assert cli_main(["evaluate", "--model", str(answer_run.export_dir), "--data", str(crag), "--output-json",
                     str(tmp_path / "crag.json"), "--no-progress"]) == 0
    mc = json.loads((tmp_path / "crag.json").read_text())
    assert mc["format"] == "crag-evaluator" and mc["task"] == "answer_classifier" and mc["n"] > 0
    scores = tmp_path / "s.jsonl"
    assert cli_main(["score", "--model", str(answer_run.export_dir), "--input", str(data), "--output", str(scores),
                     "--device", "cpu", "--no-progress", "--threshold", "0.5"]) == 0
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert all(r["has_answer"] == (r["score"] >= 0.5) for r in rows) and "action" not in rows[0]
    assert cli_main(["score", "--model", str(answer_run.export_dir), "--input", str(data), "--output",
                     str(tmp_path / "x.jsonl"), "--two-tier"]) == 2
    assert "one threshold" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# extractor


def test_extractor_trains_exports_and_reloads(extractor_run, squad_dataset, tiny_bert):
    res = extractor_run
    _assert_training_loss_fell(res, tiny_bert, squad_dataset / "extractor" / "train.pairs.jsonl")
    man = json.loads((res.export_dir / "extractor.json").read_text())
    assert man["task"] == "extractor" and man["thresholds"]["top_k"] == 3 and man["input"]["sentence_max_chars"] == 600
    dev = res.manifest.metrics["dev"]
    assert {"p@1", "r@3", "mrr", "auc"} <= set(dev)
    model = inference.load(res.export_dir, task="extractor", device="cpu")
    assert isinstance(model, Extractor)
    pairs = list(read_records(squad_dataset / "extractor" / "dev.pairs.jsonl", LabelledPair))[:20]
    np.testing.assert_allclose(model.logits([(p.query, p.passage) for p in pairs]), _memory_logits(res, pairs), atol=1e-5)

    parent = pairs[0].passage.metadata["parent_text"]
    title = pairs[0].passage.title
    got = model.extract(pairs[0].query, Passage("p", parent, title), top_k=2, min_score=0)
    assert len(got) == 2 and [k.index for k in got] == sorted(k.index for k in got), "passage order"
    for k in got:
        assert parent[k.start:k.end] == k.text
    # the scores are the model's scores of (query, sentence with the title), as in training
    sents = model.sentences(parent)
    want = model.score([(pairs[0].query, Passage(f"s{j}", s.text, title)) for j, s in enumerate(sents)])
    assert [k.score for k in got] == pytest.approx([want[k.index] for k in got], abs=1e-9)
    assert sorted(want, reverse=True)[:2] == pytest.approx(sorted((k.score for k in got), reverse=True))
    # min_score filters, top_k caps, the manifest's rule is the default
    assert model.extract(pairs[0].query, parent, min_score=1.0) == []
    assert len(model.extract(pairs[0].query, parent, top_k=1, min_score=0)) == 1
    assert len(model.extract(pairs[0].query, parent)) <= 3
    many = model.extract_many([(pairs[0].query, parent), ("another question", "One. Two sentences here.")], min_score=0)
    assert len(many) == 2 and [k.text for k in many[1]] == ["One.", "Two sentences here."]
    with pytest.raises(ValueError, match="empty passage"):
        model.extract("q", "   ")
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        model.extract("q", "A sentence.", top_k=0)


def test_extractor_splits_hard_passages(extractor_run):
    model = inference.load(extractor_run.export_dir, device="cpu")
    # no boundary at all: one sentence; an enormous one: cut into pieces of at most 600 characters
    assert [k.text for k in model.extract("q", "no full stop here at all", min_score=0)] == ["no full stop here at all"]
    huge = " ".join(["word"] * 1000)
    pieces = model.sentences(huge)
    assert len(pieces) > 1 and all(len(s.text) <= 600 and s.forced for s in pieces)
    assert len(model.extract("q", huge, top_k=10, min_score=0)) == len(pieces)
    # Chinese and English mixed: split at 。！ and at the English full stop
    mixed = "模型E-204的功率是5.5千瓦。It was released in 2019. 它很好！"
    assert [k.text for k in model.extract("E-204 的功率", mixed, top_k=5, min_score=0)] == [
        "模型E-204的功率是5.5千瓦。", "It was released in 2019.", "它很好！"]


def _sentence_rows(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "gold.jsonl"
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return p


def test_extractor_evaluate_reports_sentence_metrics(extractor_run, squad_dataset, tmp_path, capsys):
    model = inference.load(extractor_run.export_dir, device="cpu")
    passage = ("The Nobel Prize in Physics is awarded by the Royal Swedish Academy of Sciences. The first prize was "
               "awarded in 1901 to Wilhelm Conrad Röntgen. He discovered X-rays.")
    q = "who got the first nobel prize in physics"
    rows = [{"query": q, "passage": passage, "gold_sentences": ["The first prize was awarded in 1901 to Wilhelm Conrad Röntgen."]},
            {"query": q, "sentences": ["Röntgen got it.", "Paris is in France.", "It was 1901."], "gold": [0, 2]}]
    data = _sentence_rows(tmp_path, rows)
    out = tmp_path / "m.json"
    assert cli_main(["evaluate", "--model", str(extractor_run.export_dir), "--data", str(data), "--output-json", str(out),
                     "--no-progress"]) == 0
    m = json.loads(out.read_text())
    assert m["task"] == "extractor" and m["format"] == "sentences" and m["n"] == 2 and m["gold_sentences"] == 3
    # by hand: the first row's rank of its gold sentence; the second row's given sentences
    s1 = model.score([(q, s.text) for s in model.sentences(passage)])
    rank1 = sorted(range(3), key=lambda j: (-s1[j], j)).index(1) + 1
    s2 = model.score([(q, s) for s in rows[1]["sentences"]])
    order2 = sorted(range(3), key=lambda j: (-s2[j], j))
    rr2 = 1.0 / (min(order2.index(0), order2.index(2)) + 1)
    assert m["mrr"] == pytest.approx((1.0 / rank1 + rr2) / 2)
    assert m["p@1"] == pytest.approx(((rank1 == 1) + (order2[0] in (0, 2))) / 2)
    r3_row2 = len({0, 2} & set(order2[:3])) / 2
    assert m["r@3"] == pytest.approx((1.0 + r3_row2) / 2)
    # our extractor sentence pairs evaluate too (grouped by passage)
    out2 = tmp_path / "m2.json"
    assert cli_main(["evaluate", "--model", str(extractor_run.export_dir), "--data",
                     str(squad_dataset / "extractor" / "dev.pairs.jsonl"), "--output-json", str(out2), "--no-progress"]) == 0
    m2 = json.loads(out2.read_text())
    assert m2["format"] == "pairs" and m2["n"] > 5 and 0 <= m2["p@1"] <= 1
    # a gold sentence that is not in its passage: file and line
    bad = _sentence_rows(tmp_path, rows[:1] + [{"query": q, "passage": passage, "gold_sentences": ["Not in there."]}])
    assert cli_main(["evaluate", "--model", str(extractor_run.export_dir), "--data", str(bad), "--output-json",
                     str(tmp_path / "b.json"), "--no-progress"]) == 2
    assert "gold.jsonl:2: gold sentence 0 ('Not in there.') is not in the passage" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()
    # ... or a counted skip with the raw row kept
    assert cli_main(["evaluate", "--model", str(extractor_run.export_dir), "--data", str(bad), "--output-json",
                     str(tmp_path / "b.json"), "--no-progress", "--skip-bad"]) == 0
    mb = json.loads((tmp_path / "b.json").read_text())
    assert mb["n"] == 1 and mb["rejected"] == {"total": 1, "by_reason": {"gold-not-found": 1}}
    assert (tmp_path / "b.json.rejects" / "gold.jsonl.rejected").read_text().strip() == json.dumps(
        {"query": q, "passage": passage, "gold_sentences": ["Not in there."]}, ensure_ascii=False)
    # a pair file cannot evaluate an extractor as sentences unless it is our extractor pairs
    other = _sentence_rows(tmp_path, [{"query": q, "passage": passage, "label": 1}])
    assert cli_main(["evaluate", "--model", str(extractor_run.export_dir), "--data", str(other), "--output-json",
                     str(tmp_path / "c.json")]) == 2
    assert "an extractor is evaluated on gold key sentences" in capsys.readouterr().err


def test_extractor_cli_score_writes_key_sentences(extractor_run, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"query": "when was it awarded", "passage": "It was awarded in 1901. Nobody knows why."}) + "\n")
    out = tmp_path / "out.jsonl"
    assert cli_main(["score", "--model", str(extractor_run.export_dir), "--input", str(inp), "--output", str(out),
                     "--top-k", "1", "--min-score", "0", "--no-progress"]) == 0
    row = json.loads(out.read_text())
    assert len(row["sentences"]) == 1 and set(row["sentences"][0]) == {"index", "text", "start", "end", "score"}
    meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
    assert meta["task"] == "extractor" and meta["rule"] == {"top_k": 1, "min_score": 0.0} and meta["sentences_kept"] == 1


# --------------------------------------------------------------------------------------------
# configs and serving imports


def test_task_recipes_load_and_validate(tmp_path):
    for task, cls in (("answer_classifier", AnswerClassifierConfig), ("extractor", ExtractorConfig)):
        recipes = sorted((ROOT / "configs" / task).glob("*.yaml"))
        assert {r.name for r in recipes} >= {"quickstart-minilm.yaml", "t5-large.yaml", "deberta-v3.yaml"}
        for r in recipes:
            cfg = build_config(r, None, cls)
            assert cfg.TASK == task and cfg.export_dir and cfg.to_dict()["task"] == task
    with pytest.raises(ConfigError, match="config 'threshold_rule': 'auc' is not one of f1, precision, recall"):
        build_config(None, {"threshold_rule": "auc"}, AnswerClassifierConfig)
    with pytest.raises(ConfigError, match="threshold_rule precision needs a target"):
        build_config(None, {"threshold_rule": "precision"}, AnswerClassifierConfig)
    with pytest.raises(ConfigError, match="unknown config key 'theta_high'"):
        build_config(None, {"theta_high": 0.7}, AnswerClassifierConfig)
    with pytest.raises(ConfigError, match="config 'top_k': must be >= 1"):
        build_config(None, {"top_k": 0}, ExtractorConfig)
    with pytest.raises(ConfigError, match="config 'metric_for_best_model': 'ece' is not one of"):
        build_config(None, {"metric_for_best_model": "ece"}, ExtractorConfig)
    with pytest.raises(ConfigError, match="a extractor recipe; training/train_answer_classifier.py trains the answer_classifier"):
        (tmp_path / "r.yaml").write_text("task: extractor\n")
        build_config(tmp_path / "r.yaml", None, AnswerClassifierConfig)


SERVE = """
import sys, json
{block}
import inference
pairs = [("who wrote hamlet", "Hamlet is a tragedy written by William Shakespeare.")]
for path, task in json.loads(sys.argv[1]):
    m = inference.load(path, task=task, device="cpu")
    if task == "extractor":
        out = m.extract(*pairs[0], min_score=0)
    elif task == "answer_classifier":
        out = m.has_answer(pairs[0][0], [pairs[0][1]])
    else:
        out = m.grade(pairs[0][0], [pairs[0][1]])
    assert out
TRAINING_ONLY = ("training", "accelerate", "peft", "wandb", "datasets", "matplotlib", "tensorboard", "evaluate",
                 "bm25s", "faiss", "sklearn", "fastapi", "uvicorn", "prometheus_client", "langchain_core",
                 "llama_index", "langgraph", "integrations")
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set(TRAINING_ONLY))))
"""

#: a serve-only install, simulated: these packages cannot be found (as without the extras)
HIDE = """
import importlib.abc, sys
HIDDEN = {"training", "accelerate", "peft", "wandb", "datasets", "matplotlib", "tensorboard", "evaluate", "bm25s",
          "faiss", "sklearn", "numba", "jieba", "rank_bm25", "scipy", "fastapi", "uvicorn", "prometheus_client",
          "langchain_core", "llama_index", "langgraph"}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden: a serve-only install)")
        return None
sys.meta_path.insert(0, Hide())
import importlib.util
_find = importlib.util.find_spec
def find_spec(name, package=None):
    if name.split(".")[0] in HIDDEN:
        return None
    return _find(name, package)
importlib.util.find_spec = find_spec
"""


@pytest.mark.parametrize("serve_only", [False, True])
def test_serving_imports_no_training_code(answer_run, extractor_run, tmp_path, serve_only):
    """A fresh interpreter loads an export of each task and scores; nothing of training is imported.

    With everything installed, transformers itself imports accelerate when it is present (its
    ``modeling_utils`` does), so that one is checked in the serve-only run, where the training
    extras cannot be found at all (as after ``pip install crag-evaluators`` without extras)."""
    exports = [(str(answer_run.export_dir), "answer_classifier"), (str(extractor_run.export_dir), "extractor")]
    code = SERVE.format(block=HIDE if serve_only else "")
    r = subprocess.run([sys.executable, "-c", code, json.dumps(exports)], capture_output=True, text=True, cwd=ROOT,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    imported = json.loads(r.stdout.strip().splitlines()[-1])
    if serve_only:
        assert imported == []
    else:
        assert set(imported) <= {"accelerate"}, imported


# --------------------------------------------------------------------------------------------
# labelling: distillation and bad input


def test_distilled_sentence_labels_train_an_extractor(extractor_run, tiny_bert, squad_dataset, tmp_path):
    """Sentence labels from an export's calibrated scores (soft), then an extractor trained on them."""
    from training.distill import main as distill_main

    src = squad_dataset / "extractor" / "train.pairs.jsonl"
    out = tmp_path / "distilled" / "train.pairs.jsonl"
    assert distill_main(["--teacher", str(extractor_run.export_dir), "--input", str(src), "--output", str(out),
                         "--mix", "max"]) == 0
    teacher = inference.load(extractor_run.export_dir, device="cpu")
    orig = list(read_records(src, LabelledPair))
    got = list(read_records(out, LabelledPair))
    want = teacher.score([(p.query, p.passage) for p in orig])
    assert len(got) == len(orig) and all(g.label_source == "distilled" for g in got)
    for o, g, w in zip(orig, got, want):
        assert g.label == pytest.approx(1.0 if o.label >= 0.5 else w) and g.metadata["original_label"] == o.label
    assert got[0].metadata["teacher"]["files_sha256"] == teacher.manifest.model.files_sha256
    assert distill_main(["--teacher", str(extractor_run.export_dir), "--input", str(src), "--output", str(out)]) == 2
    res = train_model(_cfg(ExtractorConfig, tiny_bert, squad_dataset, tmp_path / "student", max_length=64,
                           train_file=str(out), dev_file=str(squad_dataset / "extractor" / "dev.pairs.jsonl"),
                           loss="soft-bce", max_steps=4, eval_steps=0, save_steps=4))
    assert (res.export_dir / "extractor.json").exists()


def test_empty_answers_are_ignored_and_counted():
    from data_prep.records import QueryExample
    from data_prep.tasks.answer import answer_pairs
    from data_prep.tasks.extractor import extractor_pairs

    pos = Passage("p", "The first prize went to Röntgen in 1901. Paris is in France.", "Nobel")
    neg = Passage("n", "Something else entirely.")
    ex = QueryExample("q", "who got the first prize", [pos], [neg], ["", "  ", "Röntgen"])
    pairs, skips = answer_pairs(ex)
    assert skips == {"empty-answers": 2} and [p.label for p in pairs] == [1.0, 0.0]
    sents, skips = extractor_pairs(ex)
    assert skips == {"empty-answers": 2} and [p.label for p in sents] == [1.0, 0.0]
    # only empty answers: a question with no answers is reported, never labelled negative
    none = QueryExample("q2", "who", [pos], [neg], [""])
    pairs, skips = answer_pairs(none)
    assert pairs == [] and skips == {"empty-answers": 1, "no-answers": 1}
    sents, skips = extractor_pairs(none)
    assert sents == [] and skips == {"empty-answers": 1, "no-answers-or-rationales": 1}


def test_bad_answer_spans_and_hits_are_reported_with_file_and_line(tmp_path):
    from data_prep.build import BuildConfig, build
    from data_prep.io import DataError

    good = {"id": "q1", "query": "who", "answers": ["Röntgen"],
            "positives": [{"id": "p", "text": "Röntgen won.", "metadata": {"answer_spans": [[0, 7]]}}]}
    bad_span = {**good, "id": "q2", "positives": [{"id": "p2", "text": "Short.", "metadata": {"answer_spans": [[3, 99]]}}]}
    bad_hits = {**good, "id": "q3", "metadata": {"answer_hits": [{"id": "h", "text": ""}]}}
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in (good, bad_span, bad_hits)), encoding="utf-8")
    with pytest.raises(DataError, match=r"in.jsonl:2: passage 'p2': metadata 'answer_spans' must be \[start, end\] "
                                        r"character offsets within the text \(6 characters\)"):
        build(BuildConfig(input=str(f), output=str(tmp_path / "out")))
    meta = build(BuildConfig(input=str(f), output=str(tmp_path / "out2"), skip_bad=True))
    assert meta["rejects"]["total"] == 2 and meta["records_read"] == 3
    assert (tmp_path / "out2" / "rejects" / "in.jsonl.rejected").read_text().splitlines()[1].startswith('{"id": "q3"')


def test_backbone_list_takes_the_first_that_exists(tiny_bert, tmp_path):
    from training.core import choose_backbone

    assert choose_backbone(str(tiny_bert)) == str(tiny_bert)
    assert choose_backbone([str(tmp_path / "no-export-yet"), str(tiny_bert)]) == str(tiny_bert)
    assert choose_backbone([str(tmp_path / "a"), "some-org/some-model"]) == "some-org/some-model"
    with pytest.raises(ConfigError, match="model_name_or_path"):
        build_config(None, {"model_name_or_path": []}, AnswerClassifierConfig)


def test_train_mix_sources_prepare_their_own_datasets(tmp_path):
    """A train_mix source with ``prepare`` is mined and built once, like prepare_data; a source
    without a dataset_dir cannot prepare."""
    from training.config import EvaluatorConfig

    src = {"name": "squad", "dataset_dir": str(tmp_path / "built"), "prepare": _prepare_data(tmp_path / "built", tmp_path / "mined")}
    cfg = EvaluatorConfig(model_name_or_path="unused", train_mix=[src])
    prepare_dataset(cfg)
    meta = tmp_path / "built" / "meta.json"
    assert meta.is_file() and (tmp_path / "built" / "evaluator" / "dev.pairs.jsonl").is_file()
    stamp = meta.stat().st_mtime_ns
    prepare_dataset(cfg)  # built already: nothing runs again
    assert meta.stat().st_mtime_ns == stamp
    with pytest.raises(ConfigError, match="prepare builds a dataset_dir"):
        EvaluatorConfig(model_name_or_path="unused", train_mix=[{"name": "x", "file": "f.jsonl", "dev_ratio": 0.1,
                                                                 "prepare": {"format": "squad", "mined_dir": "m"}}])
    with pytest.raises(ConfigError, match="prepare must be a mapping"):
        EvaluatorConfig(model_name_or_path="unused", train_mix=[{**src, "prepare": "yes"}])
