"""What the three entry scripts share: config, launch check, data, train, report."""

from __future__ import annotations

import logging

from .config import TrainConfig, parse_cli

REPORT_KEYS = ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10", "p@1",
               "r@3", "mrr")


def decision_line(decision) -> str:
    d = decision.to_dict()
    if "theta_high" in d:
        return f"thresholds: theta_high={d['theta_high']:.4f} theta_low={d['theta_low']:.4f} ({d['method']})"
    if "threshold" in d:
        return f"threshold: {d['threshold']:.4f} ({d['method']}, rule {d['rule']})"
    ms = "none" if d["min_score"] is None else f"{d['min_score']:.4f}"
    return f"sentences: top_k={d['top_k']} min_score={ms} ({d['method']})"


def main(argv: list[str], config_cls: type[TrainConfig]) -> int:
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    from .core import train_model
    from .prepare import prepare_dataset
    from .trainer import check_launch

    # 1. config: recipe + overrides, validated before anything heavy happens
    cfg = parse_cli(argv, config_cls)
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # CPU DDP only when asked for
    logging.basicConfig(level=logging.INFO if state.is_main_process else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_launch(state)

    # 2. data: mined and built once, on the main process
    with state.main_process_first():
        if state.is_main_process:
            prepare_dataset(cfg)

    # 3. train, calibrate, fit the decision, export
    result = train_model(cfg)

    # 4. report
    if state.is_main_process and result.export_dir is not None:
        m = result.dev_metrics
        print(f"\nDev metrics of the {cfg.task.title} (calibrated):")
        for k in REPORT_KEYS:
            if m.get(k) is not None:
                print(f"  {k:>10}: {m[k]:.4f}" if isinstance(m[k], float) else f"  {k:>10}: {m[k]}")
        print(f"  {decision_line(result.manifest.thresholds)}")
        print(f"\nExport: {result.export_dir}")
    return 0
