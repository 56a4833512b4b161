"""Score calibration as stored in a manifest and applied when scoring.

Every head produces a real-valued logit ``z`` per pair. A calibration maps it to a probability:

* ``platt``: ``p = sigmoid(a * z + b)``
* ``temperature``: ``p = sigmoid(z / T)`` (stored as ``a = 1 / T``, ``b = 0``)
* ``none``: ``p = sigmoid(z)``

Fitting (on a dev split) is training's job (:mod:`training.fitting`); this module only applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: calibration method -> one-line description (the list a training config is validated against)
CALIBRATION_METHODS = {
    "platt": "sigmoid(a * z + b), a and b fitted by log loss on dev",
    "temperature": "sigmoid(z / T), T fitted by log loss on dev",
    "none": "sigmoid(z)",
}


def sigmoid(logits: Sequence[float] | np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(-z))


@dataclass
class Calibration:
    method: str = "none"
    a: float = 1.0
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in CALIBRATION_METHODS:
            raise ValueError(f"unknown calibration method {self.method!r} (one of {', '.join(CALIBRATION_METHODS)})")
        for name in ("a", "b"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"calibration {name} must be a finite number, got {v!r}")
            setattr(self, name, float(v))

    def apply(self, logits: Sequence[float] | np.ndarray) -> np.ndarray:
        return sigmoid(self.a * np.asarray(logits, dtype=np.float64) + self.b)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "a": self.a, "b": self.b}
        if self.method == "temperature":
            d["temperature"] = 1.0 / self.a
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibration":
        return cls(method=d["method"], a=d["a"], b=d["b"])
