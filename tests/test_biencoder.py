"""The bi-encoder head: trained and exported like every head, served by BiEncoderEngine, equal to a
plain mean-pooled cosine, with a calibrate-only export (max_steps 0) and a vector cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import inference
from data_prep.io import read_records
from data_prep.records import LabelledPair
from inference.engine import BiEncoderEngine
from inference.inputs import PairEncoder, passage_text
from inference.modeling import ModelSpec, weights_fingerprint
from training.config import ConfigError, EvaluatorConfig
from training.core import train_model
from training_data import make_evaluator_data


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_evaluator_data(tmp_path_factory.mktemp("bi-data"))


def _config(tiny_bert, data, d, **kw):
    base = dict(model_name_or_path=str(tiny_bert), head="bi-encoder", train_file=str(data["train_groups"]),
                dev_file=str(data["dev_pairs"]), output_dir=str(d / "run"), export_dir=str(d / "export"),
                loss="group-ce", group_size=4, max_steps=3, eval_steps=0, save_steps=3, max_length=96,
                max_query_length=24, logging_steps=1, per_device_train_batch_size=4, warmup_ratio=0.0,
                min_dev_pairs=20, report_to="none", learning_rate=1e-3)
    base.update(kw)
    return EvaluatorConfig(**base)


@pytest.fixture(scope="module")
def bi_export(tiny_bert, data, tmp_path_factory):
    return train_model(_config(tiny_bert, data, tmp_path_factory.mktemp("bi"))).export_dir


@pytest.fixture(scope="module")
def dev_pairs(data):
    return list(read_records(data["dev_pairs"], LabelledPair))


def _plain_cosine_logits(folder, queries, passages, max_length, query_tokens, scale):
    """What the head means, written out with plain transformers calls."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()

    def embed(texts, limit):
        out = []
        with torch.no_grad():
            for t in texts:  # one at a time: no padding at all
                enc = tok(t, truncation=True, max_length=limit, return_tensors="pt")
                h = model(**enc).last_hidden_state[0]
                out.append(torch.nn.functional.normalize(h.mean(0), dim=-1).numpy())
        return np.stack(out)

    q, p = embed(queries, query_tokens), embed(passages, max_length)
    return scale * (q * p).sum(1)


def test_export_scores_as_a_plain_mean_pooled_cosine(bi_export, dev_pairs):
    ev = inference.load(bi_export)
    assert isinstance(ev.engine, BiEncoderEngine)
    man = json.loads((bi_export / "evaluator.json").read_text())
    assert man["model"]["head"] == "bi-encoder" and man["input"]["similarity_scale"] == 20.0
    assert man["training"]["global_step"] == 3
    pairs = dev_pairs[:24]
    qs, ps = [p.query for p in pairs], [passage_text(p.passage) for p in pairs]
    want = _plain_cosine_logits(bi_export, qs, ps, 96, 24 + 2, 20.0)
    got = ev.logits([(p.query, p.passage) for p in pairs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ev.score([(p.query, p.passage) for p in pairs]), ev.calibrate(want), atol=1e-5)
    g = ev.grade(pairs[0].query, [p.passage for p in pairs[:4]])
    assert g.action in ("Correct", "Ambiguous", "Incorrect") and len(g.chunks) == 4


def test_training_moves_the_weights_and_dev_metrics_are_recorded(bi_export, tiny_bert):
    from transformers import AutoModel

    base = weights_fingerprint(AutoModel.from_pretrained(str(tiny_bert)))
    assert inference.load(bi_export).engine.fingerprint != base
    man = json.loads((bi_export / "evaluator.json").read_text())
    assert man["metrics"]["dev"]["auc"] is not None and man["thresholds"]["theta_high"] >= man["thresholds"]["theta_low"]


def test_max_steps_0_exports_the_backbone_calibrated(tiny_bert, data, tmp_path, dev_pairs):
    from transformers import AutoModel

    res = train_model(_config(tiny_bert, data, tmp_path, max_steps=0, loss="bce", train_file=str(data["train_pairs"])))
    ev = inference.load(res.export_dir)
    # the same function as the backbone it was given, whatever file it came from
    assert ev.engine.fingerprint == weights_fingerprint(AutoModel.from_pretrained(str(tiny_bert)))
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    assert man["training"]["global_step"] == 0 and man["training"]["train_loss"] is None
    assert man["calibration"]["method"] == "platt" and man["calibration"]["dev_pairs"] == len(dev_pairs)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("checkpoint-*"))


def test_pair_encoder_ids_are_the_tokenizers_single_sequences(bi_export):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(bi_export))
    spec = ModelSpec(head="bi-encoder", max_length=12, max_query_length=4)
    enc = PairEncoder(tok, spec)
    qs = ["who won the first nobel prize in physics", "when"]
    ps = ["the first nobel prize in physics was awarded to wilhelm conrad roentgen in 1901", "x rays"]
    out, stats = enc.encode(qs, ps)
    assert out["input_ids"] == [tok(q, truncation=True, max_length=6)["input_ids"] for q in qs]
    assert out["p_input_ids"] == [tok(p, truncation=True, max_length=12)["input_ids"] for p in ps]
    assert (stats.queries_truncated, stats.passages_truncated) == (1, 1)


def test_cache_reuses_vectors_and_remember_is_used(bi_export, dev_pairs):
    ev = inference.load(bi_export)
    eng = ev.engine
    eng.cache_size = 3
    texts = [passage_text(p.passage) for p in dev_pairs[:5]]
    v, cut = eng.vectors(texts)
    assert v.shape == (5, eng.dim) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert cut.tolist() == [len(eng.tokenizer(t)["input_ids"]) > 96 for t in texts] and cut.any()
    assert len(eng._cache) == 3  # bounded, least recently used out
    again, _ = eng.vectors(texts[-1:])
    np.testing.assert_allclose(again[0], v[-1], atol=1e-6)
    # a remembered vector is what the next call uses (the pipeline hands over its index's vectors)
    q = dev_pairs[0].query
    qv, _ = eng.vectors([q], "query")
    eng.remember([texts[0]], qv)
    z, stats = eng.logits([q], [texts[0]])
    assert z[0] == pytest.approx(20.0, abs=1e-4) and stats.pairs == 1
    with pytest.raises(ValueError, match="texts need"):
        eng.remember(texts[:2], qv)
    with pytest.raises(ValueError, match="kind"):
        eng.vectors(texts, "sentence")


def test_bi_encoder_settings_are_checked(tiny_bert, data, tmp_path):
    with pytest.raises(ConfigError, match="input_template"):
        _config(tiny_bert, data, tmp_path, input_template="{query} {passage}")
    with pytest.raises(ConfigError, match="similarity_scale"):
        _config(tiny_bert, data, tmp_path, similarity_scale=0)
    with pytest.raises(ConfigError, match="max_steps"):
        _config(tiny_bert, data, tmp_path, max_steps=-2)
    with pytest.raises(ValueError, match="no input_template"):
        ModelSpec(head="bi-encoder", input_template="{query} {passage}")


@pytest.mark.parametrize("merge", [True, False])
def test_lora_bi_encoder_exports_load(tiny_bert, data, tmp_path, dev_pairs, merge):
    from inference.metrics import evaluate_scores

    res = train_model(_config(tiny_bert, data, tmp_path, max_steps=2, save_steps=2, use_lora=True, merge_lora=merge,
                              lora_r=4, lora_alpha=8, lora_target_modules=["query", "value"]))
    ev = inference.load(res.export_dir)
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    assert man["model"]["weights"] == ("merged-lora" if merge else "lora-adapter")
    # the loaded model scores the dev pairs as training's calibration did
    probs = ev.score([(p.query, p.passage) for p in dev_pairs])
    got = evaluate_scores(probs, [p.label for p in dev_pairs], ev.theta_high, ev.theta_low,
                          query_ids=[p.query_id for p in dev_pairs])
    assert got["auc"] == pytest.approx(man["metrics"]["dev"]["auc"], abs=1e-6)


# --------------------------------------------------------------------------------------------
# the pipeline grades with the index's vectors when they are the evaluator's own


@pytest.fixture(scope="module")
def newline_export(tiny_bert, data, tmp_path_factory):
    """A calibrate-only bi-encoder export that shows passages as the dense index embeds them."""
    d = tmp_path_factory.mktemp("bi-nl")
    return train_model(_config(tiny_bert, data, d, max_steps=0, loss="bce", train_file=str(data["train_pairs"]),
                               passage_format="{title}\n{text}")).export_dir


def _chunks(dev_pairs):
    from pipeline.chunking import chunk_document

    seen, out = set(), []
    for p in dev_pairs:
        if p.passage.id not in seen:
            seen.add(p.passage.id)
            out.extend(chunk_document(p.passage.id, p.passage.text, p.passage.title, "nq"))
    return out


def test_pipeline_grades_with_the_index_vectors(newline_export, bi_export, dev_pairs, tmp_path):
    from pipeline import CragPipeline
    from pipeline.index import build_index

    chunks = _chunks(dev_pairs)
    index = build_index(chunks, tmp_path / "index", dense_model=str(newline_export))
    assert index.info["dense"]["max_length"] == 96  # read off the export's manifest
    ev = inference.load(newline_export)
    pipe = CragPipeline(index, ev)
    q = dev_pairs[0].query
    res = pipe.ask(q)
    assert pipe.index_vectors.active and pipe.index_vectors.handed == len(res.graded) > 0
    # the handed-over vectors give the scores the evaluator computes itself
    fresh = inference.load(newline_export)
    want = fresh.score([(q, g.chunk.to_passage()) for g in res.graded])
    np.testing.assert_allclose([g.score for g in res.graded], want, atol=1e-5)
    # the query vector came from the dense route, the chunk vectors from the index: no model pass
    from pipeline.grading import grade_hits

    q2 = dev_pairs[8].query
    hits = pipe.recall.recall(q2)
    assert pipe.index_vectors.hand_over(q2, hits[:5]) == 5

    def no_model(*a, **k):
        raise AssertionError("grading ran the model")

    ev.engine._forward_vectors = no_model
    g = grade_hits(q2, hits, ev)
    np.testing.assert_allclose(sorted(c.score for c in g.chunks),
                               sorted(fresh.score([(q2, h.chunk.to_passage()) for h in hits[:5]])), atol=1e-5)
    del ev.engine._forward_vectors

    # an index embedded by other weights, or an evaluator that shows passages differently: no handover
    from data_prep.dense import DenseEncoder

    # (newline_export is tiny_bert calibrated, untrained; bi_export is tiny_bert trained 3 steps)
    other = build_index(chunks, tmp_path / "other", encoder=DenseEncoder(bi_export, max_length=96))
    assert "other weights" in CragPipeline(other, ev).index_vectors.why_not
    longer = build_index(chunks, tmp_path / "longer", encoder=DenseEncoder(newline_export, max_length=128))
    assert "tokens per chunk" in CragPipeline(longer, ev).index_vectors.why_not
    dotted = inference.load(newline_export)
    dotted.engine.spec.passage_format = "{title}. {text}"
    p2 = CragPipeline(index, dotted)
    p2.ask(q)
    assert p2.index_vectors.active and p2.index_vectors.handed == 0


def test_an_index_refuses_a_dense_model_whose_weights_changed(newline_export, dev_pairs, tmp_path):
    import shutil

    from pipeline.index import HybridIndex, build_index, load_encoder

    model = tmp_path / "model"
    shutil.copytree(newline_export, model)
    build_index(_chunks(dev_pairs[:8]), tmp_path / "index", dense_model=str(model))
    assert HybridIndex.load(tmp_path / "index").dense_search(dev_pairs[0].query, 3)
    # the export trained again into the same folder: its vectors no longer match the index's
    from transformers import AutoModel

    m = AutoModel.from_pretrained(str(model))
    with torch.no_grad():
        m.embeddings.word_embeddings.weight.mul_(1.5)
    m.save_pretrained(str(model))
    load_encoder.cache_clear()
    with pytest.raises(ValueError, match="weights changed.*rebuild the index"):
        HybridIndex.load(tmp_path / "index").dense_search(dev_pairs[0].query, 3)


def test_a_groups_repeated_query_is_encoded_once_with_the_same_logits(bi_export, dev_pairs):
    from transformers import AutoModel, AutoTokenizer

    from inference.inputs import pad_batch
    from inference.modeling import mean_pooled, relevance_logits

    tok = AutoTokenizer.from_pretrained(str(bi_export))
    model = AutoModel.from_pretrained(str(bi_export)).eval()
    enc = PairEncoder(tok, ModelSpec(head="bi-encoder", max_length=96, max_query_length=24))
    pairs = dev_pairs[:12]  # 3 queries x 4 passages, group-major
    feats, _ = enc.encode([p.query for p in pairs], [passage_text(p.passage) for p in pairs])
    batch = pad_batch([{"input_ids": q, "p_input_ids": p} for q, p in zip(feats["input_ids"], feats["p_input_ids"])],
                      tok.pad_token_id)
    calls = []
    model.register_forward_hook(lambda m, a, k, out: calls.append(k["input_ids"].shape[0]), with_kwargs=True)
    z = relevance_logits(model, batch, "bi-encoder", similarity_scale=20.0)
    assert calls[0] == len({p.query for p in pairs}) < len(pairs)  # queries: each distinct one once
    q = mean_pooled(model, batch["input_ids"], batch["attention_mask"])
    p = mean_pooled(model, batch["p_input_ids"], batch["p_attention_mask"])
    torch.testing.assert_close(z, 20.0 * (q * p).sum(-1), atol=1e-5, rtol=1e-5)


def test_model_card_describes_the_bi_encoder(bi_export):
    card = (bi_export / "README.md").read_text()
    assert "head: `bi-encoder`" in card and "logit = 20 x cosine" in card and "tags: [crag, retrieval-evaluator, bi-encoder]" in card
    assert "model.grade(" in card and "model.model." not in card


def test_strip_vectors_let_the_evaluator_refine_without_a_model_pass(newline_export, dev_pairs, tmp_path):
    from pipeline import CragPipeline, PipelineConfig
    from pipeline.index import HybridIndex, build_index
    from pipeline.refine import sentence_strips

    chunks = _chunks(dev_pairs)
    with pytest.raises(ValueError, match="needs a dense model"):
        build_index(chunks, tmp_path / "x", dense_model="none", strip_words=50)
    build_index(chunks, tmp_path / "index", dense_model=str(newline_export), strip_words=50)
    index = HybridIndex.load(tmp_path / "index")
    assert index.strip_words == 50
    spans, vecs = index.strip_vectors(3)
    assert spans == sentence_strips(index.chunk(3).text, 50) and vecs.shape == (len(spans), 32)
    ev = inference.load(newline_export)
    pipe = CragPipeline(index, ev)
    q = dev_pairs[4].query
    res = pipe.ask(q)
    assert res.evidence and pipe.index_vectors.strips_handed > 0
    # the strip scores are the evaluator's own: refine again with a fresh evaluator and compare
    fresh = CragPipeline(HybridIndex.load(tmp_path / "index"), inference.load(newline_export),
                         config=PipelineConfig())
    fresh._vectors = type(pipe.index_vectors)(fresh.index, fresh.evaluator)
    fresh._vectors.why_not = "off for the comparison"
    again = fresh.ask(q)
    assert fresh.index_vectors.strips_handed == 0
    np.testing.assert_allclose([e.score for e in res.evidence], [e.score for e in again.evidence], atol=1e-5)
    assert [e.text for e in res.evidence] == [e.text for e in again.evidence]
    # and with the vectors handed over, refinement runs no model pass
    pipe2 = CragPipeline(HybridIndex.load(tmp_path / "index"), inference.load(newline_export))
    pipe2.evaluator.engine.remember([q], index.encoder.encode([q]), kind="query")
    calls = []
    orig = pipe2.evaluator.engine._forward_vectors
    pipe2.evaluator.engine._forward_vectors = lambda *a: calls.append(a[0].shape[0]) or orig(*a)
    pipe2.ask(q)
    assert calls == []


@pytest.fixture(scope="module")
def bi_lex_export(tiny_bert, data, tmp_path_factory):
    return train_model(_config(tiny_bert, data, tmp_path_factory.mktemp("bi-lex"), lexical_feature=True)).export_dir


@pytest.mark.parametrize("export", ["bi_export", "bi_lex_export"])
def test_bench_biencoder_script(export, data, tmp_path, monkeypatch, request):
    import importlib.util
    import sys
    from pathlib import Path

    folder = request.getfixturevalue(export)
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = importlib.util.spec_from_file_location("bench_biencoder", root / "scripts" / "bench_biencoder.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_biencoder", bench)
    spec.loader.exec_module(bench)
    out = tmp_path / "b.json"
    assert bench.main(["--model", str(folder), "--json", str(out), "--pairs", "40", "--repeats", "1",
                       "--latency-queries", "2", "--latency-repeats", "1", "--max-load", "1000", "--wait", "0",
                       "--data", str(data["dev_pairs"])]) == 0
    res = json.loads(out.read_text())
    assert res["pairs"] == 40 and 10 <= res["distinct_queries"] <= 20
    # the engine's cosine (model logit / scale, before any lexical term) is SentenceTransformer's on the same weights
    assert res["cosines_agree"] and res["max_abs_cosine_diff_vs_st"] < 1e-5 and res["cosine_tolerance"] == 1e-5
    assert res["max_abs_logit_decomposition_error"] < 1e-9  # full logit = model logit + lexical term
    for key in ("ours_with_lexical_pairs_per_s", "ours_without_lexical_pairs_per_s", "st_naive_pairs_per_s",
                "st_dedup_pairs_per_s", "speedup_without_lexical_vs_st_naive", "speedup_without_lexical_vs_st_dedup",
                "speedup_with_lexical_vs_st_naive", "speedup_with_lexical_vs_st_dedup"):
        assert res[key] > 0, key
    for k in (5, 20):
        lat = res[f"latency_top{k}"]
        assert {"grade", "model", "st_encode"} <= set(lat) and lat["grade"]["queries"] == 2
        assert res[f"latency_speedup_top{k}_with_lexical"] > 0 and res[f"latency_speedup_top{k}_without_lexical"] > 0
    if export == "bi_lex_export":
        lex = res["lexical"]
        assert lex["weight"] > 0 and res["lexical_term_pairs_per_s"] > 0 and lex["term_max"] > 0
        # the old comparison (full logit / scale against the peer's cosine) holds the lexical term
        assert lex["max_abs_full_logit_over_scale_vs_st_cosine"] > res["max_abs_cosine_diff_vs_st"]
    else:
        assert res["lexical"] is None and res["lexical_term_pairs_per_s"] is None


def test_the_vector_cache_serves_threads(bi_export, dev_pairs):
    from concurrent.futures import ThreadPoolExecutor

    ev = inference.load(bi_export)
    ev.engine.cache_size = 8  # small: entries come and go while the threads read and write
    pairs = [(p.query, p.passage) for p in dev_pairs]
    want = inference.load(bi_export).logits(pairs)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: ev.logits(pairs[i::4]), range(4)))
    for i, z in enumerate(got):
        np.testing.assert_allclose(z, want[i::4], atol=1e-5)


def test_bf16_and_cpu_fast_path_options(bi_export, dev_pairs):
    pairs = [(p.query, p.passage) for p in dev_pairs[:16]]
    want = inference.load(bi_export).logits(pairs)
    bf = inference.load(bi_export, dtype="bf16")
    assert bf.engine.autocast_dtype == torch.bfloat16
    np.testing.assert_allclose(bf.logits(pairs), want, atol=0.5)  # 20 x cosine in bf16: within half a logit
    fast = inference.load(bi_export, cpu_fast_path=True)  # checked on probe pairs at load, kept or undone
    np.testing.assert_allclose(fast.logits(pairs), want, atol=1e-3)
    assert fast.engine.fingerprint == inference.load(bi_export).engine.fingerprint  # taken before any swap
