"""Versioned prompts, one YAML file per task (``data_prep/labelling/prompts/<task>.yaml``).

A prompt file holds ``id``, ``version`` (an integer: change it whenever the wording changes, since
it is part of every cache key), ``task``, ``system``, ``user`` and ``repair`` (the message that
shows the model why its last reply was refused). Placeholders are replaced literally, so the JSON
examples in a prompt need no escaping: ``{query}``, ``{passage}`` (the passage, title first when it
has one), ``{sentences}`` (numbered sentences, task ``sentences``), ``{max_key}`` and, in
``repair``, ``{error}``.

Retrieved text is data: it is placed between ``<passage>`` and ``</passage>``, and a closing tag
inside the text is defused, so a passage cannot end the fence and speak to the model as the prompt.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..text import Sentence

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
#: the labelling tasks and what each writes
TASKS = {
    "relevance": "graded relevance 0-3 (soft label grade / 3)",
    "answer": "does the passage hold the direct answer (label 1 / 0)",
    "sentences": "which sentences are key (one pair per sentence, label 1 / 0)",
}
#: the most key sentences the sentences prompt asks for
MAX_KEY_SENTENCES = 3
FIELDS = ("id", "version", "task", "system", "user", "repair")


class PromptError(ValueError):
    """A prompt file that cannot be used (the message names the file and the field)."""


@dataclass(frozen=True)
class Prompt:
    id: str
    version: int
    task: str
    system: str
    user: str
    repair: str
    path: str
    sha256: str

    @property
    def name(self) -> str:
        return f"{self.id}@v{self.version}"


def load_prompt(task: str, path: str | os.PathLike | None = None) -> Prompt:
    """The bundled prompt of ``task``, or the prompt file ``path`` (whose ``task`` must match)."""
    import yaml

    if task not in TASKS:
        raise PromptError(f"unknown labelling task {task!r}; tasks: {', '.join(TASKS)}")
    p = Path(path) if path is not None else PROMPT_DIR / f"{task}.yaml"
    if not p.is_file():
        raise PromptError(f"prompt file not found: {p}")
    raw = p.read_bytes()
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise PromptError(f"{p}: not a readable YAML prompt file ({e})") from None
    if not isinstance(data, dict):
        raise PromptError(f"{p}: a prompt file is a mapping of {', '.join(FIELDS)}")
    missing = [k for k in FIELDS if k not in data]
    if missing:
        raise PromptError(f"{p}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise PromptError(f"{p}: unknown field(s) {', '.join(unknown)} (fields: {', '.join(FIELDS)})")
    if data["task"] != task:
        raise PromptError(f"{p}: a prompt for task {data['task']!r}, not {task!r}")
    if isinstance(data["version"], bool) or not isinstance(data["version"], int) or data["version"] < 1:
        raise PromptError(f"{p}: 'version' must be a positive integer, got {data['version']!r}")
    for k in ("id", "system", "user", "repair"):
        if not isinstance(data[k], str) or not data[k].strip():
            raise PromptError(f"{p}: '{k}' must be a non-empty string")
    needs = ["{query}", "{sentences}" if task == "sentences" else "{passage}"]
    for token in needs:
        if token not in data["user"]:
            raise PromptError(f"{p}: 'user' must contain the placeholder {token}")
    if "{error}" not in data["repair"]:
        raise PromptError(f"{p}: 'repair' must contain the placeholder {{error}}")
    return Prompt(data["id"], data["version"], task, data["system"].strip(), data["user"].strip(),
                  data["repair"].strip(), str(p), hashlib.sha256(raw).hexdigest())


def fence(text: str) -> str:
    """``text`` made safe to sit between ``<passage>`` tags (a closing tag inside is defused)."""
    return text.replace("</passage>", "</ passage>").replace("<passage>", "< passage>")


def passage_block(title: str, text: str) -> str:
    return fence(f"{title}\n{text}" if title else text)


def numbered(sentences: list[Sentence] | list[str]) -> str:
    return "\n".join(f"[{i}] {fence(s if isinstance(s, str) else s.text)}" for i, s in enumerate(sentences))


def fill(template: str, **values: str) -> str:
    """Placeholders of ``template`` replaced in one pass (text put in is never scanned again)."""
    pattern = re.compile("|".join(re.escape("{" + k + "}") for k in values))
    return pattern.sub(lambda m: values[m.group(0)[1:-1]], template)


def messages(prompt: Prompt, query: str, title: str = "", text: str = "",
             sentences: list[Sentence] | list[str] | None = None) -> list[dict[str, str]]:
    """The chat messages asking ``prompt``'s question about one pair."""
    user = fill(prompt.user, query=" ".join(query.split()), passage=passage_block(title, text),
                sentences=numbered(sentences or []), max_key=str(MAX_KEY_SENTENCES))
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


def repair(prompt: Prompt, error: str) -> str:
    return fill(prompt.repair, error=error)
