"""Relabel retrieved (query, passage) pairs by CRAG's rule: relevant when the passage's title equals
the title of the query's gold passage.

    python scripts/crag_title_labels.py --input PAIRS.jsonl --output OUT.jsonl [--json STATS.json]

The official CRAG evaluator data labels each Contriever top-10 passage of a PopQA question 1 when
its Wikipedia title equals the question's ``s_wiki_title``, else 0 (../shared/docs/FACTS.md). This
script applies the same rule to pairs built by ``data_prep build --tasks answer`` from mined top-k
hits (each query's gold passage has ``metadata.role == "positive"``; its title stands in for
``s_wiki_title``), so an export can be checked on data of the CRAG kind with
``python -m inference evaluate``. Queries without a gold passage, or whose gold passage has no
title, are skipped and counted (never dropped silently); ``label_source`` becomes ``title-match``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout


def relabel(pairs: list) -> tuple[list, dict]:
    """``(relabelled pairs, stats)`` for :class:`~data_prep.records.LabelledPair` objects."""
    by_query: dict[str, list] = defaultdict(list)
    for p in pairs:
        by_query[p.query_id].append(p)
    out, changes, skipped = [], Counter(), Counter()
    for qid, group in by_query.items():
        gold = {p.passage.title for p in group if p.metadata.get("role") == "positive"}
        if not gold:
            skipped["no-gold-passage"] += 1
            continue
        if "" in gold:
            skipped["gold-without-title"] += 1
            continue
        for p in group:
            new = float(p.passage.title in gold)
            changes[f"{p.label:g}->{new:g}"] += 1
            p.label, p.label_source = new, "title-match"
            out.append(p)
    stats = {"queries": len(by_query) - sum(skipped.values()), "pairs": len(out),
             "positives": sum(p.label == 1.0 for p in out), "skipped_queries": dict(skipped),
             "label_changes": dict(sorted(changes.items()))}
    return out, stats


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="LabelledPair JSONL (data_prep build --tasks answer)")
    ap.add_argument("--output", required=True, help="where to write the relabelled pairs")
    ap.add_argument("--json", help="also write the counts here")
    ap.add_argument("--overwrite", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from data_prep.io import DataError, read_records, write_json, write_jsonl
    from data_prep.records import LabelledPair

    if Path(args.output).exists() and not args.overwrite:
        raise SystemExit(f"{args.output} exists; pass --overwrite to replace it")
    try:
        pairs, stats = relabel(list(read_records(args.input, LabelledPair)))
    except DataError as e:  # names the file and line
        raise SystemExit(f"error: {e}") from None
    if not pairs:
        raise SystemExit(f"{args.input}: no query has a gold passage with a title (role 'positive'); nothing to write")
    write_jsonl(args.output, pairs)
    if args.json:
        write_json(args.json, stats)
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
