"""The docs site: it builds strictly, its generated reference holds every flag and config key, and
the hand-written pages describe every flag and key too.

The reference pages come from ``scripts/gen_docs_reference.py`` (a mkdocs hook); these tests call
the same functions, so what they check is what the site shows.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gen():
    if "gen_docs_reference" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gen_docs_reference", ROOT / "scripts" / "gen_docs_reference.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gen_docs_reference"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["gen_docs_reference"]


gen = _gen()


def hand_written_pages() -> list[Path]:
    """README.md and docs/*.md: the pages people write (not docs/reference/, which is generated,
    nor the developer notes that mkdocs.yml leaves out of the site)."""
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if not p.name.endswith("-notes.md"))


def code_text(md: str) -> str:
    """The fenced blocks and inline code spans of a Markdown page, one per line."""
    fenced = re.findall(r"^ *(```|~~~)[^\n]*\n(.*?)^ *\1", md, flags=re.S | re.M)
    rest = re.sub(r"^ *(```|~~~)[^\n]*\n.*?^ *\1", "", md, flags=re.S | re.M)
    spans = [m.group(2) for m in re.finditer(r"(`+)(.+?)\1", rest, flags=re.S)]
    return "\n".join([body for _, body in fenced] + spans)


def _mentions_flag(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def _mentions_key(code: str, key: str) -> bool:
    """A key is documented where a page names it as code: `key`, `key: value` in a YAML block,
    `--key value` on a command line; a nested pipeline setting by its own name or its dotted path."""
    return any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", code) for k in {key, key.rsplit(".", 1)[-1]})


def undocumented() -> list[str]:
    """Every flag and config key that no hand-written page describes, with where it comes from."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in hand_written_pages())
    code = code_text(text)
    missing = []
    for flag, f in gen.cli_flags().items():
        if not any(_mentions_flag(text, n) for n in f.names if n.startswith("--")) \
                and not any(_mentions_flag(text, n) for n in f.names):
            missing.append(f"{flag}\tflag of {', '.join(dict.fromkeys(f.commands))}")
    for key, where in gen.config_keys().items():
        if not _mentions_key(code, key):
            missing.append(f"{key}\tconfig key of {', '.join(where)}")
    return missing


# --------------------------------------------------------------------------------------------
# every command line is in the reference


def _main_guarded() -> list[str]:
    """The command a user types for each module of the packages that runs as a program."""
    out = []
    for pkg in ("data_prep", "inference", "pipeline", "training", "integrations"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if not re.search(r'^if __name__ == "__main__":', f.read_text(encoding="utf-8"), flags=re.M):
                continue
            rel = f.relative_to(ROOT)
            if rel.parts[0] == "training" and rel.name.startswith("train_"):
                out.append(f"accelerate launch {rel.as_posix()}")
            elif rel.name in ("__main__.py", "cli.py"):
                out.append("python -m " + ".".join(rel.parts[:-1]))
            else:
                out.append("python -m " + ".".join(rel.with_suffix("").parts))
    return out


def test_every_command_line_is_in_the_reference():
    listed = {e.command for e in gen.ENTRIES}
    missing = sorted(set(_main_guarded()) - listed)
    assert not missing, f"command lines missing from ENTRIES in scripts/gen_docs_reference.py: {missing}"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"].get("scripts", {})
    modules = {e.module for e in gen.ENTRIES}
    for name, target in scripts.items():
        assert target.split(":")[0] in modules, f"console script {name} ({target}) has no entry in the CLI reference"


def _sections(md: str) -> dict[str, str]:
    """``{anchor: the text up to the next heading with an anchor}`` of a reference page."""
    parts = re.split(r"^#+ .*\{ #([a-z0-9-]+) \}$", md, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_cli_reference_has_every_flag_with_help_default_and_choices():
    sections = _sections(gen.cli_reference())
    for c in gen.commands():
        body = sections[gen._anchor(c.name)]
        for _, actions in gen._documented_actions(c.parser):
            for a in actions:
                if not a.option_strings:
                    continue
                row = next((line for line in body.splitlines() if line.startswith(f"| `{a.option_strings[0]}`")), None)
                assert row is not None, f"{c.name}: {a.option_strings[0]} is not in the CLI reference"
                for name in a.option_strings:
                    assert f"`{name}`" in row
                if a.help:
                    assert gen._cell(gen._help(a, c.parser.prog)) in row
                for choice in a.choices or ():
                    assert f"`{choice}`" in row, f"{c.name} {a.option_strings[0]}: choice {choice!r} not shown"
        for sub in c.subcommands:
            assert f"#{gen._anchor(c.name + ' ' + sub)}" in body, f"{c.name}: subcommand {sub} not linked"


def test_cli_reference_rows_read_as_help_does():
    body = _sections(gen.cli_reference())["python-m-training-distill"]
    row = next(line for line in body.splitlines() if line.startswith("| `--mix`"))
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells == ["`--mix` `MIX`", "replace: the teacher's score; max: keep gold 1s", "`replace`", "`replace`, `max`"]
    row = next(line for line in body.splitlines() if line.startswith("| `--teacher`"))
    assert "| required |" in row


def test_config_reference_has_every_key_with_type_default_and_help():
    sections = _sections(gen.config_reference())
    for c in gen.CONFIGS:
        body = sections[gen._anchor(c.title)]
        keys = c.table_keys()  # a task config lists what it adds or changes; the rest is in the base's table
        for k in keys:
            row = next((line for line in body.splitlines() if line.startswith(f"| `{k.name}` |")), None)
            assert row is not None, f"{c.cls}: key {k.name} is not in the configuration reference"
            assert gen._code(k.type) in row
            if k.help:
                assert gen._cell(k.help) in row


@pytest.mark.parametrize("config", gen.CONFIGS, ids=lambda c: c.cls)
def test_every_config_key_has_help_text(config):
    """STYLE.md: help text on every field (the reference shows it; a comment beside the field counts)."""
    bare = [k.name for k in gen.config_fields(config.load()) if not k.nested and not k.help]
    assert not bare, f"{config.cls}: keys without help text: {', '.join(bare)}"


def test_the_reference_pages_are_generated_not_committed():
    for uri in gen.PAGES:
        assert not (ROOT / "docs" / uri).exists(), f"docs/{uri} is generated at build time; delete it"


# --------------------------------------------------------------------------------------------
# the hand-written pages


def test_hand_written_docs_describe_every_flag_and_key():
    missing = undocumented()
    assert not missing, (f"{len(missing)} flags and config keys are not described in README.md or docs/*.md "
                         "(the generated reference lists them, but a guide should say when to use them):\n"
                         + "\n".join(missing))


# --------------------------------------------------------------------------------------------
# the site


def test_site_builds_strictly(tmp_path):
    for mod in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(mod, reason="the docs extra is not installed: pip install -e '.[docs]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--teacher" in cli and "python -m data_prep mine" in cli
    assert "learning_rate" in (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    assert 'id="inference.load"' in (site / "reference" / "api" / "inference" / "index.html").read_text(encoding="utf-8")
