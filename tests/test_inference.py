"""inference: loading refuses what it cannot trust, scores equal the model's own logits through the
manifest's calibration, order survives batching, CRAG actions follow the thresholds, and the CLI
writes complete outputs or none.

Three tiny exports are trained once for the module (4 steps each, a few seconds on 2 cores): a
cross-encoder (tiny BERT), a monoT5-style seq2seq (tiny T5) and a LoRA adapter-only cross-encoder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import inference
from data_prep.io import read_records
from data_prep.records import LabelledPair, Passage
from inference.cli import main as cli_main
from inference.engine import ScoringEngine
from inference.evaluator import Evaluator
from inference.inputs import PairEncoder, pad_batch, passage_text
from inference.loading import ExportError
from inference.metrics import action_of, evaluate_scores, query_action
from training.config import EvaluatorConfig
from inference.modeling import ModelSpec, label_token_ids, load_backbone, relevance_logits
from training.core import train_model as train_evaluator
from training_data import make_evaluator_data


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_evaluator_data(tmp_path_factory.mktemp("inference-data"))


def _train(model: Path, data, out: Path, **kw) -> Path:
    cfg = EvaluatorConfig(model_name_or_path=str(model), train_file=str(data["train_pairs"]), dev_file=str(data["dev_pairs"]),
                          output_dir=str(out / "run"), export_dir=str(out / "export"), max_steps=4, eval_steps=0,
                          save_steps=4, learning_rate=2e-3, max_length=96, max_query_length=24, logging_steps=4,
                          per_device_train_batch_size=8, warmup_ratio=0.0, min_dev_pairs=20, report_to="none", **kw)
    return train_evaluator(cfg).export_dir


@pytest.fixture(scope="module")
def ce_export(tiny_bert, data, tmp_path_factory) -> Path:
    return _train(tiny_bert, data, tmp_path_factory.mktemp("ce"))


@pytest.fixture(scope="module")
def t5_export(tiny_t5, data, tmp_path_factory) -> Path:
    return _train(tiny_t5, data, tmp_path_factory.mktemp("t5"), head="seq2seq")


@pytest.fixture(scope="module")
def lora_export(tiny_bert, data, tmp_path_factory) -> Path:
    return _train(tiny_bert, data, tmp_path_factory.mktemp("lora"), use_lora=True, merge_lora=False, lora_r=4,
                  lora_alpha=8, lora_target_modules=["query", "value"])


@pytest.fixture(scope="module")
def ce(ce_export) -> Evaluator:
    return inference.load(ce_export, device="cpu")


@pytest.fixture(scope="module")
def ce_padded(ce_export) -> Evaluator:
    """The cross-encoder on padded batches (the CPU default is the unpadded BERT path)."""
    return inference.load(ce_export, device="cpu", unpadded=False)


@pytest.fixture(scope="module")
def dev_pairs(data) -> list[LabelledPair]:
    return list(read_records(data["dev_pairs"], LabelledPair))


def _without_checksums(export: Path) -> Path:
    """The export as one written before weight checksums were recorded (or edited by hand)."""
    m = json.loads((export / "evaluator.json").read_text())
    del m["model"]["files_sha256"]
    (export / "evaluator.json").write_text(json.dumps(m))
    return export


def _copy(export: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(export, dst)
    return dst


def _edit_manifest(export: Path, **changes) -> None:
    m = json.loads((export / "evaluator.json").read_text())
    m.update(changes)
    (export / "evaluator.json").write_text(json.dumps(m))


def direct_logits(export: Path, pairs: list[LabelledPair], model=None) -> np.ndarray:
    """The relevance logits straight from the saved model: one padded batch, no engine."""
    from transformers import AutoTokenizer

    man = json.loads((export / "evaluator.json").read_text())
    head = man["model"]["head"]
    spec = ModelSpec(head=head, max_length=man["input"]["max_length"],
                         max_query_length=man["input"]["max_query_length"], input_template=man["input"]["template"])
    tok = AutoTokenizer.from_pretrained(export)
    enc, _ = PairEncoder(tok, spec).encode([p.query for p in pairs], [passage_text(p.passage) for p in pairs])
    batch = pad_batch([{k: v[i] for k, v in enc.items()} for i in range(len(pairs))], tok.pad_token_id)
    model = (model or load_backbone(str(export), head)).eval()
    lab = label_token_ids(tok, spec.label_tokens) if head == "seq2seq" else None
    with torch.no_grad():
        return relevance_logits(model, batch, head, lab).double().numpy()


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64)))


# --------------------------------------------------------------------------------------------
# loading


def test_load_refuses_with_clear_messages(ce_export, tmp_path):
    with pytest.raises(ExportError, match="model folder not found: .*nowhere"):
        inference.load(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ExportError, match=r"empty: no manifest \(answer_classifier.json or evaluator.json or "
                                          r"extractor.json\); not an export of this package"):
        inference.load(empty)
    # weights without a manifest: an interrupted export or a plain checkpoint
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(ce_export / "model.safetensors", plain)
    with pytest.raises(ExportError, match="holds weights but no manifest"):
        inference.load(plain)

    exp = _copy(ce_export, tmp_path / "a")
    _edit_manifest(exp, schema_version=2)
    with pytest.raises(ExportError, match=r"schema_version 2 is not supported for task 'evaluator' \(this version reads 1\)"):
        inference.load(exp)
    _edit_manifest(exp, schema_version=1, task="summariser")
    with pytest.raises(ExportError, match="unknown task 'summariser'; this version of inference loads: evaluator, "
                                          "answer_classifier, extractor"):
        inference.load(exp)
    _edit_manifest(exp, task="extractor")
    with pytest.raises(ExportError, match="task 'extractor' exports keep their manifest in extractor.json, not evaluator.json"):
        inference.load(exp)
    (exp / "evaluator.json").write_text("{not json")
    with pytest.raises(ExportError, match="evaluator.json: the manifest is not valid JSON"):
        inference.load(exp)

    exp = _copy(ce_export, tmp_path / "b")
    m = json.loads((exp / "evaluator.json").read_text())
    del m["calibration"]["a"]
    (exp / "evaluator.json").write_text(json.dumps(m))
    with pytest.raises(ExportError, match="missing 'calibration.a'"):
        inference.load(exp)
    m = json.loads((ce_export / "evaluator.json").read_text())
    m["thresholds"]["theta_high"] = "high"
    (exp / "evaluator.json").write_text(json.dumps(m))
    with pytest.raises(ExportError, match="evaluator.json: thresholds: 'theta_high' must be float or int, got str"):
        inference.load(exp)


def test_load_refuses_an_export_of_another_task(ce_export):
    with pytest.raises(ExportError, match=r"this is an evaluator export \(evaluator.json\), not an extractor export"):
        inference.load(ce_export, task="extractor")
    with pytest.raises(ValueError, match="unknown task 'reranker'"):
        inference.load(ce_export, task="reranker")
    assert inference.load(ce_export, task="evaluator", device="cpu").task == "evaluator"


def test_exports_of_earlier_versions_still_load(ce_export, ce, dev_pairs, tmp_path):
    """The manifest of the first exports: no passage format, no checksums, no name."""
    exp = _copy(ce_export, tmp_path / "v1")
    m = json.loads((exp / "evaluator.json").read_text())
    del m["input"]["passage_format"], m["model"]["files_sha256"], m["name"]
    (exp / "evaluator.json").write_text(json.dumps(m))
    old = inference.load(exp, device="cpu")
    assert old.passage_format == "{title}. {text}"
    pairs = [(p.query, p.passage) for p in dev_pairs[:8]]
    assert old.score(pairs) == pytest.approx(ce.score(pairs), abs=1e-7)


def test_load_refuses_bad_weights(ce_export, tmp_path):
    exp = _copy(ce_export, tmp_path / "missing")
    (exp / "model.safetensors").unlink()
    with pytest.raises(ExportError, match=r"missing weights \(expected model.safetensors\)"):
        inference.load(exp)

    exp = _copy(ce_export, tmp_path / "truncated")
    data = (exp / "model.safetensors").read_bytes()
    (exp / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ExportError, match="model.safetensors: corrupt or truncated safetensors file"):
        inference.load(exp)
    (exp / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ExportError, match="corrupt or truncated safetensors file"):
        inference.load(exp)

    # a valid file that lacks the scoring head: refused, never silently re-initialised
    from safetensors.torch import load_file, save_file

    exp = _without_checksums(_copy(ce_export, tmp_path / "headless"))
    sd = load_file(str(exp / "model.safetensors"))
    save_file({k: v for k, v in sd.items() if not k.startswith("classifier")}, str(exp / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(ExportError, match=r"the weights lack 2 tensors the model needs \(classifier.bias, classifier.weight\)"):
        inference.load(exp)


def test_load_checks_weight_checksums(ce_export, ce, tmp_path):
    from inference.manifest import file_sha256

    recorded = ce.manifest.model.files_sha256
    assert recorded == {"model.safetensors": file_sha256(ce_export / "model.safetensors")}
    # one flipped byte in the tensor data: the file still parses, the checksum catches it
    exp = _copy(ce_export, tmp_path / "flipped")
    data = bytearray((exp / "model.safetensors").read_bytes())
    data[-100] ^= 0x01
    (exp / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ExportError, match="model.safetensors: sha256 differs from the one recorded in evaluator.json"):
        inference.load(exp)
    # weights the manifest does not list (converted by hand) are refused too
    exp = _copy(ce_export, tmp_path / "renamed")
    (exp / "model.safetensors").rename(exp / "model-00001-of-00001.safetensors")
    (exp / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"classifier.bias": "model-00001-of-00001.safetensors"}}))
    with pytest.raises(ExportError, match="not among the weight files the manifest lists"):
        inference.load(exp)


def test_pickle_weights_need_trust(ce_export, ce, dev_pairs, tmp_path):
    from safetensors.torch import load_file

    exp = _without_checksums(_copy(ce_export, tmp_path / "pickle"))
    torch.save(load_file(str(exp / "model.safetensors")), exp / "pytorch_model.bin")
    (exp / "model.safetensors").unlink()
    with pytest.raises(ExportError, match=r"weights are pickle files \(pytorch_model.bin\), which can run arbitrary code.*trust_pickle=True"):
        inference.load(exp)
    trusted = inference.load(exp, trust_pickle=True, device="cpu")
    pairs = [(p.query, p.passage) for p in dev_pairs[:8]]
    assert trusted.score(pairs) == pytest.approx(ce.score(pairs), abs=1e-7)


def test_device_and_dtype_options(ce_export):
    from inference.loading import resolve_device, resolve_dtype

    assert resolve_device("cpu").type == "cpu"
    assert resolve_device(None).type in ("cuda", "mps", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="fp16 is not supported"):
        resolve_dtype("fp16", torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        resolve_dtype("int3", torch.device("cpu"))
    assert resolve_dtype("bf16", torch.device("cpu")) is torch.bfloat16


# --------------------------------------------------------------------------------------------
# scores


@pytest.mark.parametrize("which", ["ce_export", "t5_export"])
def test_scores_equal_calibrated_model_logits(request, which, dev_pairs):
    export = request.getfixturevalue(which)
    model = inference.load(export, device="cpu")
    man = json.loads((export / "evaluator.json").read_text())
    a, b = man["calibration"]["a"], man["calibration"]["b"]
    pairs = dev_pairs[:24]
    z = direct_logits(export, pairs)
    got = model.score([(p.query, p.passage) for p in pairs])
    raw = model.score_raw([(p.query, p.passage) for p in pairs])
    assert isinstance(got, list) and all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in got)
    np.testing.assert_allclose(got, sigmoid(a * z + b), atol=1e-6)
    np.testing.assert_allclose(raw, sigmoid(z), atol=1e-6)
    assert (a, b) != (1.0, 0.0), "the test needs a real calibration to tell score from score_raw"
    # str passages formatted as in training score the same as Passage objects
    as_text = model.score([(p.query, passage_text(p.passage)) for p in pairs])
    np.testing.assert_allclose(as_text, got, atol=1e-7)


def test_input_order_survives_length_sorting_and_batching(ce_export, dev_pairs):
    # mixed lengths: whole passages (truncated), their first words, and a few characters
    pairs = []
    for i, p in enumerate(dev_pairs[:30]):
        words = p.passage.text.split()
        text = [p.passage.text, " ".join(words[: 3 + i % 7]), words[0]][i % 3]
        pairs.append((p.query, text))
    small = inference.load(ce_export, device="cpu", batch_tokens=96)  # one long pair per batch
    big = inference.load(ce_export, device="cpu", batch_tokens=100_000)
    singles = np.array([small.score([pr])[0] for pr in pairs])
    for model in (small, big):
        np.testing.assert_allclose(model.score(pairs), singles, atol=1e-6)
    # a different input order gives the same score to each pair
    perm = np.random.default_rng(0).permutation(len(pairs))
    np.testing.assert_allclose(np.array(big.score([pairs[i] for i in perm])), singles[perm], atol=1e-6)
    # the plan respects the budget and covers every pair once
    eng = big.engine
    eng.batch_tokens = 300
    lengths = np.array([96, 10, 50, 96, 3, 40, 40, 7])
    batches = eng.plan_batches(lengths)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    assert all(len(b) * lengths[b].max() <= 300 for b in batches)
    assert lengths[batches[0]].max() == 96


def test_more_pairs_than_one_chunk_keep_their_order(ce_export, dev_pairs):
    """One call with more pairs than a tokenising chunk: every chunk writes its own positions (a
    regression: later chunks once overwrote the first chunk's scores and left the rest unset)."""
    pairs = [(p.query, p.passage) for p in dev_pairs[:23]]
    whole = inference.load(ce_export, device="cpu")
    chunked = inference.load(ce_export, device="cpu")
    chunked.engine.chunk_pairs = 5
    np.testing.assert_allclose(chunked.score_raw(pairs), whole.score_raw(pairs), atol=1e-6)
    assert chunked.engine.stats.pairs == 23


def test_default_budget_holds_the_longest_pair(ce_export, monkeypatch):
    """The per-device default budget grows to the model's max length; an explicit smaller one is refused."""
    from inference import engine as eng

    monkeypatch.setitem(eng.DEFAULT_BATCH_TOKENS, "cpu", 64)  # below the export's max_length of 96
    model = inference.load(ce_export, device="cpu")
    assert model.engine.batch_tokens == model.spec.max_length == 96
    with pytest.raises(ValueError, match=r"batch_tokens \(64\) must be at least max_length \(96\)"):
        inference.load(ce_export, device="cpu", batch_tokens=64)


def test_empty_and_mistyped_inputs_are_rejected(ce):
    with pytest.raises(ValueError, match="pair 1: empty passage"):
        ce.score([("q", "a passage"), ("q", "   ")])
    with pytest.raises(ValueError, match="pair 0: empty query"):
        ce.score([(" ", "a passage")])
    with pytest.raises(TypeError, match="pair 0: a passage must be a str or Passage"):
        ce.score([("q", 3)])
    assert ce.score([]) == []


def test_bf16_autocast_is_close_to_fp32(ce_export, ce, dev_pairs):
    bf = inference.load(ce_export, device="cpu", dtype="bf16")
    assert bf.engine.autocast_dtype is torch.bfloat16
    pairs = [(p.query, p.passage) for p in dev_pairs[:16]]
    np.testing.assert_allclose(bf.score_raw(pairs), ce.score_raw(pairs), atol=0.02)


def test_lora_adapter_export_loads(lora_export, tiny_bert, dev_pairs, tmp_path):
    man = json.loads((lora_export / "evaluator.json").read_text())
    assert man["model"]["weights"] == "lora-adapter" and not (lora_export / "model.safetensors").exists()
    model = inference.load(lora_export, device="cpu")
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(load_backbone(str(tiny_bert), "cross-encoder"), str(lora_export))
    pairs = dev_pairs[:16]
    z = direct_logits(lora_export, pairs, model=peft_model)
    np.testing.assert_allclose(model.score_raw([(p.query, p.passage) for p in pairs]), sigmoid(z), atol=1e-5)
    # without its base model an adapter cannot load: say so
    exp = _copy(lora_export, tmp_path)
    m = json.loads((exp / "evaluator.json").read_text())
    m["model"]["base_model"] = m["model"]["backbone"] = str(tmp_path / "gone")
    (exp / "evaluator.json").write_text(json.dumps(m))
    with pytest.raises(ExportError, match="needs its base model, which was not found"):
        inference.load(exp)
    assert inference.load(exp, base_model=str(tiny_bert)).score_raw([(pairs[0].query, pairs[0].passage)])[0] == \
        pytest.approx(float(sigmoid(z[0])), abs=1e-5)


# --------------------------------------------------------------------------------------------
# CRAG actions


def test_grade_actions_and_query_rule(ce, dev_pairs):
    q = dev_pairs[0].query
    chunks = list({p.passage.id: p.passage for p in dev_pairs}.values())[:6]  # six different passages
    s = np.array(ce.score([(q, c) for c in chunks]))
    # manifest thresholds
    g = ce.grade(q, chunks)
    assert [c.index for c in g.chunks] == list(range(6)) and [c.passage_id for c in g.chunks] == [c.id for c in chunks]
    np.testing.assert_allclose(g.scores, s, atol=1e-7)
    order = np.sort(g.scores)  # grading is deterministic: thresholds between its own scores
    assert len(set(order)) == 6
    assert [c.action for c in g.chunks] == [action_of(x, ce.theta_high, ce.theta_low) for x in g.scores]
    # overridden: the top chunk Correct -> Correct
    hi, lo = (order[-1] + order[-2]) / 2, order[0] - 1e-9
    g = ce.grade(q, chunks, theta_high=hi, theta_low=lo)
    assert [c.action for c in g.chunks].count("Correct") == 1 and g.action == "Correct"
    assert (g.theta_high, g.theta_low) == (hi, lo)
    # nothing reaches theta_high, some reach theta_low -> Ambiguous
    g = ce.grade(q, chunks, theta_high=min(1.0, order[-1] + 1e-6), theta_low=(order[0] + order[1]) / 2)
    assert "Correct" not in [c.action for c in g.chunks] and g.action == "Ambiguous"
    assert [c.action for c in g.chunks].count("Incorrect") == 1
    # all below theta_low -> Incorrect
    g = ce.grade(q, chunks, theta_high=min(1.0, order[-1] + 2e-6), theta_low=min(1.0, order[-1] + 1e-6))
    assert g.action == "Incorrect" and {c.action for c in g.chunks} == {"Incorrect"}
    # two-tier: no Ambiguous band, one threshold
    g = ce.grade(q, chunks, theta_high=(order[2] + order[3]) / 2, two_tier=True)
    assert g.theta_low is None and [c.action for c in g.chunks].count("Correct") == 3
    assert "Ambiguous" not in [c.action for c in g.chunks] and g.action == "Correct"
    g = ce.grade(q, chunks, theta_high=min(1.0, order[-1] + 1e-6), theta_low=0.0, two_tier=True)
    assert g.action == "Incorrect"
    assert g.action == query_action([c.action for c in g.chunks])
    # no chunks: nothing relevant was retrieved
    assert ce.grade(q, []).action == "Incorrect"
    assert g.ranked()[0].score == max(g.scores)
    with pytest.raises(ValueError, match="theta_low .* must not exceed theta_high"):
        ce.grade(q, chunks, theta_high=0.3, theta_low=0.6)
    with pytest.raises(ValueError, match="theta_high must be a number in \\[0, 1\\]"):
        ce.grade(q, chunks, theta_high=1.5)
    with pytest.raises(TypeError, match="chunks must be a list"):
        ce.grade(q, "one passage")


# --------------------------------------------------------------------------------------------
# CLI


def _run(*argv) -> int:
    return cli_main([str(a) for a in argv] + ["--no-progress"])


def test_cli_score_writes_scores_and_summary(ce_export, ce, data, dev_pairs, tmp_path, capsys):
    out = tmp_path / "scores.jsonl"
    assert _run("score", "--model", ce_export, "--input", data["dev_pairs"], "--output", out, "--chunk-size", 7) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(dev_pairs)
    assert set(rows[0]) == {"index", "query_id", "passage_id", "score", "raw_score", "action", "label"}
    assert [r["index"] for r in rows] == list(range(len(rows)))
    assert [r["passage_id"] for r in rows] == [p.passage.id for p in dev_pairs]
    np.testing.assert_allclose([r["score"] for r in rows], ce.score([(p.query, p.passage) for p in dev_pairs]), atol=1e-6)
    assert all(r["action"] == action_of(r["score"], ce.theta_high, ce.theta_low) for r in rows)
    meta = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())
    assert meta["pairs"] == len(rows) and meta["format"] == "pairs"
    assert meta["passages_truncated"] > 0 and meta["max_length"] == 96  # NQ passages exceed 96 tokens
    assert sum(meta["actions"].values()) == len(rows)
    # an existing output is refused
    before = out.read_bytes()
    assert _run("score", "--model", ce_export, "--input", data["dev_pairs"], "--output", out) == 2
    assert "output exists" in capsys.readouterr().err and out.read_bytes() == before


def test_cli_score_simple_lines_bad_rows_and_atomicity(ce_export, ce, tmp_path, capsys):
    good = [{"query": f"who wrote book {i}", "passage": "A passage about a book " * (1 + i % 4)} for i in range(12)]
    inp = tmp_path / "simple.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in good))
    out = tmp_path / "out.jsonl"
    assert _run("score", "--model", ce_export, "--input", inp, "--output", out, "--two-tier") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    np.testing.assert_allclose([r["score"] for r in rows], ce.score([(r["query"], r["passage"]) for r in good]), atol=1e-6)
    assert {r["action"] for r in rows} <= {"Correct", "Incorrect"} and "label" not in rows[0]
    # a bad row after two chunks were written: the run fails and leaves the old output untouched
    bad = good[:9] + [{"query": "q", "passage": "  "}] + good[9:]
    inp.write_text("".join(json.dumps(r) + "\n" for r in bad))
    before = out.read_bytes()
    assert _run("score", "--model", ce_export, "--input", inp, "--output", out, "--overwrite", "--chunk-size", 4) == 2
    assert "simple.jsonl:10: empty passage" in capsys.readouterr().err
    assert out.read_bytes() == before
    fresh = tmp_path / "fresh.jsonl"
    assert _run("score", "--model", ce_export, "--input", inp, "--output", fresh, "--chunk-size", 4) == 2
    assert not fresh.exists() and not list(tmp_path.glob(".fresh.jsonl.*")), "a failed run leaves no output"
    # --skip-bad: scored around it, counted, raw row kept
    with_json_error = inp.read_text() + "{broken\n"
    inp.write_text(with_json_error)
    assert _run("score", "--model", ce_export, "--input", inp, "--output", fresh, "--skip-bad", "--chunk-size", 4) == 0
    assert len(fresh.read_text().splitlines()) == 12
    meta = json.loads((tmp_path / "fresh.jsonl.meta.json").read_text())
    assert meta["rejected"] == {"total": 2, "by_reason": {"empty-passage": 1, "invalid-json": 1}}
    assert (tmp_path / "fresh.jsonl.rejects" / "simple.jsonl.rejected").read_text().splitlines() == [
        json.dumps(bad[9]), "{broken"]


def test_cli_reads_the_crag_evaluator_format(ce_export, ce, tmp_path):
    src = Path(__file__).parent / "fixtures" / "crag" / "crag_evaluator.sample.txt"
    out = tmp_path / "crag.jsonl"
    assert _run("score", "--model", ce_export, "--input", src, "--output", out) == 0
    from data_prep.readers.crag import read_evaluator_pairs

    pairs = list(read_evaluator_pairs(src))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(pairs) > 0
    assert json.loads((tmp_path / "crag.jsonl.meta.json").read_text())["format"] == "crag-evaluator"
    np.testing.assert_allclose([r["score"] for r in rows], ce.score([(p.query, p.passage) for p in pairs]), atol=1e-6)


@pytest.mark.parametrize("two_tier", [False, True])
def test_cli_evaluate_equals_metrics_module(t5_export, data, dev_pairs, tmp_path, two_tier):
    out = tmp_path / "metrics.json"
    extra = ["--two-tier"] if two_tier else []
    assert _run("evaluate", "--model", t5_export, "--data", data["dev_pairs"], "--output-json", out,
                "--plots", tmp_path / "plots", *extra) == 0
    got = json.loads(out.read_text())
    model = inference.load(t5_export, device="cpu")
    scores = model.score([(p.query, p.passage) for p in dev_pairs])
    lo = None if two_tier else model.theta_low
    want = evaluate_scores(scores, [p.label for p in dev_pairs], model.theta_high, lo, [p.query_id for p in dev_pairs])
    for k in ("n", "positives", "accuracy", "auc", "f1", "precision", "recall", "ece", "mrr@10", "ndcg@10"):
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
    assert got["actions"] == want["actions"]
    assert got["thresholds"]["theta_high"] == model.theta_high and got["thresholds"]["two_tier"] is two_tier
    assert got["thresholds"]["theta_low"] == lo
    assert got["decision_threshold"]["name"] == "theta_high" and got["decision_threshold"]["value"] == model.theta_high
    if two_tier:
        assert got["actions"]["positive"]["Ambiguous"] == got["actions"]["negative"]["Ambiguous"] == 0
    assert {Path(p).name for p in got["plots"]} == {"reliability.png", "score_histogram.png", "thresholds.png"}
    # unlabelled input cannot be evaluated
    simple = tmp_path / "unlabelled.jsonl"
    simple.write_text(json.dumps({"query": "q", "passage": "p"}) + "\n")
    assert _run("evaluate", "--model", t5_export, "--data", simple, "--output-json", tmp_path / "x.json") == 2
    assert not (tmp_path / "x.json").exists()


def test_cpu_fast_path_is_checked_and_falls_back(ce_export, ce, dev_pairs, monkeypatch):
    from inference import engine as eng

    if not eng.cpu_fast_path_available():
        pytest.skip("this torch build has no oneDNN linear")
    assert not ce.engine.fast_path  # opt-in
    assert not any(isinstance(m, eng.PackedLinear) for m in ce.engine.model.modules())
    monkeypatch.setattr(eng, "FAST_PATH_MIN_ROWS", 0)  # every batch through the packed path
    fast = inference.load(ce_export, device="cpu", cpu_fast_path=True)
    assert fast.engine.fast_path and any(isinstance(m, eng.PackedLinear) for m in fast.engine.model.modules())
    assert all(m.min_rows == 0 for m in fast.engine.model.modules() if isinstance(m, eng.PackedLinear))
    plain = inference.load(ce_export, device="cpu", cpu_fast_path=False)
    assert not plain.engine.fast_path and not any(isinstance(m, eng.PackedLinear) for m in plain.engine.model.modules())
    pairs = [(p.query, p.passage) for p in dev_pairs[:20]]
    np.testing.assert_allclose(fast.score_raw(pairs), plain.score_raw(pairs), atol=1e-6)
    np.testing.assert_allclose(ce.score_raw(pairs), plain.score_raw(pairs), atol=1e-6)
    # a packed layer that computes something else is caught on the probe batch and undone
    orig = eng.PackedLinear.forward
    monkeypatch.setattr(eng.PackedLinear, "forward", lambda self, x: orig(self, x) + 0.01)
    wrong = inference.load(ce_export, device="cpu", cpu_fast_path=True)
    assert not wrong.engine.fast_path
    assert not any(isinstance(m, eng.PackedLinear) for m in wrong.engine.model.modules())
    np.testing.assert_allclose(wrong.score_raw(pairs), plain.score_raw(pairs), atol=1e-7)


def test_first_token_last_layer_scores_as_the_full_model(ce_export, ce_padded, dev_pairs, monkeypatch):
    from inference import engine as eng

    ce = ce_padded
    layers = eng.encoder_layers(ce.engine.model)
    assert ce.engine.first_token_layer and isinstance(layers[-1], eng.FirstTokenLayer) and ce.engine.unpadded is None
    full = inference.load(ce_export, device="cpu", first_token_layer=False, cpu_fast_path=False)
    assert not full.engine.first_token_layer
    assert not any(isinstance(m, eng.FirstTokenLayer) for m in full.engine.model.modules())
    pairs = [(p.query, p.passage) for p in dev_pairs[:40]]  # unequal lengths: padded batches
    np.testing.assert_allclose(ce.score_raw(pairs), full.score_raw(pairs), atol=1e-6)
    # single pairs (no padding) too
    for pair in pairs[:3]:
        np.testing.assert_allclose(ce.score_raw([pair]), full.score_raw([pair]), atol=1e-6)
    # a first-token layer that computes something else is caught on the probe and undone
    orig = eng.FirstTokenLayer.forward
    monkeypatch.setattr(eng.FirstTokenLayer, "forward", lambda self, h, *a, **k: orig(self, h, *a, **k) * 1.01)
    wrong = inference.load(ce_export, device="cpu", cpu_fast_path=False, unpadded=False)
    assert not wrong.engine.first_token_layer
    assert not isinstance(eng.encoder_layers(wrong.engine.model)[-1], eng.FirstTokenLayer)
    np.testing.assert_allclose(wrong.score_raw(pairs), full.score_raw(pairs), atol=1e-7)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_first_token_layer_equals_the_full_layer_first_row(ce_padded, mask_kind, monkeypatch):
    """Both ways of FirstTokenLayer (float32: keys and values folded into the first query; else: the
    model's attention function on projected keys and values) give the full layer's first row, with
    each mask form a BERT layer may receive."""
    from inference import engine as eng

    ftl = eng.encoder_layers(ce_padded.engine.model)[-1]
    full = ftl.layer
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 9, full.attention.self.query.in_features, generator=g)
    keep = torch.ones(3, 9, dtype=torch.bool)
    keep[1, 6:] = False
    keep[2, 3:] = False
    mask = {"none": None, "bool": keep[:, None, None, :].expand(3, 1, 9, 9),
            "additive": torch.where(keep, 0.0, torch.finfo(torch.float32).min)[:, None, None, :].expand(3, 1, 9, 9)}[mask_kind]
    with torch.inference_mode():
        want = full(h, mask)
        want = (want[0] if isinstance(want, tuple) else want)[:, :1]
        folded = ftl(h, mask)
        monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: True)  # the projecting way
        projected = ftl(h, mask)
    assert folded.shape == projected.shape == want.shape
    torch.testing.assert_close(folded, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(projected, want, atol=1e-5, rtol=1e-5)


def test_pair_template_encodes_as_the_tokenizer_pairs(ce_export, dev_pairs):
    """Queries and passages tokenised once each and joined by the template give the tokenizer's own
    pair encoding, truncation included (the passage is cut, never the query)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ce_export)
    spec = ModelSpec("cross-encoder", max_length=64, max_query_length=12)
    fast = PairEncoder(tok, spec)
    assert fast.template is not None and fast.template["prefix"] == [tok.cls_token_id]
    joint = PairEncoder(tok, spec)
    joint.template = None
    q = [p.query for p in dev_pairs[:50]] + ["a very long question " * 10]
    t = [passage_text(p.passage) for p in dev_pairs[:50]] + ["short"]
    a, sa = fast.encode(q, t)
    b, sb = joint.encode(q, t)
    assert a == b and sa == sb and sa.passages_truncated > 10 and sa.queries_truncated == 1
    assert max(len(x) for x in a["input_ids"]) == 64


def test_unpadded_bert_scores_as_the_padded_model(ce_export, ce, ce_padded, dev_pairs, monkeypatch):
    """The CPU default for BERT cross-encoders: packed sequences, no padding; checked on a probe."""
    from inference import kernels

    assert isinstance(ce.engine.unpadded, kernels.UnpaddedBert) and ce.engine.first_token_layer
    assert not any(isinstance(m, kernels.FirstTokenLayer) for m in ce.engine.model.modules())
    full = inference.load(ce_export, device="cpu", first_token_layer=False, unpadded=False)
    pairs = [(p.query, p.passage) for p in dev_pairs[:40]]  # unequal lengths
    np.testing.assert_allclose(ce.score_raw(pairs), full.score_raw(pairs), atol=1e-6)
    np.testing.assert_allclose(ce.score_raw(pairs), ce_padded.score_raw(pairs), atol=1e-6)
    for pair in pairs[:3]:
        np.testing.assert_allclose(ce.score_raw([pair]), full.score_raw([pair]), atol=1e-6)
    # small budgets: many batches of packed sequences
    tight = inference.load(ce_export, device="cpu", batch_tokens=96)
    np.testing.assert_allclose(tight.score_raw(pairs), full.score_raw(pairs), atol=1e-6)
    # an unpadded path that computes something else is caught on the probe and left off
    orig = kernels.UnpaddedBert.logits
    monkeypatch.setattr(kernels.UnpaddedBert, "logits", lambda self, *a: orig(self, *a) + 0.01)
    wrong = inference.load(ce_export, device="cpu")
    assert wrong.engine.unpadded is None and wrong.engine.first_token_layer  # the padded shortcut instead
    np.testing.assert_allclose(wrong.score_raw(pairs), full.score_raw(pairs), atol=1e-6)


def test_first_token_layer_left_out_where_the_head_reads_every_position(t5_export):
    t5 = inference.load(t5_export, device="cpu")
    assert not t5.engine.first_token_layer
