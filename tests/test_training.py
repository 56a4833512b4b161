"""Evaluator training on tiny local models: every head learns, exports reload exactly, LoRA keeps
its head, resume equals an uninterrupted run, bad input stops before training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.config import ConfigError, EvaluatorConfig, build_config, parse_overrides
from training.data import DataProblem
from inference.inputs import PairEncoder, pad_batch
from inference.modeling import ModelSpec, label_token_ids, load_backbone, relevance_logits
from training.core import train_model as train_evaluator
from training.export import write_export
from training_data import make_evaluator_data

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_evaluator_data(tmp_path_factory.mktemp("evaldata"))


def cfg_for(model: Path, data, tmp: Path, **kw) -> EvaluatorConfig:
    base = dict(model_name_or_path=str(model), train_file=str(data["train_pairs"]), dev_file=str(data["dev_pairs"]),
                output_dir=str(tmp / "run"), export_dir=str(tmp / "export"), max_steps=12, eval_steps=6, save_steps=6,
                learning_rate=2e-3, max_length=96, max_query_length=24, logging_steps=4, per_device_train_batch_size=8,
                warmup_ratio=0.0, min_dev_pairs=20)
    base.update(kw)
    return EvaluatorConfig(**base)


def export_logits(export: Path, head: str, queries, passages) -> torch.Tensor:
    return memory_logits(load_backbone(str(export), head), export, head, queries, passages)


def memory_logits(model, export: Path, head: str, queries, passages) -> torch.Tensor:
    from transformers import AutoTokenizer

    man = json.loads((export / "evaluator.json").read_text())
    spec = ModelSpec(head=head, max_length=man["input"]["max_length"],
                         max_query_length=man["input"]["max_query_length"], input_template=man["input"]["template"])
    tok = AutoTokenizer.from_pretrained(export)
    enc, _ = PairEncoder(tok, spec).encode(queries, passages)
    batch = pad_batch([{k: v[i] for k, v in enc.items()} for i in range(len(queries))], tok.pad_token_id)
    lab = label_token_ids(tok, spec.label_tokens) if head == "seq2seq" else None
    model.eval()
    with torch.no_grad():
        return relevance_logits(model, batch, head, lab)


def dev_texts(data, n=12):
    from data_prep.io import read_records
    from data_prep.records import LabelledPair

    pairs = list(read_records(data["dev_pairs"], LabelledPair))[:n]
    return [p.query for p in pairs], [f"{p.passage.title}. {p.passage.text}" for p in pairs]


@pytest.mark.parametrize("backbone,head,loss", [
    ("tiny_bert", "cross-encoder", "bce"),
    ("tiny_bert", "cross-encoder", "group-ce"),
    ("tiny_t5", "seq2seq", "bce"),
    ("tiny_t5", "t5-head", "crag-mse"),
])
def test_each_head_learns_exports_and_reloads(request, data, tmp_path, backbone, head, loss):
    model_dir = request.getfixturevalue(backbone)
    train_file = data["train_groups"] if loss == "group-ce" else data["train_pairs"]
    cfg = cfg_for(model_dir, data, tmp_path, head=head, loss=loss, train_file=str(train_file), group_size=4,
                  per_device_train_batch_size=4 if loss == "group-ce" else 8, max_steps=16, eval_steps=8, save_steps=8,
                  max_dev_examples=16 if loss == "group-ce" else None)  # periodic evaluation capped
    res = train_evaluator(cfg)
    log = [h for h in json.loads((Path(cfg.output_dir) / "checkpoint-16" / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    assert log[-1]["loss"] < log[0]["loss"], f"loss did not fall: {log}"
    # every parameter tensor of the scoring path moved away from the initial weights
    before = load_file(str(model_dir / "model.safetensors"))
    after = load_file(str(res.export_dir / "model.safetensors"))
    after = {k.removeprefix("transformer."): v for k, v in after.items()}
    common = [k for k in before if k in after]
    assert len(common) >= len(before) - 1
    changed = [k for k in common if not torch.equal(before[k], after[k])]
    assert len(changed) > len(common) // 2, f"only {len(changed)} of {len(common)} tensors changed"
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    assert man["task"] == "evaluator" and man["model"]["head"] == head and man["schema_version"] == 1
    for f in ("README.md", "tokenizer_config.json", "plots/reliability.png", "plots/score_histogram.png", "plots/thresholds.png"):
        assert (res.export_dir / f).exists(), f
    # the export reproduces the scores of the trained model exactly
    q, p = dev_texts(data)
    z = export_logits(res.export_dir, head, q, p)
    assert torch.equal(z, memory_logits(res.model, res.export_dir, head, q, p))
    assert man["thresholds"]["theta_low"] <= man["thresholds"]["theta_high"]
    # calibration, thresholds and the reported dev metrics use the whole dev split
    n_dev = sum(1 for line in Path(data["dev_pairs"]).read_text().splitlines() if line.strip())
    assert man["thresholds"]["dev_pairs"] == man["calibration"]["dev_pairs"] == man["metrics"]["dev"]["n"] == n_dev


@pytest.mark.parametrize("merge", [True, False])
def test_lora_export_keeps_the_head(tiny_bert, data, tmp_path, merge):
    cfg = cfg_for(tiny_bert, data, tmp_path, use_lora=True, lora_r=4, lora_alpha=8, merge_lora=merge,
                  lora_target_modules=["query", "value"], max_steps=8, eval_steps=4, save_steps=4,
                  gradient_checkpointing=merge)  # LoRA + checkpointing, as in the t5-large-lora recipe
    res = train_evaluator(cfg)
    if merge:
        assert any(getattr(m, "gradient_checkpointing", False) is True for m in res.model.modules())
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    init_head = load_file(str(tiny_bert / "model.safetensors"))["classifier.weight"]
    q, p = dev_texts(data)
    if merge:
        assert man["model"]["weights"] == "merged-lora"
        head = load_file(str(res.export_dir / "model.safetensors"))["classifier.weight"]
        assert not torch.equal(head, init_head), "the trained head was lost in the merged export"
        z = export_logits(res.export_dir, "cross-encoder", q, p)
    else:
        assert man["model"]["weights"] == "lora-adapter"
        from peft import PeftModel

        adapter = load_file(str(res.export_dir / "adapter_model.safetensors"))
        assert any("classifier" in k for k in adapter), "the head is not saved with the adapter"
        base = load_backbone(str(tiny_bert), "cross-encoder")
        model = PeftModel.from_pretrained(base, str(res.export_dir)).eval()
        head = model.base_model.model.classifier.modules_to_save["default"].weight
        assert not torch.equal(head.detach(), init_head)
        z = memory_logits(model, res.export_dir, "cross-encoder", q, p)
    assert torch.allclose(z, memory_logits(res.model, res.export_dir, "cross-encoder", q, p), atol=1e-5)


def test_resume_after_kill_equals_uninterrupted(tiny_bert, data, tmp_path):
    from transformers import TrainerCallback

    class Die(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 5:
                raise KeyboardInterrupt("killed")

    full = cfg_for(tiny_bert, data, tmp_path / "full", max_steps=8, eval_steps=4, save_steps=4, seed=3)
    train_evaluator(full)
    part = cfg_for(tiny_bert, data, tmp_path / "part", max_steps=8, eval_steps=4, save_steps=4, seed=3)
    import training.core as ev

    orig = ev.PairTrainer.__init__

    def init_with_kill(self, *a, **k):
        orig(self, *a, **k)
        self.add_callback(Die())

    ev.PairTrainer.__init__ = init_with_kill
    try:
        with pytest.raises(KeyboardInterrupt):
            train_evaluator(part)
    finally:
        ev.PairTrainer.__init__ = orig
    assert (Path(part.output_dir) / "checkpoint-4").exists() and not Path(part.export_dir).exists()
    train_evaluator(part)  # resume_from_checkpoint: auto
    a = load_file(str(Path(full.output_dir) / "checkpoint-8" / "model.safetensors"))
    b = load_file(str(Path(part.output_dir) / "checkpoint-8" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_resume_refuses_checkpoints_of_another_recipe(tiny_bert, data, tmp_path, caplog):
    """``resume_from_checkpoint: auto`` continues a run only with the recipe its checkpoints were
    trained with; a longer run or another calibration may resume, a changed optimisation or data may not."""
    from training.config import ConfigError
    from training.core import RUN_RECIPE

    first = cfg_for(tiny_bert, data, tmp_path, max_steps=4, eval_steps=0, save_steps=4, seed=3)
    train_evaluator(first)
    assert json.loads((Path(first.output_dir) / RUN_RECIPE).read_text())["learning_rate"] == first.learning_rate
    changed = cfg_for(tiny_bert, data, tmp_path, max_steps=4, eval_steps=0, save_steps=4, seed=3, pos_weight=2.0,
                      learning_rate=1e-3)
    with pytest.raises(ConfigError, match=r"another recipe \(differs in: learning_rate, pos_weight\)"):
        train_evaluator(changed)
    longer = cfg_for(tiny_bert, data, tmp_path, max_steps=6, eval_steps=0, save_steps=2, seed=3, calibration="temperature")
    with caplog.at_level("INFO", logger="training.core"):
        res = train_evaluator(longer)
    assert "resuming from" in caplog.text and res.export_dir is not None
    fresh = cfg_for(tiny_bert, data, tmp_path, max_steps=4, eval_steps=0, save_steps=4, seed=3, learning_rate=1e-3,
                    resume_from_checkpoint=None)
    train_evaluator(fresh)  # null: start fresh, the recipe recorded anew
    assert json.loads((Path(first.output_dir) / RUN_RECIPE).read_text())["learning_rate"] == 1e-3


def test_every_recipe_loads():
    recipes = sorted((ROOT / "configs" / "evaluator").glob("*.yaml"))
    assert len(recipes) >= 4
    for r in recipes:
        cfg = build_config(r)
        assert cfg.output_dir and cfg.export_dir
    from accelerate.commands.config.config_args import load_config_from_file

    for r in sorted((ROOT / "configs" / "accelerate").glob("*.yaml")):
        load_config_from_file(str(r))


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key 'learning_rat' \\(did you mean 'learning_rate'\\?\\)"):
        build_config(None, {"learning_rat": 1e-4})
    with pytest.raises(ConfigError, match="theta_low \\(0.8\\) must be below theta_high \\(0.6\\)"):
        build_config(None, {"theta_high": 0.6, "theta_low": 0.8})
    with pytest.raises(ConfigError, match="config 'loss'"):
        build_config(None, {"loss": "hinge"})
    with pytest.raises(ConfigError, match="config file not found"):
        build_config(tmp_path / "nope.yaml")
    assert parse_overrides(["--max_steps", "5", "--bf16=true", "--label-tokens", "[relevant, irrelevant]"]) == {
        "max_steps": 5, "bf16": True, "label_tokens": ["relevant", "irrelevant"]}
    # exponents without a dot are numbers (PyYAML's YAML 1.1 read them as strings), on the command
    # line and in a recipe
    assert parse_overrides(["--learning_rate", "2e-3", "--head_learning_rate=1E-2"]) == {
        "learning_rate": 0.002, "head_learning_rate": 0.01}
    recipe = tmp_path / "r.yaml"
    recipe.write_text("learning_rate: 3e-5\nmax_steps: 7\n", encoding="utf-8")
    cfg = build_config(recipe, {"train_file": "x.jsonl"})
    assert cfg.learning_rate == 3e-5 and cfg.max_steps == 7


def test_attention_dropout_setting(tiny_bert, tiny_t5):
    from inference.modeling import load_backbone
    from training.modeling import attention_dropout_kwargs

    assert attention_dropout_kwargs(str(tiny_bert), None) == {}
    kw = attention_dropout_kwargs(str(tiny_bert), 0.0)
    assert kw == {"attention_probs_dropout_prob": 0.0}
    model = load_backbone(str(tiny_bert), "cross-encoder", **kw)
    assert model.config.attention_probs_dropout_prob == 0.0 and model.config.hidden_dropout_prob > 0
    assert all(m.dropout.p == 0.0 for m in model.modules() if hasattr(m, "attention_head_size"))
    with pytest.raises(ValueError, match="has no separate attention dropout"):
        attention_dropout_kwargs(str(tiny_t5), 0.0)
    with pytest.raises(ConfigError, match="config 'attention_dropout': 1.5 is not in"):
        build_config(None, {"attention_dropout": 1.5})


def _write(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _pair(qid, label, text="Some passage text."):
    return {"query_id": qid, "query": f"question {qid}", "passage": {"id": f"p{qid}{label}", "text": text}, "label": label}


def test_bad_input_stops_before_training(tiny_bert, data, tmp_path):
    single = _write(tmp_path / "single.jsonl", [_pair(str(i), 0.0) for i in range(5)])
    with pytest.raises(DataProblem, match="single.jsonl: the training set has only negative pairs"):
        train_evaluator(cfg_for(tiny_bert, data, tmp_path, train_file=str(single)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataProblem, match="empty.jsonl: no pairs"):
        train_evaluator(cfg_for(tiny_bert, data, tmp_path, train_file=str(empty)))
    nopos = _write(tmp_path / "dev_nopos.jsonl", [_pair(str(i), 0.0) for i in range(5)])
    with pytest.raises(DataProblem, match="dev_nopos.jsonl: the dev split has only negative pairs"):
        train_evaluator(cfg_for(tiny_bert, data, tmp_path, dev_file=str(nopos)))
    bad_label = _write(tmp_path / "bad_label.jsonl", [_pair("1", 1.0), _pair("2", 1.5)])
    from data_prep.io import DataError

    with pytest.raises(DataError, match=r"bad_label.jsonl:2: .*label 1.5 is outside \[0, 1\]"):
        train_evaluator(cfg_for(tiny_bert, data, tmp_path, train_file=str(bad_label)))
    with pytest.raises(FileNotFoundError, match="model path does not exist: /no/such/model"):
        train_evaluator(cfg_for(Path("/no/such/model"), data, tmp_path))
    assert not (tmp_path / "run").exists(), "nothing may start training on bad input"


def _manifest():
    from inference.calibration import Calibration
    from inference.decisions import Thresholds
    from inference.manifest import Manifest, ModelInfo

    return Manifest("evaluator", ModelInfo("m", "cross-encoder"), ModelSpec("cross-encoder"), Calibration(),
                    Thresholds(0.8, 0.5))


def test_killed_export_leaves_no_complete_directory(tmp_path):
    def contents(tmp):
        (tmp / "model.safetensors").write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_export(tmp_path / "exp", contents, _manifest())
    assert not (tmp_path / "exp").exists()
    assert list(tmp_path.iterdir()) == []
