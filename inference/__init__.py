"""Load exported CRAG models and score with them.

    import inference
    model = inference.load("outputs/evaluator-quickstart")      # reads evaluator.json
    model.score([("who wrote hamlet", "Hamlet is a tragedy by William Shakespeare ...")])  # [0.97]
    model.grade("who wrote hamlet", chunks)                       # Correct / Ambiguous / Incorrect

Command line: ``python -m inference score|evaluate ...`` (see ``inference/cli.py``).
"""

from .loading import TASKS, ExportError, load, read_export, register_task

__all__ = ["load", "read_export", "register_task", "ExportError", "TASKS"]
