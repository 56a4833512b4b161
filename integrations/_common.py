"""What the framework components share: the models they grade with, local or remote, and CRAG's
routing of one query's documents (drop Incorrect, refine Ambiguous, keep Correct)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


def resolve_models(evaluator: Any = None, extractor: Any = None, base_url: str | None = None,
                   api_key: str | None = None, device: str | None = None) -> tuple[Any, Any]:
    """``(evaluator, extractor)`` objects with ``grade`` / ``extract_many``: an export folder is
    loaded (``inference.load``), a loaded model is used as it is, and with ``base_url`` the server's
    (``python -m inference serve``; the extractor when ``extractor`` is ``True`` or the server's
    ``/info`` lists one)."""
    if base_url is not None:
        from inference.serving.client import RemoteEvaluator, RemoteExtractor

        if evaluator is not None and not isinstance(evaluator, RemoteEvaluator):
            raise ValueError("give either an evaluator (a folder or a loaded model) or base_url, not both")
        ev = RemoteEvaluator(base_url, api_key=api_key)
        if extractor is True or extractor is None:
            served = ev.info().get("models", {})
            ex = RemoteExtractor(base_url, api_key=api_key) if "extractor" in served else None
            if extractor is True and ex is None:
                raise ValueError(f"{base_url} serves no extractor (start it with --extractor DIR)")
        else:
            ex = _load(extractor, "extractor", device)
        return ev, ex
    if evaluator is None:
        raise ValueError("an evaluator is needed: an export folder, a loaded model, or base_url")
    return _load(evaluator, "evaluator", device), _load(extractor, "extractor", device)


def _load(model: Any, task: str, device: str | None) -> Any:
    if model is None or model is False:
        return None
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        import inference

        return inference.load(model, task=task, device=device)
    method = "grade" if task == "evaluator" else "extract_many"
    if not hasattr(model, method):
        raise TypeError(f"the {task} must be an export folder, a loaded {task} or a remote one, got "
                        f"{type(model).__name__}")
    return model


@dataclass
class Routed:
    """One document after CRAG's routing: its position, score, action and the text to keep."""

    index: int
    score: float
    action: str
    text: str


def route(evaluator: Any, extractor: Any, query: str, texts: Sequence[str], theta_high: float | None = None,
          theta_low: float | None = None, top_k: int | None = None) -> tuple[str, list[Routed]]:
    """Grade ``texts`` for ``query``; the query's action, and the documents kept in input order:
    Correct ones whole, Ambiguous ones refined to their key sentences (whole when there is no
    extractor), Incorrect ones dropped. Blank texts (a retriever's empty chunks, which the models
    refuse) are dropped ungraded; with none left the query is Incorrect."""
    texts = list(texts)
    graded = [i for i, t in enumerate(texts) if not (isinstance(t, str) and not t.strip())]
    if not graded:
        return "Incorrect", []
    grade = evaluator.grade(query, [texts[i] for i in graded], theta_high=theta_high, theta_low=theta_low)
    chunks = [(graded[c.index], c) for c in grade.chunks]  # positions in ``texts``
    ambiguous = [i for i, c in chunks if c.action == "Ambiguous"]
    refined: dict[int, str] = {}
    if extractor is not None and ambiguous:
        for i, sents in zip(ambiguous, extractor.extract_many([(query, texts[i]) for i in ambiguous], top_k=top_k)):
            refined[i] = " ".join(s.text for s in sents) or texts[i]
    kept = [Routed(i, c.score, c.action, refined.get(i, texts[i])) for i, c in chunks if c.action != "Incorrect"]
    return grade.action, kept
