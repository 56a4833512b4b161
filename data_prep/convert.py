"""``python -m data_prep convert``: any supported format to our JSONL, FlagEmbedding, or pairs.

    python -m data_prep convert --format beir --input data/scifact --split train \\
        --to queries --output out/scifact.train.jsonl [--skip-bad] [--overwrite]

``--to queries`` writes :class:`~data_prep.records.QueryExample` JSONL, ``--to flagembedding``
FlagEmbedding reranker data, ``--to pairs`` :class:`~data_prep.records.LabelledPair` JSONL
(the format's own pairs where it has them, else positives as 1 and negatives as 0). The output is
written atomically, with ``<output>.meta.json`` (parameters and counts) beside it; an existing
output is refused unless ``--overwrite``. With ``--skip-bad`` bad rows go, unchanged, to
``<output>.rejects/`` and their counts are printed.

Examples without a positive (legitimate in some formats: SQuAD v2 unanswerable questions, MS MARCO
queries with nothing selected) are counted in ``meta.json`` (``examples``, with the first ids) and
printed; ``--to flagembedding`` leaves out examples without a positive or a negative and counts
them under ``skipped``. A run that would write nothing - an input whose every row was rejected, or
none of whose examples can be written - is an error (exit code 2) and leaves no output behind.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from tqdm import tqdm

from .io import Rejects, no_records_error, rejected_line, require_records, write_json, write_jsonl
from .locking import locks_output
from .readers import FORMATS, PAIR_READERS, load_all, open_pairs, open_source
from .readers.flagembedding import write_flagembedding
from .records import QueryExample

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


class _ExampleTally:
    """Counts, as they stream by, the examples without positives or negatives (with the first
    ids), and the ones the target cannot hold; raises :func:`no_records_error` at the end when not
    one example can be written (inside the output's atomic write, so nothing is left behind)."""

    FIRST = 5

    def __init__(self, target: str):
        self.target = target
        self.read = 0
        self.without: dict[str, int] = {"positives": 0, "negatives": 0}
        self.first: dict[str, list[str]] = {"positives": [], "negatives": []}
        self.skipped: Counter[str] = Counter()

    def _note(self, what: str, qid: str) -> None:
        self.without[what] += 1
        if len(self.first[what]) < self.FIRST:
            self.first[what].append(qid)

    def watch(self, examples: Iterable[QueryExample], path: Any, rejects: Rejects | None) -> Iterator[QueryExample]:
        for ex in examples:
            self.read += 1
            if not ex.positives:
                self._note("positives", ex.id)
            if not ex.negatives:
                self._note("negatives", ex.id)
            if self.target == "flagembedding" and not (ex.positives and ex.negatives):
                self.skipped["no-positives" if not ex.positives else "no-negatives"] += 1
            yield ex
        if self.read == sum(self.skipped.values()):  # nothing to write
            detail = ""
            if self.read:
                why = ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items()))
                detail = f"{self.read} examples read, none has both a positive and a negative passage ({why})"
            raise no_records_error(path, rejects, "records to write", detail)

    def summary(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "without_positives": self.without["positives"],
            "without_negatives": self.without["negatives"],
            "first_without_positives": self.first["positives"],
            "first_without_negatives": self.first["negatives"],
        }


@locks_output("args.output", "converted output")  # one run per output (data_prep.locking)
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
    tally = _ExampleTally(args.to)
    t0 = time.time()
    try:
        if args.to == "pairs":
            pairs = require_records(open_pairs(args.format, **kwargs), args.input, rejects, "pairs to write")
            n = write_jsonl(out, _progress(pairs, "pairs"))
        else:
            src = open_source(args.format, **kwargs)
            examples = _progress(tally.watch(src.queries(), args.input, rejects), "queries")
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
        "examples": tally.summary() if args.to != "pairs" else None,
        "skipped": dict(sorted(tally.skipped.items())),
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
    ex = summary["examples"]
    if ex and ex["without_positives"]:
        print(f"note: {ex['without_positives']} of {ex['read']} examples have no positive passage "
              f"(e.g. {', '.join(ex['first_without_positives'])}); build gives them no evaluator pairs")
    if summary["skipped"]:
        why = ", ".join(f"{k}: {v}" for k, v in summary["skipped"].items())
        print(f"skipped {sum(summary['skipped'].values())} examples FlagEmbedding cannot hold ({why})")
    if args.skip_bad:
        print(rejected_line(summary["rejected"], summary.get("rejects_dir")))
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

