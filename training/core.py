"""Train -> calibrate -> fit the decision -> export, for every task, as one function the entry
scripts call (and tests call directly): :func:`train_model`.

The task (``cfg.TASK``: evaluator, answer_classifier or extractor) decides where the data comes
from (its ``data_prep build`` folder), how the decision is fitted on the dev scores and which dev
metrics the manifest records (:mod:`training.tasks`); everything else is shared.

The data is one training file and one dev file (``train_file`` / ``dataset_dir``), or a weighted
mix of sources (``train_mix``, :func:`training.data.load_mix`) whose dev pairs are pooled for
evaluation, calibration and the decision; the manifest then records each source's data and dev
metrics.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from data_prep.io import write_json
from inference.calibration import sigmoid
from inference.corpus_norm import CorpusNorm, combine, top_k_mean
from inference.inputs import PairEncoder, passage_text
from inference.lexical import LexicalFeature
from inference.manifest import Manifest, ModelInfo, file_sha256
from inference.metrics import evaluate_scores
from inference.modeling import ModelSpec, infer_head, label_token_ids, load_backbone, resolve_model_path
from inference.plots import write_plots

from . import fitting
from .config import ConfigError, ExtractorConfig, TrainConfig
from .data import (MIX_TAG, Collator, DataProblem, EncodedGroups, EncodedPairs, Mix, check_labels, load_groups,
                   load_mix, load_pairs, resolve_data_files, sample_pairs)
from .export import git_commit, package_version, save_model_weights, write_export
from .modeling import apply_lora, attention_dropout_kwargs
from .tasks import TRAINING_TASKS, dev_metrics, plot_thresholds
from .trainer import PairTrainer, check_launch, make_compute_metrics, training_arguments

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    export_dir: Path | None
    dev_metrics: dict[str, Any]
    manifest: Manifest | None
    model: Any = None  # the trained model in memory (PeftModel under LoRA)


def choose_backbone(names: str | list[str]) -> str:
    """The backbone of a config: a name, or the first of a list that exists here (a local folder or
    an installed packaged model), else the list's last entry."""
    if isinstance(names, str):
        return names
    for name in names:
        try:
            if Path(resolve_model_path(name)).exists():
                if name != names[0]:
                    logger.info("backbone: %s (not found: %s)", name, ", ".join(names[: names.index(name)]))
                else:
                    logger.info("backbone: %s", name)
                return name
        except FileNotFoundError:
            continue
    logger.info("backbone: %s (none of %s found locally)", names[-1], ", ".join(names[:-1]))
    return names[-1]


def build_spec(cfg: TrainConfig, model_path: str) -> ModelSpec:
    head = infer_head(model_path) if cfg.head == "auto" else cfg.head
    return ModelSpec(head=head, max_length=cfg.max_length, max_query_length=cfg.max_query_length,
                     input_template=cfg.input_template, label_tokens=tuple(cfg.label_tokens),
                     passage_format=cfg.passage_format, similarity_scale=cfg.similarity_scale)


def serving_engine(model, tokenizer, spec: ModelSpec, label_ids, device):
    """The serving engine (:func:`inference.engine.new_engine`) over ``model``, without changing it
    (no layer is swapped: the unpadded BERT path is a wrapper)."""
    from inference.engine import new_engine

    return new_engine(model, tokenizer, spec, device, label_ids, first_token_layer=False, unpadded=device.type == "cpu")


def serving_logits(engine, spec: ModelSpec, pairs) -> np.ndarray:
    """The logits of ``pairs`` as the export will score them."""
    return engine.logits([p.query for p in pairs], [passage_text(p.passage, spec.passage_format) for p in pairs],
                         progress=True, desc="calibration")[0]


def _meta_info(dataset_dir: str | None, train_file: str) -> dict[str, Any]:
    for base in ([Path(dataset_dir)] if dataset_dir else []) + [Path(train_file).parent.parent, Path(train_file).parent]:
        meta = base / "meta.json"
        if meta.exists():
            info = json.loads(meta.read_text(encoding="utf-8"))
            return {"meta_file": str(meta), "meta_sha256": file_sha256(meta), "counts": info.get("counts")}
    return {}


def mix_provenance(mix: Mix, calib_pairs) -> dict[str, Any]:
    """``training.data.sources`` of the manifest: per train_mix source, its files and hashes, the
    examples it had and gave, its weight, and its pairs in the calibration (dev) set."""
    dev_counts: dict[str, int] = {}
    for p in calib_pairs:
        dev_counts[p.metadata[MIX_TAG]] = dev_counts.get(p.metadata[MIX_TAG], 0) + 1
    out = {}
    for s in mix.sources:
        info: dict[str, Any] = {"train_file": s.train_file, "train_sha256": file_sha256(s.train_file)}
        if s.dev_ratio:
            info.update(dev_ratio=s.dev_ratio, held_out_queries=s.held_out_queries)
        else:
            info.update(dev_file=s.dev_file, dev_sha256=file_sha256(s.dev_file) if s.dev_file else None)
        info.update(weight=s.weight, share=s.weight / mix.total_weight, examples_read=s.examples_read,
                    examples_available=len(s.examples), examples_taken=s.taken, repeats=s.repeats,
                    dev_pairs=dev_counts.get(s.name, 0), **_meta_info(s.dataset_dir, s.train_file))
        out[s.name] = info
    return out


def metrics_by_source(cfg: TrainConfig, decision, probs: np.ndarray, labels: np.ndarray, ds: EncodedPairs,
                      names: list[str]) -> dict[str, Any]:
    """The task's dev metrics on each train_mix source's share of the calibration pairs (calibrated
    scores, the decision fitted on the pooled dev); a source whose pairs are all of one class is
    skipped and noted."""
    by, skipped = {}, {}
    for name in names:
        idx = np.asarray([i for i, s in enumerate(ds.sources) if s == name], dtype=np.int64)
        pos = int((labels[idx] >= 0.5).sum())
        if len(idx) == 0 or pos in (0, len(idx)):
            skipped[name] = ("no dev pairs" if len(idx) == 0 else
                             f"{len(idx)} dev pairs, all {'positive' if pos else 'negative'} (metrics need both classes)")
            logger.info("dev metrics of source %r skipped: %s", name, skipped[name])
            continue
        view = SimpleNamespace(group_ids=[ds.group_ids[i] for i in idx],
                               sentence_index=[ds.sentence_index[i] for i in idx])
        by[name] = dev_metrics(cfg, decision, probs[idx], labels[idx], view)
        logger.info("dev metrics of source %r: %d pairs (%d positive), auc %s, f1 %.4f", name, len(idx), pos,
                    "n/a" if by[name]["auc"] is None else f"{by[name]['auc']:.4f}", by[name]["f1"])
    out: dict[str, Any] = {"dev_by_source": by}
    if skipped:
        out["dev_by_source_skipped"] = skipped
    return out


def example_passages(examples) -> Any:
    """Every passage of training examples: a group's positives and negatives, a pair's passage."""
    for e in examples:
        if hasattr(e, "positives"):
            yield from e.positives
            yield from e.negatives
        else:
            yield e.passage


def fit_lexical(train_examples, calib_pairs, logits: np.ndarray, labels: np.ndarray, passage_format: str,
                mix: Mix | None = None) -> tuple[LexicalFeature, np.ndarray, dict[str, Any]]:
    """The export's lexical feature: document frequencies of the distinct passages of the training
    examples and the dev pairs (as the model sees them), its weight fitted on the dev ``logits``.
    With a ``mix``, each source's dev pairs weigh in the fit by the source's share of the mix, so
    that the source with the largest dev split does not set the weight alone. Returns the feature,
    its dev scores (unweighted) and the fit's report."""
    dev_texts = [passage_text(p.passage, passage_format) for p in calib_pairs]
    feature = LexicalFeature.from_corpus([passage_text(p, passage_format) for p in example_passages(train_examples)]
                                         + dev_texts)
    lex = feature.scores([p.query for p in calib_pairs], dev_texts)
    feature.weight, info = fitting.fit_lexical_weight(logits, lex, labels, mix_sample_weight(calib_pairs, mix))
    info.update(corpus_passages=feature.documents, terms=len(feature.df),
                pairs_weighted_by="the source's share of the mix" if mix is not None else "equally")
    logger.info("lexical feature: %d distinct passages, %d terms, weight %.4f", feature.documents, len(feature.df),
                feature.weight)
    return feature, lex, info


def mix_sample_weight(calib_pairs, mix: Mix | None) -> list[float] | None:
    """Per dev pair, its source's share of the mix over the source's dev pairs (None without a mix)."""
    if mix is None:
        return None
    share = {s.name: s.weight / mix.total_weight for s in mix.sources}
    count = Counter(p.metadata[MIX_TAG] for p in calib_pairs)
    return [share[p.metadata[MIX_TAG]] / count[p.metadata[MIX_TAG]] for p in calib_pairs]


def withheld_queries(query_ids: Sequence[str], share: float, seed: int) -> set[str]:
    """The dev queries whose positives corpus mode's fit withholds: ``share`` of them, by a seeded hash."""
    import hashlib

    return {q for q in dict.fromkeys(query_ids)
            if int(hashlib.sha256(f"{seed}:{q}:withheld".encode("utf-8")).hexdigest()[:8], 16) < share * 0x100000000}


def fit_corpus_norm(cfg: TrainConfig, engine, reference_texts: list[str], calib_pairs, calib_ds, logits: np.ndarray,
                    lex: np.ndarray | None, labels: np.ndarray, mix: Mix | None) -> tuple[CorpusNorm, dict]:
    """Corpus mode (:mod:`inference.corpus_norm`): ``r(q)`` of each dev query against
    ``reference_texts`` (the training and dev passages: the corpus the dev queries were mined from),
    the weights of ``r(q)`` and of the lexical term fitted together on the model's dev ``logits``,
    then that mode's calibration and decision. A retrieval miss is part of what the mode must
    handle: for ``corpus_norm_withheld`` of the dev queries (a seeded hash) the positives leave the
    corpus and the pairs, so the fit also sees queries with nothing to find. Returns the section and
    its dev metrics (on those same pairs)."""
    key = [(p.metadata.get(MIX_TAG), p.query_id) for p in calib_pairs]
    withheld = withheld_queries([f"{s}\x00{q}" for s, q in key], cfg.corpus_norm_withheld, cfg.seed)
    out = np.array([f"{s}\x00{q}" in withheld for s, q in key])
    pos = np.asarray(labels) >= 0.5
    texts = [passage_text(p.passage, cfg.passage_format) for p in calib_pairs]
    row = {t: i for i, t in enumerate(reference_texts)}
    missing: dict[str, set[int]] = {}  # query -> reference rows of its withheld positives
    for i in np.flatnonzero(out & pos):
        if texts[i] in row:
            missing.setdefault(calib_pairs[i].query, set()).add(row[texts[i]])
    reference = engine.vectors(reference_texts, "passage")[0]
    queries = [p.query for p in calib_pairs]
    uniq = list(dict.fromkeys(queries))
    qv = engine.vectors(uniq, "query")[0]
    offsets = dict(zip(uniq, top_k_mean(qv, reference, cfg.corpus_norm_k)))
    at = {q: i for i, q in enumerate(uniq)}
    for q, rows in missing.items():  # without its positives: the query's nearest passages are others
        keep = np.ones(len(reference), dtype=bool)
        keep[list(rows)] = False
        offsets[q] = top_k_mean(qv[at[q]][None], reference[keep], cfg.corpus_norm_k)[0]
    r = np.array([offsets[q] for q in queries])
    fit_rows = np.flatnonzero(~(out & pos))  # the withheld positives are not there to be scored
    sub = [calib_pairs[i] for i in fit_rows]
    y, z0, rr = np.asarray(labels)[fit_rows], np.asarray(logits)[fit_rows], r[fit_rows]
    lx = None if lex is None else np.asarray(lex)[fit_rows]
    features = {"offset": (rr, -1)}
    if lx is not None:
        features["lexical"] = (lx, 1)
    weights, fit = fitting.fit_feature_weights(z0, features, y, mix_sample_weight(sub, mix))
    weight, lexical_weight = -weights["offset"], weights.get("lexical", 0.0)
    z = combine(z0, lx, rr, weight, lexical_weight)
    calibration = fitting.fit_calibration(z, y, cfg.calibration)
    probs = calibration.apply(z)
    decision = TRAINING_TASKS[cfg.TASK].fit_decision(cfg, probs, y)
    info = {**fit, "reference_passages": len(reference_texts), "dev_queries": len(uniq),
            "withheld_share": cfg.corpus_norm_withheld, "queries_withheld": len(withheld),
            "positives_withheld": int((out & pos).sum()), "fit_pairs": len(fit_rows),
            "pairs_weighted_by": "the source's share of the mix" if mix is not None else "equally",
            **fitting.calibration_report(z, y, calibration)}
    logger.info("corpus mode: r(q) over %d reference passages (k %d; positives of %d of %d dev queries withheld): "
                "weight %.4f, lexical weight %.4f; dev log loss %.4f -> %.4f", len(reference_texts), cfg.corpus_norm_k,
                len(withheld), len(uniq), weight, lexical_weight, fit["dev_log_loss_without"], fit["dev_log_loss_with"])
    cn = CorpusNorm(k=cfg.corpus_norm_k, weight=weight, lexical_weight=lexical_weight, calibration=calibration,
                    thresholds=decision, info=info)
    ids = [calib_ds.group_ids[i] for i in fit_rows]
    return cn, dev_metrics(cfg, decision, probs, y, SimpleNamespace(group_ids=ids))


#: the file in output_dir that records what its checkpoints were trained with
RUN_RECIPE = "run_recipe.json"
#: settings that may change between a run and its resumption: where things go, logging, how long it
#: trains, and what happens after training (calibration, the decision, the export)
RESUMABLE_CHANGES = frozenset({
    "output_dir", "export_dir", "resume_from_checkpoint", "report_to", "run_name", "logging_steps", "eval_steps",
    "save_steps", "save_total_limit", "dataloader_num_workers", "per_device_eval_batch_size", "max_steps",
    "num_train_epochs", "max_dev_examples", "max_calibration_examples", "min_dev_pairs", "calibration",
    "threshold_rule", "threshold_target", "threshold", "merge_lora", "corpus_norm", "corpus_norm_k",
    "corpus_norm_withheld",
})


def run_recipe(cfg: TrainConfig) -> dict[str, Any]:
    """What a run's checkpoints depend on: the config without :data:`RESUMABLE_CHANGES`."""
    return {k: v for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES}


def check_resumable(cfg: TrainConfig, checkpoint: str) -> None:
    """Refuse to resume ``checkpoint`` (found by ``resume_from_checkpoint: auto``) when output_dir's
    checkpoints were trained with another recipe: a changed dataset, model or loss would otherwise
    continue the old run silently and export its weights as the new recipe's."""
    path = Path(cfg.output_dir) / RUN_RECIPE
    if not path.is_file():
        logger.warning("%s: no %s beside the checkpoints (a run from before it was recorded): resuming without "
                       "checking that they come from this recipe", cfg.output_dir, RUN_RECIPE)
        return
    before = json.loads(path.read_text(encoding="utf-8"))
    now = json.loads(json.dumps(run_recipe(cfg)))  # tuples as lists, as the file holds them
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    if changed:
        raise ConfigError(f"output_dir {cfg.output_dir} holds checkpoints ({Path(checkpoint).name}) of another recipe "
                          f"(differs in: {', '.join(changed)}); resuming would continue that run. Give another "
                          "output_dir, remove its checkpoints, or set resume_from_checkpoint to null (start fresh) "
                          "or to a checkpoint path (resume it anyway)")


def train_model(cfg: TrainConfig) -> TrainResult:
    """Train the model of ``cfg``'s task, calibrate it and fit its decision on dev, and export it."""
    from accelerate import PartialState
    from transformers import AutoTokenizer, set_seed

    state = PartialState()
    check_launch(state)
    backbone = choose_backbone(cfg.model_name_or_path)
    model_path = resolve_model_path(backbone)
    spec = build_spec(cfg, model_path)
    if cfg.corpus_norm and (spec.head != "bi-encoder" or cfg.TASK != "evaluator"):  # before any training
        raise ConfigError(f"config 'corpus_norm': needs an evaluator with the bi-encoder head (query vectors), "
                          f"not a {cfg.TASK} with {spec.head!r}")
    set_seed(cfg.seed)

    # --- data ------------------------------------------------------------------------------
    # one training file and one dev file, or a weighted mix of sources with their pooled dev pairs
    mix = load_mix(cfg) if cfg.train_mix else None
    if mix is None:
        train_file, dev_file = resolve_data_files(cfg)

        def dev_sample(limit):
            return load_pairs(dev_file, limit, cfg.seed, whole_queries=True)
    else:
        train_file = dev_file = "train_mix"

        def dev_sample(limit):  # whole queries of a source; two sources may share query ids
            return sample_pairs(mix.dev_pairs, limit, cfg.seed, whole_queries=True,
                                key=lambda p: (p.metadata[MIX_TAG], p.query_id))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    label_ids = label_token_ids(tokenizer, spec.label_tokens) if spec.head == "seq2seq" else None
    encoder = PairEncoder(tokenizer, spec)
    dev_pairs = dev_sample(cfg.max_dev_examples)
    dev_pos, _ = check_labels([p.label for p in dev_pairs], "the dev split", dev_file)
    if spec.head == "bi-encoder" and cfg.loss != "group-ce" and cfg.max_steps != 0:
        logger.warning("bi-encoder head with the pointwise loss %r: its logit (%g x cosine) has no bias, so the loss "
                       "pulls negative pairs below cosine 0 and reshapes the embedding space; group-ce (a softmax "
                       "over each query's passages) is the loss this head is meant for", cfg.loss, spec.similarity_scale)
    if cfg.loss == "group-ce":
        groups = mix.examples if mix else load_groups(train_file, cfg.group_size, cfg.max_train_examples, cfg.seed)
        train_ds = EncodedGroups(groups, encoder)
        n_train = len(groups)
    else:
        pairs = mix.examples if mix else load_pairs(train_file, cfg.max_train_examples, cfg.seed)
        check_labels([p.label for p in pairs], "the training set", train_file)
        train_ds = EncodedPairs(pairs, encoder)
        n_train = len(pairs)
        soft = sum(1 for y in train_ds.labels if 0.0 < y < 1.0)
        if soft:
            logger.info("train: %d of %d pairs have soft labels (trained as given, loss %s)", soft, n_train, cfg.loss)
    dev_ds = EncodedPairs(dev_pairs, encoder)
    calib_pairs = dev_pairs
    if cfg.max_calibration_examples == cfg.max_dev_examples:
        calib_ds = dev_ds
    else:
        calib_pairs = dev_sample(cfg.max_calibration_examples)
        check_labels([p.label for p in calib_pairs], "the calibration part of the dev split", dev_file)
        calib_ds = EncodedPairs(calib_pairs, encoder)
    logger.info("train: %d examples from %s (%d passages truncated); dev: %d pairs (%d positive) from %s; "
                "calibration: %d pairs", n_train, train_file, train_ds.stats.passages_truncated, len(dev_ds), dev_pos,
                dev_file, len(calib_ds))

    # --- model -----------------------------------------------------------------------------
    model, info = load_backbone(model_path, spec.head, output_loading_info=True,
                                **attention_dropout_kwargs(model_path, cfg.attention_dropout))
    fresh_head = any(k.split(".")[0] in ("classifier", "score", "classification_head", "lm_head")
                     for k in info.get("missing_keys") or [])
    head_lr = cfg.head_learning_rate if fresh_head or spec.head == "seq2seq" else None
    if cfg.head_learning_rate and head_lr is None:
        logger.info("the scoring head comes trained with %s: head_learning_rate is not applied", backbone)
    if tokenizer.pad_token_id is None:
        raise DataProblem(f"tokenizer of {model_path} has no pad token")
    if spec.head == "bi-encoder":  # mean pooling: a pooler layer (BERT's) takes no part; DDP needs it frozen
        for name, p in model.named_parameters():
            if name.split(".")[0] == "pooler":
                p.requires_grad_(False)
    if cfg.use_lora:
        model = apply_lora(model, cfg, spec.head)

    # --- train -----------------------------------------------------------------------------
    args = training_arguments(cfg, has_dev=True)
    trainer = PairTrainer(
        model=model, args=args, train_dataset=train_ds, eval_dataset=dev_ds, data_collator=Collator(tokenizer.pad_token_id),
        processing_class=tokenizer, compute_metrics=make_compute_metrics(dev_ds.group_ids), head=spec.head,
        loss_name=cfg.loss, label_ids=label_ids, pos_weight=cfg.pos_weight, head_learning_rate=head_lr,
        group_by_length=cfg.group_by_length, similarity_scale=spec.similarity_scale,
    )
    resume = cfg.resume_from_checkpoint
    if resume == "auto":
        from transformers.trainer_utils import get_last_checkpoint

        resume = get_last_checkpoint(cfg.output_dir) if Path(cfg.output_dir).is_dir() else None
        if resume:
            check_resumable(cfg, resume)
            logger.info("resuming from %s", resume)
    if trainer.is_world_process_zero() and cfg.max_steps != 0:
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
        write_json(Path(cfg.output_dir) / RUN_RECIPE, run_recipe(cfg))
    if cfg.max_steps == 0:  # calibrate and export the backbone as it is
        logger.info("max_steps 0: no training; the model is calibrated on dev and exported as loaded")
        train_out = SimpleNamespace(global_step=0, training_loss=None, metrics={})
    else:
        train_out = trainer.train(resume_from_checkpoint=resume)

    # --- calibrate on dev, fit the decision, export --------------------------------------------
    result = TrainResult(None, {}, None)
    if not trainer.is_world_process_zero():
        return result
    # the dev logits as the export will score them: through the serving engine (exact up to float
    # rounding, and on the CPU about twice as fast as Trainer.predict's padded batches)
    engine = serving_engine(trainer.model, tokenizer, spec, label_ids, trainer.args.device)
    logits = serving_logits(engine, spec, calib_pairs)
    labels = np.asarray(calib_ds.labels, dtype=np.float64)
    if not np.isfinite(logits).all():
        raise FloatingPointError("non-finite dev scores after training (diverged); lower the learning rate or use bf16/fp32")
    lexical = lex = corpus_norm = None
    corpus = [e for src in mix.sources for e in src.examples] if mix else (groups if cfg.loss == "group-ce" else pairs)
    model_logits = logits
    if cfg.lexical_feature:
        lexical, lex, lex_info = fit_lexical(corpus, calib_pairs, logits, labels, spec.passage_format, mix)
        logits = logits + lexical.weight * lex
    if cfg.corpus_norm:
        reference = list(dict.fromkeys([passage_text(p, spec.passage_format) for p in example_passages(corpus)]
                                       + [passage_text(p.passage, spec.passage_format) for p in calib_pairs]))
        corpus_norm, cn_metrics = fit_corpus_norm(cfg, engine, reference, calib_pairs, calib_ds, model_logits, lex, labels,
                                                  mix)
    calib = fitting.fit_calibration(logits, labels, cfg.calibration)
    probs = calib.apply(logits)
    decision = TRAINING_TASKS[cfg.TASK].fit_decision(cfg, probs, labels)
    raw_probs = sigmoid(logits)
    metrics = dev_metrics(cfg, decision, probs, labels, calib_ds)
    raw_metrics = evaluate_scores(raw_probs, labels, 0.5, None, query_ids=calib_ds.group_ids, actions=False)
    calib_info = {**fitting.calibration_report(logits, labels, calib), "fitted_on": "dev", "dev_pairs": len(labels)}
    if lexical is not None:
        calib_info["lexical_fit"] = lex_info
    all_metrics = {"dev": metrics, "dev_raw_at_0.5": raw_metrics}
    if corpus_norm is not None:
        all_metrics["dev_corpus_mode"] = cn_metrics
    if mix is None:
        data_info = {"train_file": train_file, "train_sha256": file_sha256(train_file), "train_examples": n_train,
                     "dev_file": dev_file, "dev_sha256": file_sha256(dev_file), "dev_pairs": len(labels),
                     "passages_truncated": train_ds.stats.passages_truncated, **_meta_info(cfg.dataset_dir, train_file)}
    else:
        data_info = {"sources": mix_provenance(mix, calib_pairs), "mix_size": cfg.mix_size,
                     "train_examples": n_train, "dev_pairs": len(labels),
                     "passages_truncated": train_ds.stats.passages_truncated}
        all_metrics.update(metrics_by_source(cfg, decision, probs, labels, calib_ds, [s.name for s in mix.sources]))

    manifest = Manifest(
        task=cfg.TASK,
        model=ModelInfo(backbone=backbone, head=spec.head),
        spec=spec,
        calibration=calib,
        thresholds=decision,
        calibration_info=calib_info,
        metrics=all_metrics,
        package={"name": "crag-evaluators", "version": package_version(), "git_commit": git_commit()},
        sentence_max_chars=cfg.sentence_max_chars if isinstance(cfg, ExtractorConfig) else None,
        corpus_norm=corpus_norm,
        training={
            "config": cfg.to_dict(),
            "global_step": train_out.global_step,
            "world_size": trainer.args.world_size,
            "train_loss": train_out.training_loss,
            "train_runtime": train_out.metrics.get("train_runtime"),
            "best_checkpoint": trainer.state.best_model_checkpoint,
            "best_metric": trainer.state.best_metric,
            "data": data_info,
        },
    )

    def contents(tmp: Path) -> dict[str, Any]:
        info = save_model_weights(trainer.model, tokenizer, tmp, merge_lora=cfg.merge_lora)
        if lexical is not None:
            manifest.lexical = lexical.save(tmp)
        write_plots(tmp / "plots", probs, labels, plot_thresholds(decision),
                    getattr(decision, "precision_target", None), raw_probs=raw_probs)
        return info

    out = write_export(cfg.export_dir, contents, manifest)
    logger.info("%s export written to %s", cfg.TASK, out)
    return TrainResult(out, metrics, manifest, trainer.model)


train_evaluator = train_model  # the name of earlier versions
