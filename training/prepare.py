"""Build a recipe's dataset once, before training, if it is not there yet (mine, then build).

A recipe's ``prepare_data`` names the source (``format``, ``input`` and the reader's other paths),
where the mined examples go (``mined_dir``), and the options of the two steps as the fields of
:class:`data_prep.mining.MiningConfig` (``mine:``) and :class:`data_prep.build.BuildConfig`
(``build:``). It runs on the main process only; the other processes wait. Training itself only
ever reads the built files.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SOURCE_KEYS = ("format", "input", "corpus", "queries", "qrels", "split")


def dataset_ready(dataset_dir: str | Path, build_dir: str | None = None) -> bool:
    d = Path(dataset_dir)
    return (d / "meta.json").exists() and (build_dir is None or (d / build_dir).is_dir())


def mining_config(opts: dict[str, Any]):
    """A :class:`~data_prep.mining.MiningConfig` from a recipe's ``mine:`` mapping (its field names;
    ``window`` may be written ``"3:100"``)."""
    from data_prep.mining import MiningConfig, parse_window

    opts = dict(opts)
    known = {f.name for f in fields(MiningConfig)}
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ValueError(f"prepare_data.mine: unknown option(s) {', '.join(unknown)} (MiningConfig fields: {', '.join(sorted(known))})")
    if isinstance(opts.get("window"), str):
        opts["window"] = parse_window(opts["window"])
    return MiningConfig(**opts)


def prepare_dataset(cfg) -> None:
    """Mine and build ``cfg.dataset_dir`` from ``cfg.prepare_data``, and each ``train_mix`` source's
    ``dataset_dir`` from its ``prepare``, unless they already exist."""
    for src in cfg.train_mix or []:
        if src.get("prepare") and not dataset_ready(src["dataset_dir"], cfg.task.build_dir):
            _prepare(src["dataset_dir"], dict(src["prepare"]), f"train_mix source {src['name']!r}: prepare")
    if cfg.train_file or not cfg.dataset_dir or dataset_ready(cfg.dataset_dir, cfg.task.build_dir):
        return
    spec = dict(cfg.prepare_data or {})
    if not spec:
        raise FileNotFoundError(
            f"dataset_dir {cfg.dataset_dir} has no built {cfg.task.build_dir}/ dataset (meta.json) and the recipe has "
            "no prepare_data"
        )
    _prepare(cfg.dataset_dir, spec, "prepare_data")


def _prepare(dataset_dir: str, spec: dict[str, Any], where: str) -> None:
    from data_prep.build import BuildConfig, build
    from data_prep.mining import run_mining
    from data_prep.readers import open_source

    mined_dir = Path(spec.pop("mined_dir"))
    mine_cfg = mining_config(spec.pop("mine", {}) or {})
    build_opts = dict(spec.pop("build", {}) or {})
    unknown = sorted(set(spec) - set(SOURCE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (source keys: {', '.join(SOURCE_KEYS)}, "
                         "mined_dir, mine, build)")
    if not (mined_dir / "examples.jsonl").exists():
        logger.info("mining hard negatives into %s", mined_dir)
        fmt = spec.pop("format")
        source = open_source(fmt, **spec)
        run_mining(source, mined_dir, mine_cfg)
    logger.info("building task datasets into %s", dataset_dir)
    build(BuildConfig(input=str(mined_dir / "examples.jsonl"), output=str(dataset_dir), overwrite=True, **build_opts))
