"""``python -m inference serve``: the subcommand's options and its start-up.

:func:`register` adds ``serve`` to ``python -m inference``'s subcommands (:mod:`inference.cli`);
:func:`run` checks the options, builds :class:`~inference.serving.app.ServeSettings`, loads the
exports before the port opens (with ``--workers N`` each process loads its own copy, from the
settings in its environment) and serves (:func:`inference.serving.server.serve`). Nothing here
imports the serve extra until the subcommand runs, so the base install parses every other command.
"""

from __future__ import annotations

import argparse
import json
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    v = subparsers.add_parser("serve", help="serve exports over HTTP: /v1/rerank (Cohere/Jina/Infinity), /rerank "
                                            "(TEI), /v1/grade, /v1/extract, /v1/has_answer, /health, /info, /metrics "
                                            "(needs the serve extra)")
    add_arguments(v)
    v.set_defaults(func=run)


def add_arguments(v: argparse.ArgumentParser) -> None:
    """The options of ``serve`` (defaults from :class:`~inference.serving.app.ServeSettings`)."""
    from .app import ServeSettings

    d = ServeSettings(model="")
    v.add_argument("--model", required=True, help="an evaluator (or answer classifier) export: /v1/rerank, /rerank, "
                                                  "/v1/grade")
    v.add_argument("--extractor", default=None, help="an extractor export: /v1/extract")
    v.add_argument("--answer-classifier", default=None, help="an answer classifier export: /v1/has_answer")
    v.add_argument("--host", default=d.host, help="address to bind (default 127.0.0.1: this machine only)")
    v.add_argument("--port", type=int, default=d.port)
    v.add_argument("--workers", type=int, default=d.workers,
                   help="server processes, each with its own copy of the models (default 1)")
    v.add_argument("--api-key-env", default=None, metavar="VAR",
                   help="require the key held in environment variable VAR (Authorization: Bearer KEY or X-API-Key)")
    v.add_argument("--model-name", default=None, help="the model name /v1/rerank answers with (default: the export's)")
    v.add_argument("--max-documents", type=int, default=d.max_documents, help="documents per request (more: 413)")
    v.add_argument("--max-chars", type=int, default=d.max_chars, help="characters per request (more: 413)")
    v.add_argument("--max-batch-items", type=int, default=d.max_batch_items,
                   help="pairs merged into one model call (the engine cuts it into passes under --batch-tokens)")
    v.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms,
                   help="how long a request waits for others to share its model call")
    v.add_argument("--max-queue-items", type=int, default=d.max_queue_items,
                   help="pairs waiting at most; beyond it a request gets 503 with Retry-After")
    v.add_argument("--batch-tokens", type=int, default=None, help="padded tokens per forward pass (default per device)")
    v.add_argument("--bf16", action="store_true", help="bfloat16 autocast where the device supports it")
    v.add_argument("--device", default=None, help="cuda, mps, cpu, cuda:1, ... (default: CUDA, then MPS, then CPU)")
    v.add_argument("--trust-pickle", action="store_true", help="allow pickle weights (.bin/.pt): only for models you trust")
    v.add_argument("--grace-seconds", type=float, default=0.0,
                   help="on SIGTERM, serve this long with /health at 503 (for a load balancer to notice) before the "
                        "listener closes; requests in flight and in the listen backlog are finished either way")
    v.add_argument("--keep-alive-seconds", type=float, default=75.0,
                   help="how long an idle client connection stays open (default 75, longer than client pools keep "
                        "theirs, so a client never reuses one the server is closing)")
    v.add_argument("--log-level", default="info", help="uvicorn's log level")


def run(args: argparse.Namespace) -> int:
    """Check the options, load the exports (before the port opens) and serve until SIGTERM."""
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise ValueError(f"serve needs the serve extra ({e.name} is missing): pip install 'crag-evaluators[serve]'") from None
    from .app import ServeSettings, create_app, load_models

    for name in ("workers", "max_documents", "max_chars", "max_batch_items", "max_queue_items"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("grace_seconds", "keep_alive_seconds"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must not be negative")
    settings = ServeSettings(model=args.model, extractor=args.extractor, answer_classifier=args.answer_classifier,
                             device=args.device, dtype="bf16" if args.bf16 else None, batch_tokens=args.batch_tokens,
                             trust_pickle=args.trust_pickle, api_key_env=args.api_key_env,
                             max_documents=args.max_documents, max_chars=args.max_chars,
                             max_batch_items=args.max_batch_items, max_wait_ms=args.max_wait_ms,
                             max_queue_items=args.max_queue_items, model_name=args.model_name, host=args.host,
                             port=args.port, workers=args.workers)
    from .server import serve

    if args.workers > 1:  # each process loads the models itself, from the settings in its environment
        os.environ["CRAG_SERVE_SETTINGS"] = json.dumps(settings.to_dict())
        create_app(settings, models={})  # the settings' errors (an unset API key variable) here, not per worker
        app = "inference.serving.app:app_from_env"
    else:
        app = create_app(settings, models=load_models(settings))  # load errors before the port opens
    return serve(app, host=args.host, port=args.port, log_level=args.log_level, workers=args.workers,
                 grace_s=args.grace_seconds, keep_alive_s=args.keep_alive_seconds)
