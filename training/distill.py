"""Key-sentence labels distilled from an exported evaluator: the teacher scores each (query, sentence)
pair and its calibrated probability becomes the sentence's soft label.

    python -m training.distill --teacher outputs/evaluator-quickstart \\
        --input outputs/datasets/squad/extractor/train.pairs.jsonl --output outputs/distilled/train.pairs.jsonl \\
        [--mix max|replace] [--overwrite]

Use it where passages have no gold answers or rationales to label sentences by (an extractor for a
domain whose only labels are passage-level relevance), then train the extractor on the output with
``loss: soft-bce``. ``--mix max`` keeps a sentence labelled 1 by its gold answer at 1 and takes the
teacher's score for the rest; ``replace`` (default) uses the teacher's score alone. Each output pair
has ``label_source = distilled`` and ``metadata.teacher`` (the export and its sha256 of weights),
``metadata.original_label``. The teacher is loaded through :func:`inference.load` (any task that
scores pairs); the output is written atomically, by one run at a time (a second run on the same
``--output`` is refused while the first runs: ``<output>.lock``, :mod:`data_prep.locking`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from data_prep.cluster import add_ray_args, ray_options
from data_prep.io import atomic_write, read_records, require_path, write_json
from data_prep.locking import locks_output
from data_prep.records import LabelledPair

logger = logging.getLogger(__name__)

MIX = ("replace", "max")


@locks_output("output_file", "distilled labels")  # one run per output (data_prep.locking)
def distill_labels(teacher_dir: str, input_file: str, output_file: str, mix: str = "replace", overwrite: bool = False,
                   device: str | None = None, chunk: int = 4096, ray=None) -> dict[str, Any]:
    """Write ``input_file``'s pairs with the teacher's calibrated scores as labels; returns the summary.

    ``ray`` (:class:`data_prep.cluster.RayOptions`): the teacher scores on a Ray actor pool
    (:mod:`inference.distributed`, one load per actor); the labels are the same numbers."""
    import inference

    if mix not in MIX:
        raise ValueError(f"--mix must be one of {', '.join(MIX)}, got {mix!r}")
    out = Path(output_file)
    if out.exists() and not overwrite:
        raise ValueError(f"output exists: {out} (pass --overwrite to replace it)")
    src = require_path(input_file, "input file")
    teacher = inference.load(teacher_dir, device=device)
    info = {"export": str(teacher_dir), "task": teacher.task, "files_sha256": teacher.manifest.model.files_sha256}
    n = changed = 0
    total = 0.0
    with atomic_write(out) as f:
        batch: list[LabelledPair] = []

        def flush(scores=None) -> None:
            nonlocal n, changed, total
            if scores is None:
                scores = teacher.score([(p.query, p.passage) for p in batch])
            for p, s in zip(batch, scores):
                label = max(s, p.label) if mix == "max" and p.label >= 0.5 else s
                label = min(max(float(label), 0.0), 1.0)
                rec = LabelledPair(p.query_id, p.query, p.passage, label, "distilled",
                                   {**p.metadata, "teacher": info, "original_label": p.label,
                                    "original_label_source": p.label_source})
                f.write(json.dumps(rec.to_dict(), ensure_ascii=False) + "\n")
                n += 1
                total += label
                changed += (label >= 0.5) != (p.label >= 0.5)
            batch.clear()

        if ray is not None:
            from inference.distributed import LoadOptions, score_blocks

            pairs = list(read_records(src, LabelledPair))
            queries, passages = teacher.texts((p.query, p.passage) for p in pairs)
            for lo, hi, (probs, _, _) in score_blocks(ray, LoadOptions(str(teacher_dir), device), queries, passages, chunk):
                batch.extend(pairs[lo:hi])
                flush(probs.tolist())
        else:
            for pair in read_records(src, LabelledPair):
                batch.append(pair)
                if len(batch) >= chunk:
                    flush()
        if batch:
            flush()
        if n == 0:
            raise ValueError(f"{src}: no pairs to distil")
    summary = {"input": str(src), "output": str(out), "teacher": info, "mix": mix, "pairs": n,
               "mean_label": total / n, "decisions_changed": changed}
    write_json(out.parent / f"{out.name}.meta.json", summary)
    return summary


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training.distill", description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", required=True, help="an export folder (evaluator, or any task that scores pairs)")
    ap.add_argument("--input", required=True, help="LabelledPair JSONL (e.g. a build's extractor/train.pairs.jsonl)")
    ap.add_argument("--output", required=True, help="LabelledPair JSONL with soft labels")
    ap.add_argument("--mix", choices=MIX, default="replace", help="replace: the teacher's score; max: keep gold 1s")
    ap.add_argument("--device", default=None)
    ap.add_argument("--overwrite", action="store_true")
    add_ray_args(ap.add_argument_group("Ray cluster: the teacher on an actor pool (inference.distributed)"))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from data_prep.io import DataError

    from inference.manifest import ExportError

    try:
        s = distill_labels(args.teacher, args.input, args.output, args.mix, args.overwrite, args.device,
                           ray=ray_options(args))
    except (DataError, ExportError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"distilled {s['pairs']} pairs into {s['output']} (mean label {s['mean_label']:.3f}; "
          f"{s['decisions_changed']} cross 0.5 against the original label)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
