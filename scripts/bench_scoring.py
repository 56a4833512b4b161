"""Benchmark our scoring engine against sentence-transformers' ``CrossEncoder.predict``.

    python scripts/bench_scoring.py --model outputs/evaluator-bench --json outputs/bench/scoring.json [--pairs 2000]

Both score the same real (query, passage) pairs of the built NQ-open evaluator data (dev pairs
first, then train pairs; passages formatted ``{title}. {text}`` as in training) with the same
weights, on the same device, in float32, in one process; the runs alternate (ours, theirs, ours,
theirs, ...) and the best of ``--repeats`` is kept for each, so background load hurts both alike.
Reported: pairs/s of each and their ratio, the largest absolute difference between the raw
probabilities (``sigmoid(z)``), the same for variants of our engine with one choice changed (the
first-token last layer off, padded batches instead of the unpadded BERT path, the old 8,192-token CPU
budget, that budget with the opt-in oneDNN path on, and sorting plus that budget alone), the opt-in
int8 dynamic quantization (speed, score difference against fp32 and the AUC change on the pairs'
labels), our bfloat16-autocast figure separately
(on the first ``--bf16-pairs`` pairs), and the latency of grading one query's top-5 and top-20
chunks (median and p95 over ``--latency-queries`` queries), beside ``CrossEncoder.predict`` on the
same chunks, the callers alternating on every query (ours, padded, int8), best of
``--latency-repeats`` calls per query.

Before timing, the script waits (polling every 30 s, up to ``--wait`` seconds) for the 1-minute
load average to fall below ``--max-load``; the load at start and end is recorded.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "outputs" / "datasets" / "nq-open" / "evaluator"
logger = logging.getLogger("bench_scoring")


def wait_for_quiet(max_load: float, wait_s: float, poll_s: float = 30.0) -> float:
    """Block until the 1-minute load average is below ``max_load`` (or ``wait_s`` passed)."""
    t0 = time.time()
    while True:
        load1 = os.getloadavg()[0]
        if load1 < max_load or time.time() - t0 >= wait_s:
            if load1 >= max_load:
                logger.warning("load %.2f still >= %.2f after %.0f s: timing anyway", load1, max_load, wait_s)
            return load1
        logger.info("load average %.2f >= %.2f: waiting %.0f s", load1, max_load, poll_s)
        time.sleep(poll_s)


def load_pairs(n: int, files: list[Path], seed: int):
    """``n`` real labelled pairs: all of the first file(s) in order, topped up at random from the rest."""
    from data_prep.io import read_records
    from data_prep.records import LabelledPair

    pairs = []
    for f in files:
        rows = list(read_records(f, LabelledPair))
        if len(pairs) + len(rows) > n:
            random.Random(seed).shuffle(rows)
        pairs.extend(rows[: n - len(pairs)])
        if len(pairs) >= n:
            break
    if len(pairs) < n:
        raise SystemExit(f"only {len(pairs)} pairs in {', '.join(map(str, files))}; need {n}")
    return pairs


def timed(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def latency(fns: dict, groups: list[tuple[str, list]], k: int, repeats: int = 3) -> dict[str, dict[str, float]]:
    """Per-call latency of each ``fns[name](query, chunks)``, the callers alternating on every
    query (so that a change of machine load hits them alike); per query the best of ``repeats``."""
    for fn in fns.values():  # warm-up
        fn(groups[0][0], groups[0][1][:k])
    times: dict[str, list[float]] = {name: [] for name in fns}
    for q, chunks in groups:
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(repeats):
            for name, fn in fns.items():
                t = time.perf_counter()
                fn(q, chunks[:k])
                best[name] = min(best[name], (time.perf_counter() - t) * 1000)
        for name in fns:
            times[name].append(best[name])
    out = {name: {"median_ms": float(np.median(v)), "p95_ms": float(np.percentile(v, 95)), "queries": len(v)}
           for name, v in times.items()}
    first = next(iter(fns))
    for name in fns:
        if name != first:
            out[name]["ratio_to_" + first] = out[name]["median_ms"] / out[first]["median_ms"]
    return out


def latency_groups(pairs, n_queries: int, k: int, seed: int) -> list[tuple[str, list]]:
    """Queries with ``k`` real candidate chunks: the query's own pairs, then passages of other
    queries (a retriever's top-k holds many non-relevant passages too)."""
    by_q: dict[str, list] = {}
    for p in pairs:
        by_q.setdefault(p.query_id, []).append(p)
    pool = [p.passage for p in pairs]
    rng = random.Random(seed)
    groups = []
    for qid, ps in list(by_q.items())[:n_queries]:
        chunks = [p.passage for p in ps][:k]
        chunks += rng.sample(pool, k - len(chunks))
        groups.append((ps[0].query, chunks))
    return groups


def machine() -> dict:
    import torch

    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    flags = []
    try:
        with open("/proc/cpuinfo") as f:
            line = next((x for x in f if x.startswith("flags")), "")
        flags = sorted({w for w in line.split() if w.startswith(("avx512", "amx")) or w in ("avx2", "fma")})
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "cpu_flags": flags, "mem_gib": mem, "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(), "python": platform.python_version(), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a cross-encoder export folder")
    ap.add_argument("--json", required=True, help="where to write the figures")
    ap.add_argument("--pairs", type=int, default=2000, help="pairs to score (>= 2000 for the reported figure)")
    ap.add_argument("--data", nargs="*", default=[str(DATA / "dev.pairs.jsonl"), str(DATA / "train.pairs.jsonl")],
                    help="LabelledPair JSONL files to draw pairs from, in order")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--st-batch-size", type=int, default=32, help="CrossEncoder.predict batch size (its default)")
    ap.add_argument("--batch-tokens", type=int, default=None, help="our padded-token budget (default per device)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each (best kept)")
    ap.add_argument("--latency-queries", type=int, default=30)
    ap.add_argument("--latency-repeats", type=int, default=3, help="calls per query and caller (best kept)")
    ap.add_argument("--no-bf16", action="store_true", help="skip the bf16 run")
    ap.add_argument("--bf16-pairs", type=int, default=500, help="pairs for the bf16 run (the first N of the set)")
    ap.add_argument("--max-load", type=float, default=1.0, help="wait for the 1-minute load average to fall below this")
    ap.add_argument("--wait", type=float, default=600.0, help="longest wait for a quiet machine, seconds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import torch
    from sentence_transformers import CrossEncoder

    import inference
    from inference.inputs import passage_text

    load_start = wait_for_quiet(args.max_load, args.wait)

    # --- data and models ------------------------------------------------------------------
    pairs = load_pairs(args.pairs, [Path(f) for f in args.data], args.seed)
    texts = [(p.query, passage_text(p.passage)) for p in pairs]
    ours = inference.load(args.model, device=args.device)
    if ours.spec.head != "cross-encoder":
        raise SystemExit(f"{args.model}: head {ours.spec.head!r}; CrossEncoder compares cross-encoder exports only")
    st = CrossEncoder(args.model, device=args.device, max_length=ours.spec.max_length)
    if not isinstance(st.activation_fn, torch.nn.Sigmoid):
        raise SystemExit(f"CrossEncoder activation is {st.activation_fn}, not Sigmoid: raw probabilities would differ")
    st_max = getattr(st, "max_seq_length", None) or st.max_length
    if st_max != ours.spec.max_length:
        raise SystemExit(f"CrossEncoder max_length {st_max} != export max_length {ours.spec.max_length}")
    if args.batch_tokens:
        ours.engine.batch_tokens = args.batch_tokens
    enc, enc_stats = ours.engine.encoder.encode([q for q, _ in texts], [p for _, p in texts])
    lengths = np.array([len(x) for x in enc["input_ids"]])

    def run_ours():
        return np.array(ours.score_raw(texts))

    def run_st():
        return st.predict(texts, batch_size=args.st_batch_size, show_progress_bar=False, convert_to_numpy=True).astype(np.float64)

    ours.score_raw(texts[:128]), st.predict(texts[:128], batch_size=args.st_batch_size, show_progress_bar=False)  # warm-up

    # --- throughput, fp32, alternating ------------------------------------------------------
    t_ours, t_st = float("inf"), float("inf")
    for _ in range(args.repeats):
        t, ours_raw = timed(run_ours, 1)
        t_ours = min(t_ours, t)
        t, st_raw = timed(run_st, 1)
        t_st = min(t_st, t)
    max_abs_diff = float(np.max(np.abs(ours_raw - st_raw)))
    # the same engine with one choice changed at a time: what each is worth
    ablation = {}
    budget = ours.engine.batch_tokens
    for name, opts, bt in (("plain", dict(first_token_layer=False, unpadded=False), 8192),  # sorting + the old budget only
                           ("without_first_token_layer", dict(first_token_layer=False, unpadded=False), budget),
                           ("padded_with_first_token_layer", dict(unpadded=False), budget),  # the default until 0.1.x
                           ("batch_tokens_8192", {}, 8192),
                           # the opt-in path engages on batches of >= 2,048 tokens: compare it at 8,192
                           ("batch_tokens_8192_with_onednn_fast_path", dict(cpu_fast_path=True), 8192)):
        variant = inference.load(args.model, device=args.device, **opts)
        variant.engine.batch_tokens = bt
        variant.score_raw(texts[:128])
        t, raw = timed(lambda: np.array(variant.score_raw(texts)), 1)
        ablation[name] = {"pairs_per_s": len(texts) / t, "ratio": t_st / t, "batch_tokens": bt, **opts,
                          "max_abs_diff": float(np.max(np.abs(raw - st_raw)))}
        del variant
    # opt-in int8 dynamic quantization: not exact, so its score difference and AUC change are reported
    from inference.metrics import roc_auc

    labels = [p.label for p in pairs]
    int8_figures = None
    if args.device == "cpu":
        q8 = inference.load(args.model, device=args.device, quantize="int8")
        q8.score_raw(texts[:128])
        t, q8_raw = timed(lambda: np.array(q8.score_raw(texts)), 1)
        auc32, auc8 = roc_auc(ours_raw, labels), roc_auc(q8_raw, labels)
        int8_figures = {"pairs_per_s": len(texts) / t, "ratio": t_st / t,
                        "max_abs_diff_vs_fp32": float(np.max(np.abs(q8_raw - ours_raw))),
                        "mean_abs_diff_vs_fp32": float(np.mean(np.abs(q8_raw - ours_raw))),
                        "auc_fp32": auc32, "auc_int8": auc8, "auc_change": auc8 - auc32}
        logger.info("int8: %.1f pairs/s, max |diff| vs fp32 %.2e, AUC %.4f -> %.4f", int8_figures["pairs_per_s"],
                    int8_figures["max_abs_diff_vs_fp32"], auc32, auc8)
        del q8
    result = {
        "int8": int8_figures,
        "pairs": len(texts),
        "ours_pairs_per_s": len(texts) / t_ours,
        "st_pairs_per_s": len(texts) / t_st,
        "ratio": t_st / t_ours,
        "max_abs_diff": max_abs_diff,
        "ours_seconds": t_ours,
        "st_seconds": t_st,
        "ours_fast_path": ours.engine.fast_path,
        "ours_first_token_layer": ours.engine.first_token_layer,
        "ablation": ablation,
    }
    logger.info("fp32: ours %.1f pairs/s, CrossEncoder %.1f pairs/s, ratio %.2f, max |diff| %.2e",
                result["ours_pairs_per_s"], result["st_pairs_per_s"], result["ratio"], max_abs_diff)

    # --- bf16 (separate figure) ---------------------------------------------------------------
    if not args.no_bf16:
        bf = inference.load(args.model, device=args.device, dtype="bf16")
        if bf.engine.autocast_dtype is None:
            result["bf16"] = {"skipped": f"bf16 not supported on {args.device}"}
        else:
            if args.batch_tokens:
                bf.engine.batch_tokens = args.batch_tokens
            sub = texts[: args.bf16_pairs]
            bf.score_raw(sub[:64])
            t, bf_raw = timed(lambda: np.array(bf.score_raw(sub)), 1)
            result["bf16"] = {"pairs": len(sub), "ours_pairs_per_s": len(sub) / t,
                              "ours_fp32_pairs_per_s": result["ours_pairs_per_s"],
                              "max_abs_diff_vs_st_fp32": float(np.max(np.abs(bf_raw - st_raw[: len(sub)])))}
            logger.info("bf16: ours %.1f pairs/s", result["bf16"]["ours_pairs_per_s"])
        del bf

    # --- latency of grading one query's chunks -----------------------------------------------
    padded = inference.load(args.model, device=args.device, unpadded=False)
    int8 = inference.load(args.model, device=args.device, quantize="int8") if args.device == "cpu" else None
    for k in (5, 20):
        groups = latency_groups(pairs, args.latency_queries, k, args.seed)
        fns = {"st_predict": lambda q, chunks: st.predict([(q, passage_text(c)) for c in chunks],
                                                          batch_size=args.st_batch_size, show_progress_bar=False),
               "grade": ours.grade, "grade_padded": padded.grade}
        if int8 is not None:
            fns["grade_int8"] = int8.grade
        lat = latency(fns, groups, k, args.latency_repeats)
        result[f"grade_top{k}"] = lat["grade"]
        result[f"st_predict_top{k}"] = lat["st_predict"]
        result[f"latency_top{k}"] = lat
        result[f"latency_ratio_top{k}"] = lat["st_predict"]["median_ms"] / lat["grade"]["median_ms"]
        logger.info("grade top-%d: median %.1f ms (CrossEncoder.predict %.1f ms, ratio %.2f), p95 %.1f ms", k,
                    lat["grade"]["median_ms"], lat["st_predict"]["median_ms"], result[f"latency_ratio_top{k}"],
                    lat["grade"]["p95_ms"])

    import sentence_transformers
    import transformers

    result.update({
        "model": str(args.model),
        "device": args.device,
        "batch_tokens": ours.engine.batch_tokens,
        "st_batch_size": args.st_batch_size,
        "max_length": ours.spec.max_length,
        "token_lengths": {"min": int(lengths.min()), "median": float(np.median(lengths)), "mean": float(lengths.mean()),
                          "max": int(lengths.max()), "passages_truncated": enc_stats.passages_truncated},
        "repeats": args.repeats,
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg()[0],
        "machine": machine(),
        "versions": {"sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    })
    from data_prep.io import write_json

    write_json(args.json, result)
    print(json.dumps({k: result[k] for k in ("ours_pairs_per_s", "st_pairs_per_s", "ratio", "max_abs_diff")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
