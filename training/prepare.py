"""Build a recipe's dataset once, before training, if it is not there yet (mine, then build).

Runs ``python -m data_prep mine`` and ``python -m data_prep build`` with the recipe's
``prepare_data`` options, on the main process only; the other processes wait. Training itself
only ever reads the built files.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _flags(opts: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif v is False or v is None:
            continue
        else:
            out.extend([flag, str(v)])
    return out


def dataset_ready(dataset_dir: str | Path) -> bool:
    return (Path(dataset_dir) / "meta.json").exists()


def prepare_dataset(cfg) -> None:
    """Mine and build ``cfg.dataset_dir`` from ``cfg.prepare_data`` unless it already exists."""
    if cfg.train_file or not cfg.dataset_dir or dataset_ready(cfg.dataset_dir):
        return
    spec = dict(cfg.prepare_data or {})
    if not spec:
        raise FileNotFoundError(
            f"dataset_dir {cfg.dataset_dir} has no built dataset (meta.json) and the recipe has no prepare_data"
        )
    from data_prep.cli import main as data_prep_main

    mined_dir = Path(spec.pop("mined_dir"))
    mine_opts = dict(spec.pop("mine", {}) or {})
    build_opts = dict(spec.pop("build", {}) or {})
    source = _flags(spec)  # format, input, corpus, queries, qrels, split ...
    if not (mined_dir / "examples.jsonl").exists():
        logger.info("mining hard negatives into %s", mined_dir)
        rc = data_prep_main(["mine", *source, "--output", str(mined_dir), *_flags(mine_opts)])
        if rc:
            raise RuntimeError(f"mining failed (exit {rc})")
    logger.info("building task datasets into %s", cfg.dataset_dir)
    rc = data_prep_main(["build", "--input", str(mined_dir / "examples.jsonl"), "--output", str(cfg.dataset_dir),
                         "--overwrite", *_flags(build_opts)])
    if rc:
        raise RuntimeError(f"building the dataset failed (exit {rc})")
