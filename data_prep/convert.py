"""``python -m data_prep convert``: any supported format to our JSONL, FlagEmbedding, or pairs.

    python -m data_prep convert --format beir --input data/scifact --split train \\
        --to queries --output out/scifact.train.jsonl [--skip-bad] [--overwrite]

``--to queries`` writes :class:`~data_prep.records.QueryExample` JSONL, ``--to flagembedding``
FlagEmbedding reranker data, ``--to pairs`` :class:`~data_prep.records.LabelledPair` JSONL
(the format's own pairs where it has them, else positives as 1 and negatives as 0). The output is
written atomically, with ``<output>.meta.json`` (parameters and counts) beside it; an existing
output is refused unless ``--overwrite``. With ``--skip-bad`` bad rows go, unchanged, to
``<output>.rejects/`` and their counts are printed.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from tqdm import tqdm

from .io import Rejects, write_json, write_jsonl
from .readers import FORMATS, load_all, open_source
from .readers.common import PAIR_READERS, open_pairs
from .readers.flagembedding import write_flagembedding

logger = logging.getLogger(__name__)

TARGETS = ("queries", "flagembedding", "pairs")
#: command-line option -> keyword of the format openers
OPTIONS = ("corpus", "queries", "qrels", "split", "rule", "fix_mojibake")
T = TypeVar("T")


def _accepted(fmt: str, target: str) -> set[str]:
    fns = [FORMATS[fmt][0]]
    if target == "pairs" and fmt in PAIR_READERS:
        fns = [PAIR_READERS[fmt]]
    return set(inspect.signature(fns[0]).parameters)


def reader_kwargs(args: argparse.Namespace, rejects: Rejects | None) -> dict[str, Any]:
    """The opener's keyword arguments from the command line; an option the format does not take
    is an error, not silently ignored."""
    kwargs: dict[str, Any] = {"input": args.input}
    for opt in OPTIONS:
        v = getattr(args, opt, None)
        if v is not None and v is not False:
            kwargs[opt] = v
    accepted = _accepted(args.format, args.to)
    unknown = sorted(k for k in kwargs if k not in accepted)
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        raise ValueError(f"format {args.format!r} does not take {flags}")
    if rejects is not None:
        kwargs["rejects"] = rejects
    return kwargs


def _progress(items: Iterable[T], desc: str) -> Iterator[T]:
    yield from tqdm(items, desc=desc, unit=" rec", disable=None, mininterval=2.0)


def convert(args: argparse.Namespace) -> dict[str, Any]:
    """Run one conversion; returns the counts written to ``<output>.meta.json``."""
    load_all()
    if args.format not in FORMATS:
        raise ValueError(f"unknown format {args.format!r}; known formats: {', '.join(sorted(FORMATS))}")
    if args.prompt is not None and args.to != "flagembedding":
        raise ValueError("--prompt applies to --to flagembedding only")
    out = Path(args.output)
    if out.exists() and not args.overwrite:
        raise ValueError(f"output exists: {out} (pass --overwrite to replace it)")
    rejects_dir = out.parent / f"{out.name}.rejects"
    rejects = None
    if args.skip_bad:
        if rejects_dir.is_dir():  # left by an earlier run of this output: start clean
            shutil.rmtree(rejects_dir)
        rejects = Rejects(skip_bad=True, out_dir=rejects_dir)
    kwargs = reader_kwargs(args, rejects)
    t0 = time.time()
    try:
        if args.to == "pairs":
            n = write_jsonl(out, _progress(open_pairs(args.format, **kwargs), "pairs"))
        else:
            src = open_source(args.format, **kwargs)
            examples = _progress(src.queries(), "queries")
            if args.to == "queries":
                n = write_jsonl(out, examples)
            else:
                n = write_flagembedding(out, examples, prompt=args.prompt)
    finally:
        if rejects is not None:
            rejects.close()
    summary = {
        "format": args.format,
        "input": str(args.input),
        "options": {k: v for k, v in kwargs.items() if k not in ("input", "rejects")},
        "to": args.to,
        "output": str(out),
        "written": n,
        "rejected": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
        "rejects_dir": str(rejects_dir) if rejects is not None and rejects.total else None,
        "seconds": round(time.time() - t0, 3),
    }
    write_json(out.parent / f"{out.name}.meta.json", summary)
    logger.info("wrote %d records to %s", n, out)
    return summary


def run(args: argparse.Namespace) -> int:
    summary = convert(args)
    print(f"wrote {summary['written']} {args.to} records to {summary['output']}")
    if args.skip_bad:
        rej = summary["rejected"]
        reasons = ", ".join(f"{k}: {v}" for k, v in rej["by_reason"].items()) or "none"
        print(f"rejected {rej['total']} rows ({reasons})" + (f"; raw rows in {summary['rejects_dir']}" if rej["total"] else ""))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    load_all()
    formats = "\n".join(f"  {name:16s} {help}" for name, (_, help) in sorted(FORMATS.items()))
    p = subparsers.add_parser(
        "convert",
        help="convert a dataset format to QueryExample JSONL, FlagEmbedding or labelled pairs",
        description="Convert a dataset to QueryExample JSONL, FlagEmbedding JSONL or labelled pairs.\n\nformats:\n" + formats,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--format", required=True, choices=sorted(FORMATS), metavar="FORMAT", help="input format (listed above)")
    p.add_argument("--input", required=True, help="input file or folder (see the format)")
    p.add_argument("--corpus", help="corpus file, where the format takes one separately")
    p.add_argument("--queries", help="queries file (msmarco, beir)")
    p.add_argument("--qrels", help="qrels file (msmarco, beir)")
    p.add_argument("--split", help="split name: qrels/<split>.tsv (beir), queries.<split>.tsv (msmarco)")
    p.add_argument("--rule", choices=["title-match", "answer"], help="popqa labelling rule (default title-match)")
    p.add_argument("--to", required=True, choices=TARGETS, help="output format")
    p.add_argument("--output", required=True, help="output file (.gz compresses)")
    p.add_argument("--prompt", help="FlagEmbedding 'prompt' to write (overrides the input's)")
    p.add_argument("--skip-bad", action="store_true", help="skip bad rows; keep them in <output>.rejects/")
    p.add_argument("--fix-mojibake", action="store_true", help="repair UTF-8 read as Latin-1 (MS MARCO)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.set_defaults(func=run)

