"""``python -m inference``: score pairs with an export, or evaluate it on labelled pairs.

    python -m inference score --model DIR --input pairs.jsonl --output scores.jsonl \\
        [--format F] [--overwrite] [--skip-bad] [--batch-tokens N] [--bf16]
    python -m inference evaluate --model DIR --data dev.pairs.jsonl --output-json metrics.json \\
        [--format F] [--plots DIR] [--two-tier]

Input (``--format auto``, the default, looks at the file's first line):

* ``pairs``: our :class:`~data_prep.records.LabelledPair` JSONL (``docs/data.md``);
* ``simple``: one ``{"query": str, "passage": str | {"title", "text", "id"}}`` object a line, with
  optional ``label`` (0..1; ``evaluate`` needs it), ``query_id`` and ``passage_id``;
* ``crag-evaluator``: CRAG's ``question [SEP] passage<TAB>label`` file;
* any other reader format by name (``--format popqa``, ``beir`` with ``--split``, ...): positives
  are label 1, negatives label 0.

Bad input: a row that cannot be read, or whose query or passage is empty, is a bad row, reported as
``file:line: what is wrong`` (the run stops; nothing is written). With ``--skip-bad`` such rows are
skipped, counted, and kept unchanged in ``<output>.rejects/``. Empty queries and passages are
*rejected*, not scored: there is no relevance to score. A passage longer than the model's limit is
truncated on the passage side (never the query) and counted in the summary.

Outputs are written atomically (a crash leaves the previous file or none) and an existing output
is refused unless ``--overwrite``. ``score`` writes ``<output>.meta.json`` (counts, truncations,
rejects, thresholds, speed) beside its JSONL.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
from tqdm import tqdm

from data_prep.io import (DataError, MissingInputError, Rejects, atomic_write, iter_json_lines, iter_lines, parse_rows,
                          require_path, write_json)
from data_prep.records import LabelledPair, Passage

from .loading import ExportError, load

logger = logging.getLogger(__name__)

SIMPLE = "simple"
READER_OPTIONS = ("corpus", "queries", "qrels", "split", "rule", "fix_mojibake")


@dataclass
class Row:
    """One pair to score, whatever the input format."""

    query: str
    passage: str | Passage
    query_id: str
    passage_id: str | None
    label: float | None


# --------------------------------------------------------------------------------------------
# input


def _simple_row(path: Path, n: int, obj: dict) -> Row:
    from data_prep.readers._common import check_text, id_str, stable_id, text_query_id

    for key in ("query", "passage"):
        if obj.get(key) is None:
            raise DataError(path, n, f"missing field '{key}'", "missing-field")
    query = check_text(path, n, obj["query"], "query")
    p = obj["passage"]
    if isinstance(p, dict):
        if p.get("text") is None:
            raise DataError(path, n, "missing field 'passage.text'", "missing-field")
        text = check_text(path, n, p["text"], "passage")
        title = p.get("title") or ""
        if not isinstance(title, str):
            raise DataError(path, n, f"passage.title must be a string, got {type(title).__name__}", "invalid-type")
        pid = id_str(path, n, p["id"], "passage.id") if p.get("id") is not None else stable_id(title, text)
        passage: str | Passage = Passage(pid, text, title)
    else:
        passage = check_text(path, n, p, "passage")
        pid = id_str(path, n, obj["passage_id"], "passage_id") if obj.get("passage_id") is not None else None
    label = obj.get("label")
    if label is not None:
        if isinstance(label, bool) or not isinstance(label, (int, float)) or not 0.0 <= float(label) <= 1.0:
            raise DataError(path, n, f"label {label!r} is not a number in [0, 1]", "invalid-label")
        label = float(label)
    qid = id_str(path, n, obj["query_id"], "query_id") if obj.get("query_id") is not None else text_query_id(query)
    return Row(query, passage, qid, pid if isinstance(passage, str) else passage.id, label)


def read_simple(path: Path, rejects: Rejects | None) -> Iterator[Row]:
    yield from parse_rows(path, iter_json_lines(path, rejects), lambda n, obj: _simple_row(path, n, obj), rejects)


def detect_format(path: Path) -> str:
    """``pairs``, ``simple`` or ``crag-evaluator`` from the first non-blank line of ``path``."""
    for n, text, _ in iter_lines(path, Rejects(skip_bad=True)):
        if text.lstrip().startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                break
            if isinstance(obj, dict) and isinstance(obj.get("passage"), dict) and "label" in obj and "query_id" in obj:
                return "pairs"
            if isinstance(obj, dict) and "query" in obj and "passage" in obj:
                return SIMPLE
        elif " [SEP] " in text and "\t" in text:
            return "crag-evaluator"
        break
    raise DataError(path, None, "cannot tell the input format from the first line; pass --format "
                    "(pairs, simple, crag-evaluator, or another reader format)", "unknown-format")


def _pair_row(p: LabelledPair) -> Row:
    return Row(p.query, p.passage, p.query_id, p.passage.id, p.label)


def open_rows(args: argparse.Namespace, path: Path, rejects: Rejects | None) -> tuple[str, Iterator[Row]]:
    """The input's format and its rows."""
    require_path(path, "input file")
    fmt = args.format if args.format != "auto" else detect_format(path)
    extra = {k: getattr(args, k) for k in READER_OPTIONS if getattr(args, k, None) not in (None, False)}
    if fmt == SIMPLE:
        if extra:
            raise ValueError(f"format 'simple' does not take {', '.join('--' + k.replace('_', '-') for k in extra)}")
        return fmt, read_simple(path, rejects)
    from data_prep.convert import reader_kwargs
    from data_prep.readers import FORMATS, _load_all
    from data_prep.readers._common import open_pairs

    _load_all()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known formats: auto, {SIMPLE}, {', '.join(sorted(FORMATS))}")
    ns = argparse.Namespace(input=str(path), format=fmt, to="pairs", **{k: getattr(args, k, None) for k in READER_OPTIONS})
    return fmt, (_pair_row(p) for p in open_pairs(fmt, **reader_kwargs(ns, rejects)))


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
    """Calibrated and raw probabilities of ``rows`` and the truncation counts."""
    q, p = model.texts((r.query, r.passage) for r in rows)
    z, stats = model.engine.logits(q, p)
    return model.calibrate(z), model.sigmoid(z), stats


def _thresholds(model, args: argparse.Namespace) -> tuple[float, float | None, str]:
    hi, lo = model.thresholds(args.theta_high, args.theta_low, args.two_tier)
    source = "override" if args.theta_high is not None or args.theta_low is not None else "manifest"
    return hi, lo, source


def _progress(desc: str, disable: bool):
    return tqdm(desc=desc, unit=" pairs", disable=True if disable else None, mininterval=1.0)


# --------------------------------------------------------------------------------------------
# score


def score_file(args: argparse.Namespace) -> dict[str, Any]:
    """Score every pair of ``args.input`` into ``args.output``; returns the summary."""
    from .metrics import action_of

    out = Path(args.output)
    _refuse_existing(out, args.overwrite)
    inp = require_path(args.input, "input file")
    model = _load_model(args)
    hi, lo, source = _thresholds(model, args)
    rejects, rdir = _rejects_for(args, out)
    t0 = time.time()
    n = truncated = queries_truncated = 0
    actions = dict.fromkeys(("Correct", "Ambiguous", "Incorrect"), 0)
    try:
        fmt, rows = open_rows(args, inp, rejects)
        with atomic_write(out) as f, _progress("scoring", args.no_progress) as bar:
            for chunk in chunks(rows, args.chunk_size):
                probs, raw, stats = _score_rows(model, chunk)
                truncated += stats.passages_truncated
                queries_truncated += stats.queries_truncated
                lines = []
                for r, s, rs in zip(chunk, probs.tolist(), raw.tolist()):
                    a = action_of(s, hi, lo)
                    actions[a] += 1
                    rec = {"index": n, "query_id": r.query_id, "passage_id": r.passage_id, "score": s, "raw_score": rs,
                           "action": a}
                    if r.label is not None:
                        rec["label"] = r.label
                    lines.append(json.dumps(rec, ensure_ascii=False))
                    n += 1
                f.write("\n".join(lines) + "\n")
                bar.update(len(chunk))
    finally:
        if rejects is not None:
            rejects.close()
    seconds = time.time() - t0
    summary = {
        "model": str(args.model),
        "input": str(inp),
        "format": fmt,
        "output": str(out),
        "pairs": n,
        "passages_truncated": truncated,
        "queries_truncated": queries_truncated,
        "max_length": model.spec.max_length,
        "actions": actions,
        "thresholds": {"theta_high": hi, "theta_low": lo, "two_tier": lo is None, "source": source},
        "rejected": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
        "rejects_dir": str(rdir) if rejects is not None and rejects.total else None,
        "device": str(model.device),
        "dtype": "bf16" if model.engine.autocast_dtype is not None else "fp32",
        "seconds": round(seconds, 3),
        "pairs_per_s": round(n / seconds, 2) if seconds > 0 else None,
    }
    write_json(out.parent / f"{out.name}.meta.json", summary)
    return summary


def run_score(args: argparse.Namespace) -> int:
    s = score_file(args)
    print(f"scored {s['pairs']} pairs into {s['output']} ({s['pairs_per_s']} pairs/s); "
          f"actions: {', '.join(f'{k} {v}' for k, v in s['actions'].items())}; "
          f"passages truncated to {s['max_length']} tokens: {s['passages_truncated']}")
    if args.skip_bad:
        rej = s["rejected"]
        reasons = ", ".join(f"{k}: {v}" for k, v in rej["by_reason"].items()) or "none"
        print(f"rejected {rej['total']} rows ({reasons})" + (f"; raw rows in {s['rejects_dir']}" if rej["total"] else ""))
    return 0


# --------------------------------------------------------------------------------------------
# evaluate


def evaluate_file(args: argparse.Namespace) -> dict[str, Any]:
    """Metrics of the model on the labelled pairs of ``args.data``; written to ``args.output_json``."""
    from .metrics import evaluate_scores, expected_calibration_error, roc_auc

    out = Path(args.output_json)
    _refuse_existing(out, args.overwrite)
    data = require_path(args.data, "data file")
    model = _load_model(args)
    hi, lo, source = _thresholds(model, args)
    rejects, rdir = _rejects_for(args, out)
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
        raise DataError(data, None, "no pairs to evaluate", "empty")
    probs_a, raw_a = np.concatenate(probs), np.concatenate(raw)
    metrics = evaluate_scores(probs_a, labels, hi, lo, query_ids=qids)
    metrics["thresholds"].update({"two_tier": lo is None, "source": source})
    metrics["decision_threshold"] = {
        "name": "theta_high", "value": hi,
        "rule": "a pair counts as relevant when its calibrated score >= theta_high"
                + (" (two-tier mode: the single threshold)" if lo is None else ""),
    }
    metrics["raw"] = {"auc": roc_auc(raw_a, labels), "ece": expected_calibration_error(raw_a, labels)}
    metrics.update({
        "model": str(args.model), "data": str(data), "format": fmt, "passages_truncated": truncated,
        "max_length": model.spec.max_length,
        "rejected": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
        "rejects_dir": str(rdir) if rejects is not None and rejects.total else None,
        "device": str(model.device), "dtype": "bf16" if model.engine.autocast_dtype is not None else "fp32",
        "seconds": round(time.time() - t0, 3),
    })
    if args.plots:
        metrics["plots"] = _plots(model, args.plots, probs_a, raw_a, labels, hi, lo)
    write_json(out, metrics)
    return metrics


def _labelled(rows: Iterable[Row], path: Path) -> Iterator[Row]:
    for i, r in enumerate(rows, 1):
        if r.label is None:
            raise DataError(path, None, f"pair {i} ({r.query_id}) has no label; evaluate needs labelled pairs", "missing-field")
        yield r


def _plots(model, folder: str, probs, raw, labels, hi: float, lo: float | None) -> list[str]:
    from training.calibration import Thresholds, write_plots

    t = model.manifest.get("thresholds", {})
    th = Thresholds(hi, hi if lo is None else lo, t.get("method", "manifest"), t.get("precision_target", 0.9),
                    t.get("npv_target", 0.9), len(labels), int(sum(1 for y in labels if y >= 0.5)))
    return [str(Path(folder) / f) for f in write_plots(folder, probs, labels, th, raw_probs=raw)]


def run_evaluate(args: argparse.Namespace) -> int:
    m = evaluate_file(args)
    keys = ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10")
    print(", ".join(f"{k} {m[k]:.4f}" if isinstance(m[k], float) else f"{k} {m[k]}" for k in keys if m.get(k) is not None))
    print(f"accuracy at theta_high = {m['decision_threshold']['value']:.4f}; metrics in {args.output_json}")
    return 0


# --------------------------------------------------------------------------------------------
# parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="export folder (with evaluator.json)")
    p.add_argument("--format", default="auto",
                   help="input format: auto (default: from the first line), pairs, simple, crag-evaluator, or any "
                        "reader format of `python -m data_prep convert`")
    p.add_argument("--corpus", help="corpus file, for formats that take one separately")
    p.add_argument("--queries", help="queries file (msmarco, beir)")
    p.add_argument("--qrels", help="qrels file (msmarco, beir)")
    p.add_argument("--split", help="split name (beir, msmarco)")
    p.add_argument("--rule", choices=["title-match", "answer"], help="popqa labelling rule")
    p.add_argument("--fix-mojibake", action="store_true", help="repair UTF-8 read as Latin-1 (MS MARCO)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--skip-bad", action="store_true", help="skip bad rows; keep them in <output>.rejects/")
    p.add_argument("--batch-tokens", type=int, default=None, help="padded tokens per forward pass (default per device)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast where the device supports it")
    p.add_argument("--device", default=None, help="cuda, mps, cpu, cuda:1, ... (default: CUDA, then MPS, then CPU)")
    p.add_argument("--trust-pickle", action="store_true", help="allow pickle weights (.bin/.pt): only for models you trust")
    p.add_argument("--theta-high", type=float, default=None, help="override the manifest's theta_high")
    p.add_argument("--theta-low", type=float, default=None, help="override the manifest's theta_low")
    p.add_argument("--two-tier", action="store_true", help="one threshold (theta_high), no Ambiguous band")
    p.add_argument("--chunk-size", type=int, default=8192, help="pairs read and scored per step (memory bound)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m inference", description=__doc__.splitlines()[0],
                                     epilog="See inference/cli.py for the input formats and the bad-input policy.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="score (query, passage) pairs: calibrated score and CRAG action per pair")
    s.add_argument("--input", required=True, help="pairs to score (JSONL or a reader format)")
    s.add_argument("--output", required=True, help="output JSONL (.gz compresses): index, ids, score, raw_score, action")
    _common(s)
    s.set_defaults(func=run_score)
    e = sub.add_parser("evaluate", help="metrics on labelled pairs: accuracy, AUC, F1, ECE, MRR/nDCG, action table")
    e.add_argument("--data", required=True, help="labelled pairs (JSONL or a reader format)")
    e.add_argument("--output-json", required=True, help="metrics JSON")
    e.add_argument("--plots", default=None, help="folder for reliability / histogram / threshold plots")
    _common(e)
    e.set_defaults(func=run_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.chunk_size < 1:
        parser.error("--chunk-size must be at least 1")
    try:
        return int(args.func(args) or 0)
    except (DataError, MissingInputError, ExportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
