"""``python -m data_prep label``: LLM labels for unlabelled (query, passage) pairs.

    # an OpenAI-compatible server (vLLM, llama.cpp, Ollama's /v1, a hosted API)
    python -m data_prep label --input pairs.jsonl --task relevance --output outputs/labels/run1 \\
        --base-url http://localhost:8000/v1 --model Qwen2.5-7B-Instruct [--api-key-env MY_KEY] \\
        [--concurrency 16] [--rpm 600] [--timeout 60] [--max-retries 5] [--samples 3] [--gold gold.jsonl]
    # a local chat model, nothing leaves the machine
    python -m data_prep label --input pairs.jsonl --task answer --output outputs/labels/run2 \\
        --backend transformers --model /models/qwen2.5-1.5b-instruct [--batch-size 16]

Rerun the same command after a kill or a crash: what ``DIR/labels.jsonl`` holds is not asked again.
See :mod:`data_prep.labelling` for the outputs and ``docs/data.md`` ("LLM labels").
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..locking import locks_output
from .backends import BackendError, OpenAIBackend, TransformersBackend
from .prompts import TASKS
from .runner import READER_OPTIONS, LabelConfig, label

logger = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 16


def make_backend(args: argparse.Namespace):
    if args.backend == "transformers":
        if args.base_url:
            raise ValueError("--base-url is for --backend openai")
        if not args.model:
            raise ValueError("--model (a local folder or a hub id) is required with --backend transformers")
        return TransformersBackend(args.model, device=args.device, batch_size=args.batch_size, max_tokens=args.max_tokens,
                                   dtype=args.dtype, seed=args.seed)
    if not args.base_url:
        raise ValueError("--base-url is required with --backend openai (repeat it to spread requests over servers)")
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"environment variable {args.api_key_env} (named by --api-key-env) is not set or empty")
    extra = {"response_format": {"type": "json_object"}} if args.json_mode else {}
    return OpenAIBackend(args.base_url, args.model, key, timeout=args.timeout, max_retries=args.max_retries, rpm=args.rpm,
                         max_tokens=args.max_tokens, concurrency=args.concurrency, fail_threshold=args.fail_threshold,
                         cooldown=args.cooldown, extra_body=extra, seed=args.seed)


@locks_output("args.output", "labelling output")  # before a local model is loaded (data_prep.locking)
def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    if args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    cfg = LabelConfig(
        input=args.input, output=args.output, task=args.task, format=args.format, samples=args.samples,
        temperature=args.temperature, max_answer_retries=args.max_answer_retries, prompt_file=args.prompt,
        gold=args.gold, gold_format=args.gold_format, use_input_gold=not args.no_input_gold,
        relevant_grade=args.relevant_grade, limit=args.limit, skip_bad=args.skip_bad, progress=not args.no_progress,
        reader_options={k: getattr(args, k) for k in READER_OPTIONS if getattr(args, k, None) not in (None, False)},
    )
    backend = make_backend(args)
    try:
        s = label(cfg, backend)
    except BackendError as e:  # the run stopped (a bad key, URL or model): what was labelled is kept
        print(f"error: {e}; labels so far are kept in {args.output} (summary.json says how far it got)", file=sys.stderr)
        return 2
    failed = ", ".join(f"{k} {v}" for k, v in s["failed"].items()) or "none"
    print(f"labelled {s['done']} pairs ({s['cached']} already done, failed: {failed}) into {args.output}/labels.jsonl; "
          f"{s['requests']} requests, {s['retries']} retries, tokens in/out {s['tokens']['in']}/{s['tokens']['out']}, "
          f"{s['wall_seconds']:.1f} s")
    if s["skipped"]:
        print("skipped: " + ", ".join(f"{k} {v}" for k, v in s["skipped"].items()))
    if s["resume"]["partial_lines_dropped"]:
        print(f"resume: dropped {s['resume']['partial_lines_dropped']} half-written line(s) left by an interrupted run")
    ag = s.get("agreement")
    if ag:
        print(f"agreement with {ag['gold']}: n {ag['n']}, accuracy {ag['accuracy']:.3f}, Cohen's kappa "
              f"{ag['cohen_kappa']:.3f}" if ag.get("cohen_kappa") is not None else f"agreement: n {ag['n']}")
    if s["failed_total"]:
        print(f"{s['failed_total']} pairs failed (see {args.output}/failures.jsonl); rerun the command to ask them again")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "label", help="label (query, passage) pairs with an LLM: relevance 0-3, answer existence, key sentences",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("input and output")
    g.add_argument("--input", required=True, help="pairs to label: any pair format of `python -m inference score` "
                   "(auto: pairs, simple {query, passage}, crag-evaluator; or a reader format by name: popqa, queries, "
                   "beir, ...); gold key-sentence rows (format sentences) for --task sentences")
    g.add_argument("--format", default="auto", help="input format (default: from the first line)")
    for opt in ("corpus", "queries", "qrels", "split"):
        g.add_argument(f"--{opt}", help=f"reader option {opt} (formats that take it)")
    g.add_argument("--rule", choices=["title-match", "answer"], help="popqa labelling rule (the input labels, used as gold)")
    g.add_argument("--fix-mojibake", action="store_true", help="repair UTF-8 read as Latin-1 (MS MARCO)")
    g.add_argument("--task", required=True, choices=list(TASKS), help="; ".join(f"{k}: {v}" for k, v in TASKS.items()))
    g.add_argument("--output", required=True, help="output folder: labels.jsonl, failures.jsonl, summary.json (also the "
                   "cache: rerun to resume)")
    g.add_argument("--limit", type=int, default=None, help="label at most this many pairs (the first ones)")
    g.add_argument("--skip-bad", action="store_true", help="skip bad input rows; keep them in DIR/rejects/")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    b = p.add_argument_group("backend")
    b.add_argument("--backend", choices=["openai", "transformers"], default="openai",
                   help="openai: an OpenAI-compatible chat-completions server (default); transformers: a local chat model")
    b.add_argument("--base-url", action="append", default=[], help="server base URL ending in /v1 (repeatable)")
    b.add_argument("--model", required=True, help="model name on the server, or the local model folder")
    b.add_argument("--api-key-env", default=None, help="name of the environment variable holding the API key "
                   "(the key itself is never printed or written)")
    b.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, help=f"requests in flight (default {DEFAULT_CONCURRENCY})")
    b.add_argument("--rpm", type=float, default=None, help="at most this many requests a minute (default: no limit)")
    b.add_argument("--timeout", type=float, default=60.0, help="seconds per request, the whole answer included")
    b.add_argument("--max-retries", type=int, default=5, help="retries of a request on timeouts, 429 and 5xx")
    b.add_argument("--fail-threshold", type=int, default=3, help="failures in a row that take a server out of rotation")
    b.add_argument("--cooldown", type=float, default=30.0, help="seconds a failing server stays out (doubling)")
    b.add_argument("--json-mode", action="store_true", help="ask the server for response_format json_object")
    b.add_argument("--device", default=None, help="transformers: cuda, cpu, ... (default: CUDA when present)")
    b.add_argument("--batch-size", type=int, default=8, help="transformers: prompts generated together")
    b.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default=None, help="transformers: weights dtype")
    q = p.add_argument_group("prompt and label quality")
    q.add_argument("--prompt", default=None, help="a prompt YAML file instead of the bundled one (id, version, task, "
                   "system, user, repair)")
    q.add_argument("--samples", type=int, default=1, help="ask k times; the label is the mean, with the agreement")
    q.add_argument("--temperature", type=float, default=None, help="default 0 for one sample, 0.7 for several")
    q.add_argument("--max-tokens", type=int, default=256, help="longest reply")
    q.add_argument("--max-answer-retries", type=int, default=2,
                   help="ask again (showing the error) when a reply is not the requested JSON")
    q.add_argument("--gold", default=None, help="gold labels (any pair format) to measure agreement against")
    q.add_argument("--gold-format", default="auto", help="format of --gold")
    q.add_argument("--no-input-gold", action="store_true", help="do not use the input's own labels as gold")
    q.add_argument("--relevant-grade", type=float, default=2.0,
                   help="relevance: the mean grade from which a pair counts as relevant against gold (default 2)")
    q.add_argument("--seed", type=int, default=0, help="seed of the backoff jitter and local sampling")
    p.set_defaults(func=run)
