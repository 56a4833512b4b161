"""The lexical feature of an export (inference.lexical): normalised BM25 added to the model's logit,
its weight fitted on dev, shipped in lexical.json and applied wherever the export scores."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

import inference
from data_prep.io import read_records
from data_prep.records import LabelledPair, QueryExample
from inference.inputs import passage_text
from inference.lexical import LEXICAL_FILE, LexicalError, LexicalFeature
from inference.manifest import ExportError
from training.config import EvaluatorConfig
from training.core import train_model
from training.fitting import fit_lexical_weight
from training_data import make_evaluator_data

CORPUS = ["The Eiffel tower is in Paris.", "Paris is the capital of France.", "Running shoes for runners.",
          "The tower of London stands by the Thames."]


def test_pair_is_bm25_over_the_querys_best_by_hand():
    f = LexicalFeature.from_corpus(CORPUS)
    assert f.documents == 4
    # stemmed, stopwords out: "eiffel tower paris" / "paris capit franc" / "run shoe runner" / "tower london stand thame"
    assert f.df["tower"] == 2 and f.df["pari"] == 2 and f.df["eiffel"] == 1
    assert f.avgdl == pytest.approx((3 + 3 + 3 + 4) / 4)
    idf = {t: math.log(1 + (4 - n + 0.5) / (n + 0.5)) for t, n in (("eiffel", 1), ("tower", 2), ("london", 1))}
    # query "Eiffel tower London?" against document 1 (3 tokens): eiffel and tower once each, london absent
    norm = 1.2 * (1 - 0.75 + 0.75 * 3 / f.avgdl)
    want = (idf["eiffel"] + idf["tower"]) / (1 + norm) / (idf["eiffel"] + idf["tower"] + idf["london"])
    assert f.pair("Eiffel tower London?", CORPUS[0]) == pytest.approx(want)
    # a rare term counts more than a common one; stemming matches word forms; no overlap, or no terms: 0
    assert f.pair("eiffel", CORPUS[0]) > 0 and f.pair("eiffel tower", "tower") < f.pair("eiffel tower", "eiffel")
    assert f.pair("runs", "He runs daily.") == f.pair("running", "He runs daily.") > 0
    assert f.pair("Berlin", CORPUS[0]) == 0.0 and f.pair("the of is", CORPUS[0]) == 0.0
    assert f.pair("unseen-word", "an unseen-word here") > 0  # unseen terms get the largest idf
    qs, ps = ["Eiffel tower", "capital of France", "Eiffel tower"], [CORPUS[0], CORPUS[1], CORPUS[3]]
    s = f.scores(qs, ps)  # a repeated query is tokenised once; the scores are pair()'s
    assert s.dtype == np.float64 and ((0 <= s) & (s < 1)).all() and s[0] > s[2] > 0
    np.testing.assert_array_equal(s, [f.pair(q, p) for q, p in zip(qs, ps)])
    with pytest.raises(ValueError, match="3 queries but 2 passages"):
        f.scores(qs, ps[:2])
    f.weight = 3.0
    np.testing.assert_allclose(f.logits(["Eiffel tower"], [CORPUS[0]]), 3.0 * f.pair("Eiffel tower", CORPUS[0]))
    with pytest.raises(LexicalError, match="corpus with words"):
        LexicalFeature.from_corpus(["", "  "])


def test_table_round_trip_and_bad_tables(tmp_path):
    f = LexicalFeature.from_corpus(CORPUS, weight=2.5)
    section = f.save(tmp_path)
    assert section["file"] == LEXICAL_FILE and section["weight"] == 2.5 and len(section["sha256"]) == 64
    g = LexicalFeature.load(tmp_path, section)
    assert g.df == f.df and g.weight == 2.5 and g.avgdl == f.avgdl and g.tokenizer == f.tokenizer
    assert g.pair("Eiffel tower", CORPUS[0]) == f.pair("Eiffel tower", CORPUS[0])
    path = tmp_path / LEXICAL_FILE
    path.write_text(path.read_text().replace('"pari":2', '"pari":3'))
    with pytest.raises(LexicalError, match=f"{LEXICAL_FILE}.*sha256"):
        LexicalFeature.load(tmp_path, section)
    path.write_text("{not json")
    with pytest.raises(LexicalError, match=f"{LEXICAL_FILE}: not a usable lexical table"):
        LexicalFeature.load(tmp_path, {**section, "sha256": None})
    path.write_text(json.dumps({"documents": 2, "avgdl": 3.0, "tokenizer": {}, "df": {"a": "two"}}))
    with pytest.raises(LexicalError, match="integer counts"):
        LexicalFeature.load(tmp_path, {**section, "sha256": None})
    path.unlink()
    with pytest.raises(LexicalError, match="cannot read"):
        LexicalFeature.load(tmp_path, section)


def test_weight_fit_follows_the_evidence():
    rng = np.random.default_rng(0)
    n = 2000
    y = (rng.random(n) < 0.3).astype(float)
    z = rng.normal(0, 1, n) + 1.5 * y  # the model's logit: informative
    lex = np.clip(rng.normal(0.3, 0.15, n) + 0.3 * y, 0, 1)  # the lexical score: informative too
    w, info = fit_lexical_weight(z, lex, y)
    assert w > 0 and info["dev_log_loss_with"] < info["dev_log_loss_without"]
    w, _ = fit_lexical_weight(z, np.clip(0.6 - 0.3 * y + rng.normal(0, 0.1, n), 0, 1), y)  # against relevance
    assert w == 0.0  # a lexical match never counts against a passage
    with pytest.raises(ValueError, match="both positive and negative"):
        fit_lexical_weight(z, lex, np.ones(n))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_evaluator_data(tmp_path_factory.mktemp("lex-data"))


@pytest.fixture(scope="module")
def lex_export(tiny_bert, data, tmp_path_factory):
    d = tmp_path_factory.mktemp("lex")
    cfg = EvaluatorConfig(model_name_or_path=str(tiny_bert), head="bi-encoder", train_file=str(data["train_groups"]),
                          dev_file=str(data["dev_pairs"]), output_dir=str(d / "run"), export_dir=str(d / "export"),
                          loss="group-ce", group_size=4, max_steps=2, eval_steps=0, save_steps=2, max_length=96,
                          max_query_length=24, per_device_train_batch_size=4, warmup_ratio=0.0, min_dev_pairs=20,
                          report_to="none", learning_rate=1e-3, lexical_feature=True)
    return train_model(cfg).export_dir


def test_export_adds_the_weighted_lexical_term(lex_export, data):
    man = json.loads((lex_export / "evaluator.json").read_text())
    lex = man["lexical"]
    assert man["score"] == "sigmoid(a * (logit + lexical.weight * lexical) + b)"
    assert lex["file"] == LEXICAL_FILE and (lex_export / LEXICAL_FILE).is_file() and lex["weight"] > 0
    fit = man["calibration"]["lexical_fit"]
    assert fit["corpus_passages"] == lex["documents"] and fit["dev_log_loss_with"] <= fit["dev_log_loss_without"] + 1e-9
    # the corpus: every distinct passage of the training groups and the dev pairs, as the model sees them
    texts = {passage_text(p.passage, man["input"]["passage_format"]) for p in read_records(data["dev_pairs"], LabelledPair)}
    for g in read_records(data["train_groups"], QueryExample):
        texts |= {passage_text(p, man["input"]["passage_format"]) for p in g.positives + g.negatives}
    assert lex["documents"] == len(texts)
    assert "lexical term" in (lex_export / "README.md").read_text()

    ev = inference.load(lex_export)
    assert ev.lexical is not None and ev.lexical.weight == lex["weight"]
    pairs = list(read_records(data["dev_pairs"], LabelledPair))[:16]
    qs, ps = [p.query for p in pairs], [passage_text(p.passage, ev.passage_format) for p in pairs]
    model_z = ev.engine.logits(qs, ps)[0]
    want = model_z + lex["weight"] * ev.lexical.scores(qs, ps)
    np.testing.assert_allclose(ev.logits([(p.query, p.passage) for p in pairs]), want, rtol=1e-6)
    np.testing.assert_allclose(ev.score([(p.query, p.passage) for p in pairs]), ev.calibrate(want), rtol=1e-6)
    g = ev.grade(pairs[0].query, [p.passage for p in pairs[:4]])
    np.testing.assert_allclose([c.score for c in g.chunks], ev.calibrate(want[:4]), rtol=1e-6)


def test_evaluate_cli_scores_with_the_lexical_term(lex_export, data, tmp_path):
    from inference.cli import main

    out = tmp_path / "eval.json"
    assert main(["evaluate", "--model", str(lex_export), "--data", str(data["dev_pairs"]), "--output-json", str(out),
                 "--no-progress"]) == 0
    report = json.loads(out.read_text())
    ev = inference.load(lex_export)
    pairs = list(read_records(data["dev_pairs"], LabelledPair))
    from inference.metrics import roc_auc

    want = roc_auc(ev.score([(p.query, p.passage) for p in pairs]), [p.label for p in pairs])
    assert report["auc"] == pytest.approx(want, abs=1e-9)


def test_export_without_its_table_does_not_load(lex_export, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(lex_export, broken)
    (broken / LEXICAL_FILE).unlink()
    with pytest.raises(ExportError, match=f"{LEXICAL_FILE}: cannot read the lexical table"):
        inference.load(broken)
    man = json.loads((broken / "evaluator.json").read_text())
    man["lexical"]["weight"] = "heavy"
    (broken / "evaluator.json").write_text(json.dumps(man))
    with pytest.raises(ExportError, match="'lexical.weight' must be int or float"):
        inference.load(broken)
