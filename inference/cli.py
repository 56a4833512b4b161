"""``python -m inference``: score with an export of any task, or evaluate it on labelled data.

    python -m inference score --model DIR --input pairs.jsonl --output scores.jsonl \\
        [--format F] [--overwrite] [--skip-bad] [--skip-empty-passages] [--batch-tokens N] [--bf16]
    python -m inference evaluate --model DIR --data dev.pairs.jsonl --output-json metrics.json \\
        [--format F] [--plots DIR] [--two-tier] [--skip-empty-passages]

(``python -m inference serve``, the exports over HTTP, is registered here too; its options and
start-up are in :mod:`inference.serving.command`.)

What a row's output and the metrics are depends on the export's task:

* ``evaluator``: per pair the calibrated score, raw score and CRAG action; metrics accuracy (at
  theta_high), precision, recall, F1, AUC, ECE, MRR@10/nDCG@10 and the action table;
* ``answer_classifier``: per pair the calibrated score and ``has_answer`` at the export's threshold;
  the same pair metrics at that threshold (no action table);
* ``extractor``: per (query, passage) the key sentences (text, offsets, score); metrics ``p@1``,
  ``r@3`` and ``mrr`` over rows with gold sentences (``sentences`` format), or over our extractor
  sentence pairs (``pairs``, grouped by passage).

Input (``--format auto``, the default, looks at the file's first line,
:func:`data_prep.readers.simple.detect_format`), read by :func:`data_prep.readers.rows.open_pair_rows`:

* ``pairs``: our :class:`~data_prep.records.LabelledPair` JSONL (``docs/data.md``);
* ``simple``: one ``{"query": str, "passage": str | {"title", "text", "id"}}`` object a line, with
  optional ``label`` (0..1; ``evaluate`` needs it), ``query_id`` and ``passage_id``;
* ``sentences`` (extractor evaluation): ``{"query", "passage", "gold_sentences": [text, ...]}``, or
  ``{"query", "sentences": [text, ...], "gold": [index, ...]}`` to score the given sentences;
* ``crag-evaluator``: CRAG's ``question [SEP] passage<TAB>label`` file;
* any other reader format by name (``--format popqa``, ``beir`` with ``--split``, ...): positives
  are label 1, negatives label 0.

Bad input: a row that cannot be read, or whose query or passage is empty, is a bad row, reported as
``file:line: what is wrong`` (the run stops; nothing is written). With ``--skip-bad`` such rows are
skipped, counted, and kept unchanged in ``<output>.rejects/``. Empty queries and passages are
*rejected*, not scored: there is no relevance to score. The one exception is CRAG's evaluator
file, whose official test split has lines with an empty passage (``question [SEP] <TAB>0``: the
retrieval returned nothing). The paper scores every line, and so do we by default: the query with
an empty passage (a BERT cross-encoder sees ``[CLS] query [SEP] [SEP]``; an extractor finds no
sentence in it); ``--skip-empty-passages`` leaves them out.
Either way they are counted: ``"empty_passages": {"n", "policy": "scored" | "skipped"}`` in the
metrics JSON and ``meta.json``, and in the printed summary; metrics are over every line scored.
A passage longer than the model's limit is truncated on the passage side (never the query) and
counted in the summary.

Corpus mode (``--reference self|FILE``; an evaluator trained with ``corpus_norm: true``,
:mod:`inference.corpus_norm`): each query's scores are read against a reference corpus, with that
mode's calibration and thresholds. ``self`` is the input's own distinct passages (a first pass over
the file: right for a file that holds each query's retrieved candidates, as CRAG's does); a path
is the corpus the queries search (our passage JSONL or a BEIR ``corpus.jsonl``). The summary's
``corpus_mode`` says which (null: pair by pair, the default, as ``predict`` scores).

Outputs are written atomically (a crash leaves the previous file or none) and an existing output
is refused unless ``--overwrite``. ``score`` writes ``<output>.meta.json`` (counts, truncations,
rejects, thresholds, speed) beside its JSONL. One ``score`` writes an output at a time: a second one
on the same ``--output`` is refused (exit code 2) while the first runs (``<output>.lock``,
:mod:`data_prep.locking`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
from tqdm import tqdm

from data_prep.cluster import add_ray_args, ray_options
from data_prep.io import (DataError, MissingInputError, Rejects, atomic_write, iter_json_lines, rejected_line,
                          require_path, write_json)
from data_prep.locking import locks_output
from data_prep.readers.rows import READER_OPTIONS, PairRow, PairRows, open_pair_rows, resolve_format
from data_prep.readers.simple import SENTENCES, SentenceRow, read_sentence_rows
from data_prep.records import Passage

from .decisions import action_of
from .loading import ExportError, load
from .metrics import evaluate_scores, expected_calibration_error, extraction_metrics, roc_auc
from .serving.command import register as register_serve

logger = logging.getLogger(__name__)

Row = PairRow


# --------------------------------------------------------------------------------------------
# input


def input_format(args: argparse.Namespace, path: Path) -> str:
    return resolve_format(path, args.format)


def empty_passage_policy(args: argparse.Namespace) -> str:
    """CRAG evaluator lines with an empty passage: scored (``keep``, the default: the paper scores
    every line) or left out (``--skip-empty-passages``); counted either way."""
    return "skip" if getattr(args, "skip_empty_passages", False) else "keep"


def open_rows(args: argparse.Namespace, path: Path, rejects: Rejects | None, fmt: str | None = None) -> tuple[str, PairRows]:
    """The input's format and its rows (:func:`data_prep.readers.rows.open_pair_rows` with the
    command line's format, reader options and empty-passage policy)."""
    fmt = fmt or input_format(args, path)
    options = {k: getattr(args, k, None) for k in READER_OPTIONS}
    if fmt == SENTENCES:
        given = [k for k, v in options.items() if v not in (None, False)]
        if given:
            raise ValueError(f"format {fmt!r} does not take {', '.join('--' + k.replace('_', '-') for k in given)}")
        raise ValueError(f"{path}: format 'sentences' (gold key sentences) is for evaluating an extractor export")
    return open_pair_rows(path, fmt, rejects, empty_passages=empty_passage_policy(args), **options)


def empty_passage_summary(rows: PairRows) -> dict[str, Any]:
    return {"n": rows.empty_passages, "policy": "skipped" if rows.policy == "skip" else "scored"}


def chunks(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    buf: list[Row] = []
    for r in rows:
        buf.append(r)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


# --------------------------------------------------------------------------------------------
# corpus mode


def reference_passages(path: Path, rejects: Rejects | None = None) -> Iterator[Passage]:
    """The passages of a reference corpus file: our passage JSONL (``{"id", "title", "text"}``) or a
    BEIR ``corpus.jsonl`` (``{"_id", "title", "text"}``), told apart by the first record."""
    for _, obj, _ in iter_json_lines(path, Rejects(skip_bad=True)):
        beir = "_id" in obj
        break
    else:  # only bad lines: let the reader name the first one
        beir = False
    if beir:
        from data_prep.readers.beir import read_corpus

        return read_corpus(path, rejects)
    from data_prep.readers.ours import read_passages

    return read_passages(path, rejects)


def use_reference(args: argparse.Namespace, model, inp: Path, rdir: Path) -> dict[str, Any] | None:
    """Put an evaluator in corpus mode when ``--reference`` asks for it (:mod:`inference.corpus_norm`):
    ``self`` takes the input's distinct non-empty passages (a first pass over the file, bad rows
    skipped or raised as in the scoring pass, which counts them), a path a passages file (with
    ``--skip-bad`` its bad rows are skipped, counted in the section's ``rejected`` and kept in
    ``rdir/reference/``). Returns the summary's ``corpus_mode`` section (None: pair by pair)."""
    spec = getattr(args, "reference", None)
    has_mode = getattr(model.manifest, "corpus_norm", None) is not None
    if spec is None:
        if has_mode:
            logger.info("this export has a corpus mode: --reference self (or a passages file) reads each query's "
                        "scores against a corpus; scoring pair by pair")
        return None
    if not has_mode:
        raise ValueError(f"{args.model}: --reference needs an export with a corpus mode (a bi-encoder evaluator "
                         "trained with corpus_norm: true); this one scores pairs only")
    t0 = time.time()
    texts: dict[str, None] = {}
    if spec == "self":
        first = Rejects(skip_bad=True) if args.skip_bad else None  # counted once, by the scoring pass
        _, rows = open_rows(args, inp, first)
        for i, r in enumerate(rows, 1):
            if r.passage != "":
                texts[model.passage_text(r.passage, f"{inp}: pair {i}")] = None
        source = "self"
        rejected = None
    else:
        ref = require_path(spec, "reference corpus")
        skipped = Rejects(skip_bad=True, out_dir=rdir / "reference") if args.skip_bad else None
        try:
            for p in reference_passages(ref, skipped):
                texts[model.passage_text(p, f"{ref}: passage {p.id}")] = None
        finally:
            if skipped is not None:
                skipped.close()
        source = str(ref)
        rejected = skipped.summary() if skipped is not None else {"total": 0, "by_reason": {}}
        if rejected["total"]:
            rejected["kept_in"] = str(rdir / "reference")
    if not texts:
        raise DataError(inp if spec == "self" else spec, None, "no passages for the reference corpus", "empty")
    k = model.manifest.corpus_norm.k
    if len(texts) < 20 * k:
        logger.warning("the reference corpus has %d passages: r(q) over so few is dominated by each query's own "
                       "candidates (corpus mode wants the corpus the queries search)", len(texts))
    model.use_corpus(list(texts), progress=not args.no_progress)
    return {"reference": source, "passages": len(texts), "k": k, "seconds": round(time.time() - t0, 3),
            **({"rejected": rejected} if rejected is not None else {}),
            "formula": "logit = model_logit + lexical_weight * lexical - weight * r(q); r(q) = mean of the k "
                       "largest cosines of the query to the reference passages"}


def _corpus_note(summary: dict[str, Any]) -> str:
    c = summary.get("corpus_mode")
    if not c:
        return ""
    ref = "the input's own passages" if c["reference"] == "self" else c["reference"]
    bad = (c.get("rejected") or {}).get("total")
    skipped = f"; {bad} bad rows skipped, kept in {c['rejected']['kept_in']}" if bad else ""
    return f"; corpus mode against {c['passages']} passages ({ref}{skipped})"


# --------------------------------------------------------------------------------------------
# shared steps


def _refuse_existing(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise ValueError(f"output exists: {path} (pass --overwrite to replace it)")


def _rejects_for(args: argparse.Namespace, out: Path) -> tuple[Rejects | None, Path]:
    rdir = out.parent / f"{out.name}.rejects"
    if not args.skip_bad:
        return None, rdir
    if rdir.is_dir():  # left by an earlier run of this output: start clean
        shutil.rmtree(rdir)
    return Rejects(skip_bad=True, out_dir=rdir), rdir


def _load_model(args: argparse.Namespace):
    return load(args.model, device=args.device, dtype="bf16" if args.bf16 else None, trust_pickle=args.trust_pickle,
                batch_tokens=args.batch_tokens)


def _score_rows(model, rows: list[Row]) -> tuple[np.ndarray, np.ndarray, Any]:
    """Calibrated and raw probabilities of ``rows`` and the truncation counts.

    A kept empty passage (``""``, a CRAG line whose retrieval returned nothing) is scored as the
    query with nothing in the passage's place of the export's input template (a BERT cross-encoder
    sees ``[CLS] query [SEP] [SEP]``): the model's own checks (``model.texts`` /
    ``model.passage_text``) refuse an empty passage, so it goes to ``score_texts`` as it is."""
    return model.score_texts(*_pair_texts(model, rows))


def _pair_texts(model, rows: list[Row]) -> tuple[list[str], list[str]]:
    """The checked query and passage texts of ``rows`` (a kept empty passage stays ``""``)."""
    queries, passages = [], []
    for i, r in enumerate(rows):
        queries.append(model.check_query(r.query, f"pair {i}"))
        passages.append("" if r.passage == "" else model.passage_text(r.passage, f"pair {i}"))
    return queries, passages


def _scored_chunks(model, args: argparse.Namespace, rows: Iterable[Row], ray=None) -> Iterator[tuple[list[Row], Any]]:
    """``(rows, result)`` in input order: ``result`` is ``(probs, raw, stats)`` (:func:`_score_rows`)
    or, for an extractor, each row's key sentences as dicts (none for an empty passage). In chunks
    of ``--chunk-size`` here, or in blocks scored by a Ray actor pool (:mod:`inference.distributed`)."""
    extractor = model.task == "extractor"
    if ray is None:
        for chunk in chunks(rows, args.chunk_size):
            if not extractor:
                yield chunk, _score_rows(model, chunk)
                continue
            full = [r for r in chunk if r.passage != ""]
            got = dict(zip(map(id, full), model.extract_many([(r.query, r.passage) for r in full], args.top_k,
                                                             args.min_score)))
            yield chunk, [[k.to_dict() for k in got.get(id(r), [])] for r in chunk]
        return
    from .distributed import LoadOptions, encode_passage, score_blocks

    every = list(rows)  # checked here, as without Ray: the same errors and rejects
    if extractor:
        queries, passages = [r.query for r in every], [encode_passage(r.passage) for r in every]
    else:
        queries, passages = _pair_texts(model, every)
    opts = LoadOptions(str(args.model), args.device, "bf16" if args.bf16 else None, args.trust_pickle, args.batch_tokens,
                       args.top_k, args.min_score)
    for lo, hi, result in score_blocks(ray, opts, queries, passages, args.chunk_size):
        yield every[lo:hi], result


def _thresholds(model, args: argparse.Namespace) -> tuple[float, float | None, str]:
    """The decision threshold(s) in force: ``(theta_high, theta_low)`` for an evaluator,
    ``(threshold, None)`` for an answer classifier."""
    source = "override" if args.theta_high is not None or args.theta_low is not None else "manifest"
    if model.task == "answer_classifier":
        if args.theta_low is not None or args.two_tier:
            raise ValueError("an answer classifier has one threshold: use --threshold (or --theta-high), not "
                             "--theta-low / --two-tier")
        t = model.threshold if args.theta_high is None else args.theta_high
        return float(t), None, source
    hi, lo = model.thresholds(args.theta_high, args.theta_low, args.two_tier)
    return hi, lo, source


def _progress(desc: str, disable: bool, unit: str = " pairs"):
    return tqdm(desc=desc, unit=unit, disable=True if disable else None, mininterval=1.0)


def _common_summary(model, args, rejects, rdir) -> dict[str, Any]:
    return {
        "model": str(args.model), "task": model.task, "max_length": model.spec.max_length,
        "rejected": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
        "rejects_dir": str(rdir) if rejects is not None and rejects.total else None,
        "device": str(model.device), "dtype": "bf16" if model.engine.autocast_dtype is not None else "fp32",
    }


# --------------------------------------------------------------------------------------------
# score


def score_file(args: argparse.Namespace) -> dict[str, Any]:
    """Score every row of ``args.input`` into ``args.output``; returns the summary."""
    out = Path(args.output)
    _refuse_existing(out, args.overwrite)
    inp = require_path(args.input, "input file")
    ray = ray_options(args)
    if ray is not None and args.reference:
        raise ValueError("--reference (corpus mode) reads each query against the whole reference in one process: "
                         "it does not run with --ray")
    model = _load_model(args)
    extractor = model.task == "extractor"
    rejects, rdir = _rejects_for(args, out)
    corpus = use_reference(args, model, inp, rdir)
    hi, lo, source = (None, None, "manifest") if extractor else _thresholds(model, args)
    t0 = time.time()
    n = truncated = queries_truncated = sentences = 0
    decisions: dict[str, int] = {}
    try:
        fmt, rows = open_rows(args, inp, rejects)
        with atomic_write(out) as f, _progress("scoring", args.no_progress) as bar:
            for chunk, result in _scored_chunks(model, args, rows, ray):
                lines = []
                if extractor:
                    for r, ks in zip(chunk, result):
                        sentences += len(ks)
                        lines.append(json.dumps({"index": n, "query_id": r.query_id, "passage_id": r.passage_id,
                                                 "sentences": ks}, ensure_ascii=False))
                        n += 1
                else:
                    probs, raw, stats = result
                    truncated += stats.passages_truncated
                    queries_truncated += stats.queries_truncated
                    for r, s, rs in zip(chunk, probs.tolist(), raw.tolist()):
                        rec = {"index": n, "query_id": r.query_id, "passage_id": r.passage_id, "score": s, "raw_score": rs}
                        if model.task == "answer_classifier":
                            rec["has_answer"] = bool(s >= hi)
                            key = "has_answer" if rec["has_answer"] else "no_answer"
                        else:
                            rec["action"] = key = action_of(s, hi, lo)
                        decisions[key] = decisions.get(key, 0) + 1
                        if r.label is not None:
                            rec["label"] = r.label
                        lines.append(json.dumps(rec, ensure_ascii=False))
                        n += 1
                if lines:
                    f.write("\n".join(lines) + "\n")
                bar.update(len(chunk))
            if n == 0:  # inside the atomic write: nothing is left behind
                why = [f"{rejects.total} rejected"] if rejects else []
                why += [f"{rows.empty_passages} empty passages skipped"] if rows.empty_passages else []
                raise DataError(inp, None, "no rows to score" + (f" ({'; '.join(why)})" if why else ""), "empty")
    finally:
        if rejects is not None:
            rejects.close()
    seconds = time.time() - t0
    summary = {"input": str(inp), "format": fmt, "output": str(out), "rows": n, "pairs": n,
               "empty_passages": empty_passage_summary(rows), "corpus_mode": corpus,
               **_common_summary(model, args, rejects, rdir)}
    if extractor:
        d = model.decision
        summary.update({"sentences_kept": sentences,
                        "rule": {"top_k": args.top_k or d.top_k,
                                 "min_score": d.min_score if args.min_score is None else args.min_score}})
    else:
        summary.update({"passages_truncated": truncated, "queries_truncated": queries_truncated})
        if model.task == "answer_classifier":
            summary.update({"decisions": dict.fromkeys(("has_answer", "no_answer"), 0) | decisions,
                            "threshold": {"value": hi, "source": source}})
        else:
            summary.update({"actions": dict.fromkeys(("Correct", "Ambiguous", "Incorrect"), 0) | decisions,
                            "thresholds": {"theta_high": hi, "theta_low": lo, "two_tier": lo is None, "source": source}})
    summary.update({"seconds": round(seconds, 3), "pairs_per_s": round(n / seconds, 2) if seconds > 0 else None})
    write_json(out.parent / f"{out.name}.meta.json", summary)
    return summary


def _empty_note(summary: dict[str, Any]) -> str:
    e = summary["empty_passages"]
    return f"{e['n']} {e['policy']}"


@locks_output("args.output", "scores")  # one run per output, before the model loads (data_prep.locking)
def run_score(args: argparse.Namespace) -> int:
    s = score_file(args)
    if s["task"] == "extractor":
        print(f"extracted {s['sentences_kept']} key sentences from {s['rows']} passages into {s['output']} "
              f"({s['pairs_per_s']} passages/s); empty passages: {_empty_note(s)}")
    else:
        what = s.get("actions") or s.get("decisions")
        print(f"scored {s['pairs']} pairs into {s['output']} ({s['pairs_per_s']} pairs/s); "
              f"{'actions' if 'actions' in s else 'decisions'}: {', '.join(f'{k} {v}' for k, v in what.items())}; "
              f"passages truncated to {s['max_length']} tokens: {s['passages_truncated']}; "
              f"empty passages: {_empty_note(s)}{_corpus_note(s)}")
    if args.skip_bad:
        print(rejected_line(s["rejected"], s.get("rejects_dir")))
    return 0


# --------------------------------------------------------------------------------------------
# evaluate


def evaluate_file(args: argparse.Namespace) -> dict[str, Any]:
    """Metrics of the model on the labelled data of ``args.data``; written to ``args.output_json``."""
    out = Path(args.output_json)
    _refuse_existing(out, args.overwrite)
    data = require_path(args.data, "data file")
    model = _load_model(args)
    if model.task == "extractor":
        metrics = _evaluate_extractor(args, model, data, out)
    else:
        metrics = _evaluate_pairs(args, model, data, out)
    write_json(out, metrics)
    return metrics


def _evaluate_pairs(args, model, data: Path, out: Path) -> dict[str, Any]:
    rejects, rdir = _rejects_for(args, out)
    corpus = use_reference(args, model, data, rdir)
    hi, lo, source = _thresholds(model, args)
    t0 = time.time()
    probs, raw, labels, qids = [], [], [], []
    truncated = 0
    try:
        fmt, rows = open_rows(args, data, rejects)
        with _progress("evaluating", args.no_progress) as bar:
            for chunk in chunks(_labelled(rows, data), args.chunk_size):
                p, r, stats = _score_rows(model, chunk)
                probs.append(p)
                raw.append(r)
                labels.extend(row.label for row in chunk)
                qids.extend(row.query_id for row in chunk)
                truncated += stats.passages_truncated
                bar.update(len(chunk))
    finally:
        if rejects is not None:
            rejects.close()
    if not labels:
        why = f" ({rows.empty_passages} empty passages skipped)" if rows.empty_passages else ""
        raise DataError(data, None, f"no pairs to evaluate{why}", "empty")
    probs_a, raw_a = np.concatenate(probs), np.concatenate(raw)
    evaluator = model.task == "evaluator"
    metrics = evaluate_scores(probs_a, labels, hi, lo, query_ids=qids, actions=evaluator)
    if evaluator:
        metrics["thresholds"].update({"two_tier": lo is None, "source": source})
        metrics["decision_threshold"] = {
            "name": "theta_high", "value": hi,
            "rule": "a pair counts as relevant when its calibrated score >= theta_high"
                    + (" (two-tier mode: the single threshold)" if lo is None else ""),
        }
    else:
        metrics["decision_threshold"] = {"name": "threshold", "value": hi, "source": source,
                                         "rule": "a passage holds the answer when its calibrated score >= threshold"}
    metrics["raw"] = {"auc": roc_auc(raw_a, labels), "ece": expected_calibration_error(raw_a, labels)}
    metrics.update({"data": str(data), "format": fmt, "empty_passages": empty_passage_summary(rows),
                    "passages_truncated": truncated, "corpus_mode": corpus,
                    **_common_summary(model, args, rejects, rdir), "seconds": round(time.time() - t0, 3)})
    if args.plots:
        marks = {"theta_high": hi, "theta_low": lo} if evaluator else {"threshold": hi}
        target = getattr(model.decision, "precision_target", None)
        metrics["plots"] = _plots(args.plots, probs_a, raw_a, labels, marks, target)
    return metrics


def _sentence_items(args, model, data: Path, rejects, fmt: str) -> Iterator[tuple[SentenceRow, list, list[float]]]:
    """Each gold row with its predicted sentence spans (best first) and their scores."""
    if fmt == SENTENCES:
        rows = read_sentence_rows(data, rejects)
        for chunk in chunks(rows, max(1, args.chunk_size // 16)):
            split = [r for r in chunk if r.sentences is None]
            given = [r for r in chunk if r.sentences is not None]
            scored = dict(zip(map(id, split), model.score_sentences([(r.query, r.passage) for r in split])))
            if given:
                qs = [r.query for r in given for _ in r.sentences]
                ss = [s for r in given for s in r.sentences]
                for s_ in ss:
                    model.passage_text(s_, f"{data}: a given sentence")
                probs = model.score_texts(qs, ss)[0].tolist() if qs else []
                at = 0
                for r in given:
                    scored[id(r)] = ([(i, i + 1) for i in range(len(r.sentences))], probs[at: at + len(r.sentences)])
                    at += len(r.sentences)
            for r in chunk:
                sents, scores = scored[id(r)]
                spans = [(s.start, s.end) if hasattr(s, "start") else s for s in sents]
                gold = r.gold_spans if r.sentences is None else [(g, g + 1) for g in r.gold]
                order = sorted(range(len(spans)), key=lambda j: (-scores[j], j))
                yield r, gold, [spans[j] for j in order], [scores[j] for j in order]
        return
    # our extractor sentence pairs: one group per (query, parent passage)
    _, rows = open_rows(args, data, rejects, fmt)
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in _labelled(rows, data):
        parent = r.passage.metadata.get("parent_id") if hasattr(r.passage, "metadata") else None
        groups.setdefault((r.query_id, str(parent or r.passage_id)), []).append(r)
    keys = list(groups)
    for i in range(0, len(keys), max(1, args.chunk_size // 16)):
        batch = [groups[k] for k in keys[i : i + max(1, args.chunk_size // 16)]]
        flat = [r for g in batch for r in g]
        probs = _score_rows(model, flat)[0].tolist()
        at = 0
        for g in batch:
            sc = probs[at : at + len(g)]
            at += len(g)
            idx = [int(r.passage.metadata.get("sentence_index", j)) for j, r in enumerate(g)]
            gold = [(idx[j], idx[j] + 1) for j, r in enumerate(g) if r.label >= 0.5]
            if not gold:
                continue
            order = sorted(range(len(g)), key=lambda j: (-sc[j], idx[j]))
            row = SentenceRow(0, g[0].query, g[0].query_id, None, None)
            yield row, gold, [(idx[j], idx[j] + 1) for j in order], [sc[j] for j in order]


def _evaluate_extractor(args, model, data: Path, out: Path) -> dict[str, Any]:
    fmt = input_format(args, data)
    if fmt not in (SENTENCES, "pairs"):
        raise ValueError(f"{data}: an extractor is evaluated on gold key sentences (format 'sentences') or on our "
                         f"extractor sentence pairs (format 'pairs'), not {fmt!r}")
    rejects, rdir = _rejects_for(args, out)
    t0 = time.time()
    ranked, golds, top_scores = [], [], []
    try:
        with _progress("evaluating", args.no_progress, " passages") as bar:
            for _, gold, spans, scores in _sentence_items(args, model, data, rejects, fmt):
                ranked.append(spans)
                golds.append(gold)
                top_scores.append(scores[0] if scores else None)
                bar.update(1)
    finally:
        if rejects is not None:
            rejects.close()
    if not ranked:
        raise DataError(data, None, "no passages with gold sentences to evaluate", "empty")
    metrics = extraction_metrics(ranked, golds, k=3)
    metrics.update({"data": str(data), "format": fmt, "rule": "a predicted sentence counts as gold when its span "
                    "overlaps a gold sentence's span by at least half of its own length",
                    **_common_summary(model, args, rejects, rdir), "seconds": round(time.time() - t0, 3)})
    return metrics


def _labelled(rows: Iterable[Row], path: Path) -> Iterator[Row]:
    for i, r in enumerate(rows, 1):
        if r.label is None:
            raise DataError(path, None, f"pair {i} ({r.query_id}) has no label; evaluate needs labelled pairs", "missing-field")
        yield r


def _plots(folder: str, probs, raw, labels, marks: dict[str, float | None], target: float | None) -> list[str]:
    from .plots import write_plots

    return [str(Path(folder) / f) for f in write_plots(folder, probs, labels, marks, target, raw_probs=raw)]


def run_evaluate(args: argparse.Namespace) -> int:
    m = evaluate_file(args)
    if m["task"] == "extractor":
        keys = ("n", "p@1", "r@3", "mrr", "gold_sentences", "sentences")
        print(", ".join(f"{k} {m[k]:.4f}" if isinstance(m[k], float) else f"{k} {m[k]}" for k in keys))
        print(f"metrics in {args.output_json}")
        return 0
    keys = ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10")
    print(", ".join(f"{k} {m[k]:.4f}" if isinstance(m[k], float) else f"{k} {m[k]}" for k in keys if m.get(k) is not None)
          + f"; empty passages: {_empty_note(m)}{_corpus_note(m)}")
    print(f"accuracy at {m['decision_threshold']['name']} = {m['decision_threshold']['value']:.4f}; "
          f"metrics in {args.output_json}")
    return 0


# --------------------------------------------------------------------------------------------
# parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="export folder (evaluator.json, answer_classifier.json or extractor.json)")
    p.add_argument("--format", default="auto",
                   help="input format: auto (default: from the first line), pairs, simple, crag-evaluator, or any "
                        "reader format of `python -m data_prep convert`; sentences for an extractor's gold sentences")
    p.add_argument("--corpus", help="corpus file, for formats that take one separately")
    p.add_argument("--queries", help="queries file (msmarco, beir)")
    p.add_argument("--qrels", help="qrels file (msmarco, beir)")
    p.add_argument("--split", help="split name (beir, msmarco)")
    p.add_argument("--rule", choices=["title-match", "answer"], help="popqa labelling rule")
    p.add_argument("--fix-mojibake", action="store_true", help="repair UTF-8 read as Latin-1 (MS MARCO)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--skip-bad", action="store_true", help="skip bad rows; keep them in <output>.rejects/")
    p.add_argument("--skip-empty-passages", action="store_true",
                   help="crag-evaluator: leave out lines with an empty passage (default: score them, as the paper "
                        "does); counted either way")
    p.add_argument("--batch-tokens", type=int, default=None, help="padded tokens per forward pass (default per device)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast where the device supports it")
    p.add_argument("--device", default=None, help="cuda, mps, cpu, cuda:1, ... (default: CUDA, then MPS, then CPU)")
    p.add_argument("--trust-pickle", action="store_true", help="allow pickle weights (.bin/.pt): only for models you trust")
    p.add_argument("--theta-high", "--threshold", type=float, default=None,
                   help="override the manifest's theta_high (evaluator) or threshold (answer classifier)")
    p.add_argument("--theta-low", type=float, default=None, help="override the manifest's theta_low")
    p.add_argument("--two-tier", action="store_true", help="one threshold (theta_high), no Ambiguous band")
    p.add_argument("--top-k", type=int, default=None, help="extractor: sentences kept per passage (default: the manifest's)")
    p.add_argument("--min-score", type=float, default=None, help="extractor: minimum sentence score (default: the manifest's)")
    p.add_argument("--reference", default=None, metavar="self|FILE",
                   help="corpus mode (an evaluator trained with corpus_norm): read each query's scores against a "
                        "reference corpus, with that mode's calibration and thresholds: 'self' (the input's distinct "
                        "passages) or a passages file (our passage JSONL or a BEIR corpus.jsonl); default: pair by pair")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="pairs read and scored per step (memory bound; default 8192); with --ray, pairs per block sent "
                   "to an actor (default 1024): a one-process run with the same chunk size forms the same batches")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m inference", description=__doc__.splitlines()[0],
                                     epilog="See inference/cli.py for the input formats and the bad-input policy.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="score (query, passage) pairs: calibrated score and the task's decision per pair "
                                     "(an extractor: the key sentences of each passage)")
    s.add_argument("--input", required=True, help="pairs to score (JSONL or a reader format)")
    s.add_argument("--output", required=True, help="output JSONL (.gz compresses): index, ids, score, raw_score, action")
    add_ray_args(s.add_argument_group("Ray cluster (inference.distributed): Ray Data with an actor pool, one export "
                                      "load per actor"))
    _common(s)
    s.set_defaults(func=run_score)
    e = sub.add_parser("evaluate", help="the task's metrics on labelled data: accuracy, AUC, F1, ECE, MRR/nDCG, action "
                                        "table; an extractor's p@1, r@3, mrr")
    e.add_argument("--data", required=True, help="labelled pairs (JSONL or a reader format)")
    e.add_argument("--output-json", required=True, help="metrics JSON")
    e.add_argument("--plots", default=None, help="folder for reliability / histogram / threshold plots")
    _common(e)
    e.set_defaults(func=run_evaluate)
    register_serve(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in ("score", "evaluate"):
        if args.chunk_size is None:
            args.chunk_size = 1024 if getattr(args, "ray", None) else 8192
        if args.chunk_size < 1:
            parser.error("--chunk-size must be at least 1")
    try:
        return int(args.func(args) or 0)
    except (DataError, MissingInputError, ExportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
