"""Corpus mode of a bi-encoder export (inference.corpus_norm): r(q) against a reference corpus, its
weights fitted on dev with their signs, its own calibration and thresholds, and plain scoring untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import inference
from data_prep.io import read_records
from data_prep.records import LabelledPair
from inference.corpus_norm import top_k_mean
from inference.inputs import passage_text
from inference.manifest import ExportError, Manifest
from training.config import ConfigError
from training.core import train_model
from training.fitting import fit_feature_weights
from test_biencoder import _config, data  # noqa: F401  (data: the module's fixture, shared)


def test_top_k_mean_is_the_mean_of_the_k_largest_inner_products():
    rng = np.random.default_rng(0)
    q, r = rng.normal(size=(300, 8)).astype(np.float32), rng.normal(size=(50, 8)).astype(np.float32)
    s = q.astype(np.float64) @ r.T.astype(np.float64)
    for k in (1, 10, 50, 80):  # k above the corpus size: every passage
        want = np.sort(s, axis=1)[:, ::-1][:, : min(k, 50)].mean(axis=1)
        np.testing.assert_allclose(top_k_mean(q, r, k), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="empty"):
        top_k_mean(q, r[:0], 10)
    with pytest.raises(ValueError, match="do not match"):
        top_k_mean(q, r[:, :4], 10)
    with pytest.raises(ValueError, match="k must be positive"):
        top_k_mean(q, r, 0)


def test_feature_weights_keep_their_signs():
    rng = np.random.default_rng(1)
    n = 3000
    y = (rng.random(n) < 0.3).astype(float)
    z = rng.normal(0, 1, n) + 1.5 * y
    offset = rng.normal(0.5, 0.1, n)  # a query's level: it raises z for positives and negatives alike
    z = z + 4.0 * offset
    lex = np.clip(rng.normal(0.3, 0.15, n) + 0.3 * y, 0, 1)
    w, info = fit_feature_weights(z, {"offset": (offset, -1), "lexical": (lex, 1)}, y)
    assert w["offset"] < -2.0 and w["lexical"] > 0 and info["dev_log_loss_with"] < info["dev_log_loss_without"]
    w, _ = fit_feature_weights(z, {"offset": (offset, 1)}, y)  # the same feature, with the sign it may not take
    assert w["offset"] == 0.0
    with pytest.raises(ValueError, match="both positive and negative"):
        fit_feature_weights(z, {"lexical": (lex, 1)}, np.zeros(n))


@pytest.fixture(scope="module")
def cn_export(tiny_bert, data, tmp_path_factory):
    d = tmp_path_factory.mktemp("cn")
    return train_model(_config(tiny_bert, data, d, max_steps=0, lexical_feature=True, corpus_norm=True,
                               corpus_norm_k=5)).export_dir


def _plain_vectors(folder, texts, limit):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    out = []
    with torch.no_grad():
        for t in texts:
            h = model(**tok(t, truncation=True, max_length=limit, return_tensors="pt")).last_hidden_state[0]
            out.append(torch.nn.functional.normalize(h.mean(0), dim=-1).numpy())
    return np.stack(out)


def test_corpus_mode_scores_against_the_reference(cn_export, data):
    ev = inference.load(cn_export)
    man = json.loads((cn_export / "evaluator.json").read_text())
    cn = man["corpus_norm"]
    assert cn["k"] == 5 and cn["weight"] >= 0 and cn["lexical_weight"] >= 0 and "r(q)" in cn["formula"]
    assert cn["fit"]["reference_passages"] > 0 and "dev_corpus_mode" in man["metrics"]
    # half the dev queries lose their positives (a retrieval miss): the fit sees queries with nothing to find
    dev = list(read_records(data["dev_pairs"], LabelledPair))
    fit = cn["fit"]
    assert fit["withheld_share"] == 0.5 and 0 < fit["queries_withheld"] < len({p.query_id for p in dev})
    assert 0 < fit["positives_withheld"] and fit["fit_pairs"] == len(dev) - fit["positives_withheld"]
    assert man["metrics"]["dev_corpus_mode"]["n"] == fit["fit_pairs"]
    assert "## Corpus mode" in (cn_export / "README.md").read_text()
    pairs = list(read_records(data["dev_pairs"], LabelledPair))[:24]
    qp = [(p.query, p.passage) for p in pairs]
    plain = ev.logits(qp)
    assert not ev.corpus_mode and ev.calibration == ev.manifest.calibration and ev.decision == ev.manifest.thresholds
    corpus = list(dict.fromkeys(passage_text(p.passage) for p in read_records(data["dev_pairs"], LabelledPair)))
    ev.use_corpus(corpus)
    assert ev.corpus_mode and ev.calibration == ev.manifest.corpus_norm.calibration
    assert ev.theta_high == cn["thresholds"]["theta_high"]
    # by hand: the plain cosine logit, the lexical term at corpus mode's weight, r(q) over the corpus
    queries, texts = [q for q, _ in qp], [passage_text(p) for _, p in qp]
    qv, rv = _plain_vectors(cn_export, queries, 24 + 2), _plain_vectors(cn_export, corpus, 96)
    r = np.sort(qv @ rv.T, axis=1)[:, ::-1][:, :5].mean(axis=1)
    z_model = plain - ev.lexical.logits(queries, texts)
    want = z_model + cn["lexical_weight"] * ev.lexical.scores(queries, texts) - cn["weight"] * r
    np.testing.assert_allclose(ev.logits(qp), want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ev.score(qp), ev.manifest.corpus_norm.calibration.apply(ev.logits(qp)), atol=1e-9)
    g = ev.grade(pairs[0].query, [p.passage for p in pairs[:4]])
    assert g.theta_high == cn["thresholds"]["theta_high"] and g.theta_low == cn["thresholds"]["theta_low"]
    # a corpus encoded a block at a time gives the same scores
    import inference.scorer as scorer_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scorer_module, "_REFERENCE_BLOCK", 7)
        ev.engine._cache.clear()
        ev.use_corpus(corpus)
        np.testing.assert_allclose(ev.reference, rv, atol=1e-4)
        np.testing.assert_allclose(ev.logits(qp), want, rtol=1e-4, atol=1e-3)
    # vectors handed over (a pipeline's index) give the same scores; None returns to plain scoring
    ev.use_corpus(vectors=rv)
    np.testing.assert_allclose(ev.logits(qp), want, rtol=1e-4, atol=1e-3)
    ev.use_corpus(None)
    np.testing.assert_allclose(ev.logits(qp), plain, atol=1e-9)
    with pytest.raises(ValueError, match="passage vectors"):
        ev.use_corpus(vectors=rv[:, :3])
    with pytest.raises(ValueError, match="empty passage"):
        ev.use_corpus(["a passage", "  "])
    with pytest.raises(ValueError, match="one of passages, vectors or reference"):
        ev.use_corpus(corpus, vectors=rv)


def test_the_cli_scores_in_corpus_mode_against_self_or_a_file(cn_export, data, tmp_path, capsys):
    """`--reference self` reads each query against the input's own passages, a file against its passages
    (ours or BEIR's corpus.jsonl); the mode's calibration and thresholds apply; default pair by pair."""
    from inference.cli import main
    from inference.metrics import roc_auc

    dev = list(read_records(data["dev_pairs"], LabelledPair))
    qp = [(p.query, p.passage) for p in dev]
    labels = [p.label for p in dev]
    corpus = list(dict.fromkeys(passage_text(p.passage) for p in dev))
    ev = inference.load(cn_export)
    plain = ev.score(qp)
    ev.use_corpus(corpus)
    want = ev.score(qp)
    cn = ev.manifest.corpus_norm

    def run(*extra, out="m.json"):
        rc = main(["evaluate", "--model", str(cn_export), "--data", str(data["dev_pairs"]), "--output-json",
                   str(tmp_path / out), "--overwrite", "--no-progress", *extra])
        return rc, (json.loads((tmp_path / out).read_text()) if rc == 0 else None)

    rc, m = run()
    assert rc == 0 and m["corpus_mode"] is None and m["auc"] == pytest.approx(roc_auc(np.array(plain), labels))
    assert m["thresholds"]["theta_high"] == ev.manifest.thresholds.theta_high
    rc, m = run("--reference", "self")
    assert rc == 0 and m["corpus_mode"]["reference"] == "self" and m["corpus_mode"]["passages"] == len(corpus)
    assert m["corpus_mode"]["k"] == cn.k and m["thresholds"]["theta_high"] == cn.thresholds.theta_high
    assert m["auc"] == pytest.approx(roc_auc(np.array(want), labels), abs=1e-6)
    assert "corpus mode against" in capsys.readouterr().out
    # a passages file: ours, then BEIR's corpus.jsonl; the same passages give the same scores
    ours, beir = tmp_path / "passages.jsonl", tmp_path / "corpus.jsonl"
    seen = dict.fromkeys(passage_text(p.passage) for p in dev)
    ours.write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(seen)))
    beir.write_text("".join(json.dumps({"_id": f"p{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(seen)))
    for f in (ours, beir):
        rc, m = run("--reference", str(f))
        assert rc == 0 and m["corpus_mode"]["reference"] == str(f) and m["corpus_mode"]["passages"] == len(seen)
        assert m["auc"] == pytest.approx(roc_auc(np.array(want), labels), abs=1e-6)
    # score writes the mode's scores and says so in its meta
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(cn_export), "--input", str(data["dev_pairs"]), "--output", str(out),
                 "--reference", "self", "--no-progress"]) == 0
    got = [json.loads(line)["score"] for line in out.read_text().splitlines()]
    np.testing.assert_allclose(got, want, atol=1e-6)
    meta = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())
    assert meta["corpus_mode"]["reference"] == "self" and meta["thresholds"]["theta_high"] == cn.thresholds.theta_high
    # bad references: a line with no text names the file and line; an empty file; a missing one
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "text": "fine"}) + "\n" + json.dumps({"id": "b"}) + "\n")
    capsys.readouterr()
    assert run("--reference", str(bad))[0] == 2
    assert f"{bad}:2" in capsys.readouterr().err
    rc, m = run("--reference", str(bad), "--skip-bad")  # skipped, counted, the raw row kept
    assert rc == 0 and m["corpus_mode"]["passages"] == 1 and m["corpus_mode"]["rejected"]["total"] == 1
    kept = Path(m["corpus_mode"]["rejected"]["kept_in"])
    assert (kept / "bad.jsonl.rejected").read_text() == json.dumps({"id": "b"}) + "\n"
    assert "1 bad rows skipped" in capsys.readouterr().out
    (tmp_path / "empty.jsonl").write_text("")
    assert run("--reference", str(tmp_path / "empty.jsonl"))[0] == 2
    assert "empty input file" in capsys.readouterr().err
    assert run("--reference", str(tmp_path / "missing.jsonl"))[0] == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_corpus_mode_needs_the_section_and_the_bi_encoder(cn_export, tiny_bert, data, tmp_path):
    man = json.loads((cn_export / "evaluator.json").read_text())
    plain = dict(man)
    plain.pop("corpus_norm")
    p = tmp_path / "evaluator.json"
    p.write_text(json.dumps(plain))
    assert Manifest.read(p).corpus_norm is None
    for change, msg in ((lambda d: d["corpus_norm"].update(weight=-1.0), "weight must be a finite number >= 0"),
                        (lambda d: d["corpus_norm"].update(k=0), "k must be a positive integer"),
                        (lambda d: d["corpus_norm"].pop("thresholds"), "missing 'thresholds'"),
                        (lambda d: d["model"].update(head="cross-encoder"), "needs the bi-encoder head")):
        bad = json.loads(json.dumps(man))
        change(bad)
        p.write_text(json.dumps(bad))
        with pytest.raises(ExportError, match=msg):
            Manifest.read(p)
    with pytest.raises(ConfigError, match="corpus_norm"):
        _config(tiny_bert, data, tmp_path, head="cross-encoder", corpus_norm=True)
    with pytest.raises(ConfigError, match="an evaluator with the bi-encoder head"):  # "auto" resolved: before training
        train_model(_config(tiny_bert, data, tmp_path / "auto", head="auto", corpus_norm=True))
    assert not (tmp_path / "auto" / "run").exists()
    with pytest.raises(ConfigError, match="corpus_norm_k"):
        _config(tiny_bert, data, tmp_path, corpus_norm_k=0)
    with pytest.raises(ConfigError, match="corpus_norm_withheld"):
        _config(tiny_bert, data, tmp_path, corpus_norm_withheld=1.0)
    # an export without the section scores pairs only
    res = train_model(_config(tiny_bert, data, tmp_path / "plain", max_steps=0))
    ev = inference.load(res.export_dir)
    with pytest.raises(ValueError, match="no corpus_norm section"):
        ev.use_corpus(["a passage"])
    from inference.cli import main

    assert main(["evaluate", "--model", str(res.export_dir), "--data", str(data["dev_pairs"]), "--output-json",
                 str(tmp_path / "m.json"), "--reference", "self", "--no-progress"]) == 2
    assert not (tmp_path / "m.json").exists()


def test_the_pipeline_grades_against_its_index(tiny_bert, data, tmp_path, capsys):
    """Index chunks are graded in corpus mode with the index's vectors as the corpus, and only while grading."""
    from pipeline import CragPipeline
    from pipeline.core import PipelineConfig
    from pipeline.grading import GradingConfig
    from pipeline.index import build_index
    from test_biencoder import _chunks

    export = train_model(_config(tiny_bert, data, tmp_path / "cn", max_steps=0, loss="bce", corpus_norm=True,
                                 train_file=str(data["train_pairs"]), passage_format="{title}\n{text}")).export_dir
    dev_pairs = list(read_records(data["dev_pairs"], LabelledPair))
    index = build_index(_chunks(dev_pairs), tmp_path / "index", dense_model=str(export))
    ev = inference.load(export)
    assert "off (the default)" in CragPipeline(index, ev).corpus_grading
    on = PipelineConfig(grading=GradingConfig(corpus_mode=True))
    pipe = CragPipeline(index, ev, config=on)
    assert pipe.corpus_grading is None
    q = dev_pairs[0].query
    res = pipe.ask(q)
    assert not ev.corpus_mode  # only while grading
    fresh = inference.load(export)
    fresh.use_corpus(vectors=np.asarray(index.dense))
    pairs = [(q, g.chunk.to_passage()) for g in res.graded]
    np.testing.assert_allclose([g.score for g in res.graded], fresh.score(pairs), atol=1e-5)
    # r(q) came from the dense route's search (no second pass over the index); a question the route
    # did not search is searched once, with the same result
    ref = pipe.index_reference
    assert ref.from_recall == 1 and ref.searched == 0
    from pipeline.grading import IndexReference

    other = dev_pairs[-1].query
    own = IndexReference(index)
    vec = fresh.engine.vectors([other], "query")[0]
    k = ev.manifest.corpus_norm.k
    np.testing.assert_allclose(own.top_k_mean([other], vec, k), fresh.query_offsets([other]), atol=1e-5)
    assert own.searched == 1 and own.from_recall == 0
    ev.use_corpus(reference=own)
    np.testing.assert_allclose(ev.score([(other, dev_pairs[-1].passage)]), fresh.score([(other, dev_pairs[-1].passage)]),
                               atol=1e-5)
    ev.use_corpus(None)
    with pytest.raises(TypeError, match="top_k_mean"):
        ev.use_corpus(reference=object())
    from inference.decisions import action_of

    t = ev.manifest.corpus_norm.thresholds  # the mode's thresholds route the chunks
    assert [g.action for g in res.graded] == [action_of(g.score, t.theta_high, t.theta_low) for g in res.graded]
    # the command line: --corpus-mode grades the same way
    from pipeline.cli import main as pipeline_main

    assert pipeline_main(["ask", q, "--index", str(tmp_path / "index"), "--evaluator", str(export), "--corpus-mode",
                          "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(sorted(c["score"] for c in got["graded"]), sorted(g.score for g in res.graded), atol=1e-5)
    # switched off, or an evaluator without the mode: pair by pair
    off = CragPipeline(index, ev)
    res_off = off.ask(q)
    fresh.use_corpus(None)
    np.testing.assert_allclose([g.score for g in res_off.graded],
                               fresh.score([(q, g.chunk.to_passage()) for g in res_off.graded]), atol=1e-5)
    plain = train_model(_config(tiny_bert, data, tmp_path / "plain", max_steps=0, loss="bce",
                                train_file=str(data["train_pairs"]), passage_format="{title}\n{text}")).export_dir
    assert CragPipeline(index, inference.load(plain), config=on).corpus_grading == "the evaluator has no corpus mode"
