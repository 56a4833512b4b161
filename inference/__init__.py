"""Load exported CRAG models and score with them.

    import inference
    model = inference.load("outputs/evaluator-quickstart")      # reads evaluator.json
    model.score([("who wrote hamlet", "Hamlet is a tragedy by William Shakespeare ...")])  # [0.97]
    model.grade("who wrote hamlet", chunks)                       # Correct / Ambiguous / Incorrect

    clf = inference.load("outputs/answer-classifier-quickstart", task="answer_classifier")
    clf.has_answer("who wrote hamlet", chunks)                    # [AnswerCheck(score=0.93, has_answer=True), ...]
    ext = inference.load("outputs/extractor-quickstart", task="extractor")
    ext.extract("who wrote hamlet", passage, top_k=3)             # [KeySentence(text, start, end, score), ...]

Serving imports no training code and no training-only package. Command line:
``python -m inference score|evaluate ...`` (see ``inference/cli.py``).
"""

from .loading import ExportError, load, read_export
from .manifest import Manifest
from .tasks import TASKS, register_loader

__all__ = ["load", "read_export", "register_loader", "ExportError", "TASKS", "Manifest"]
