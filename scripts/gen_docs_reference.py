"""The generated pages of the docs site: the CLI reference and the configuration reference.

    python scripts/gen_docs_reference.py --out site-preview/reference   # write the two pages
    mkdocs build --strict                                             # runs this module as a hook

The CLI reference is read from the argparse parsers themselves (every flag with its help, default
and choices), the configuration reference from the config dataclasses (every key with its type,
default and help: ``metadata["help"]``, else the comment beside or above the field). mkdocs loads
this file as a hook (``hooks:`` in ``mkdocs.yml``): :func:`on_files` adds ``reference/cli.md`` and
``reference/config.md`` to the build as generated files, so the pages are never committed and
cannot drift from the code. ``tests/test_docs.py`` uses :func:`cli_flags` and :func:`config_keys`
to check that every flag and key is also described in the hand-written pages.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import inspect
import io
import os
import re
import sys
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # mkdocs loads hooks by path; the packages live in the checkout
    sys.path.insert(0, str(ROOT))
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_k, "1")

CLI_PAGE = "reference/cli.md"
CONFIG_PAGE = "reference/config.md"


# --------------------------------------------------------------------------------------------
# the command lines


@dataclass(frozen=True)
class Entry:
    """One command line: how it is run, and where its parser comes from."""

    command: str  # as a user types it
    module: str  # the module (or a repository-relative .py path) with the parser builder
    builder: str = "build_parser"
    config: str | None = None  # the training entry scripts: the config class the builder takes
    script: str | None = None  # the file a user runs, when it is not ``python -m module``

    def parser(self) -> argparse.ArgumentParser:
        build = getattr(_load(self.module), self.builder)
        parser = build() if self.config is None else build(_dotted(self.config))
        if self.module.endswith(".py"):  # its prog is sys.argv[0] otherwise: this script's name
            parser.prog = self.command
        return parser


#: every command line of the package (tests/test_docs.py checks that none is missing)
ENTRIES: tuple[Entry, ...] = (
    Entry("python -m data_prep", "data_prep.cli"),
    Entry("python -m inference", "inference.cli"),
    Entry("python -m pipeline", "pipeline.cli"),
    Entry("accelerate launch training/train_evaluator.py", "training.config",
          config="training.config.EvaluatorConfig", script="training/train_evaluator.py"),
    Entry("accelerate launch training/train_answer_classifier.py", "training.config",
          config="training.config.AnswerClassifierConfig", script="training/train_answer_classifier.py"),
    Entry("accelerate launch training/train_extractor.py", "training.config",
          config="training.config.ExtractorConfig", script="training/train_extractor.py"),
    Entry("python -m training.distill", "training.distill"),
    Entry("python scripts/crag_title_labels.py", "scripts/crag_title_labels.py", script="scripts/crag_title_labels.py"),
)


def _load(module: str):
    if not module.endswith(".py"):
        return importlib.import_module(module)
    name = "_docs_" + Path(module).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / module)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


@dataclass
class Command:
    """One parser: a command or a subcommand, with its argument groups."""

    name: str  # "python -m data_prep mine"
    help: str  # the one-line help its parent's subcommand list gives it
    parser: argparse.ArgumentParser
    subcommands: list[str]
    level: int  # 0: the entry itself, 1: its subcommands


def commands(entries: tuple[Entry, ...] = ENTRIES) -> Iterator[Command]:
    """Every parser and subparser, depth first, in the order ``--help`` lists them."""
    for e in entries:
        yield from _walk(e.command, "", e.parser(), 0)


def _walk(name: str, help: str, parser: argparse.ArgumentParser, level: int) -> Iterator[Command]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    names = [n for s in subs for n in s.choices]
    yield Command(name, help, parser, names, level)
    for s in subs:
        helps = {c.dest: c.help or "" for c in s._choices_actions}
        for sub_name, sub in s.choices.items():
            yield from _walk(f"{name} {sub_name}", helps.get(sub_name, ""), sub, level + 1)


def _documented_actions(parser: argparse.ArgumentParser) -> Iterator[tuple[str, list[argparse.Action]]]:
    """``(group title, actions)`` in the parser's order, without ``--help`` and the subcommand slot."""
    for g in parser._action_groups:
        acts = [a for a in g._group_actions
                if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS]
        if acts:
            yield g.title or "", acts


def flag_name(action: argparse.Action) -> str:
    """The name a reader looks for: the first long option (``--theta-high``), else the first option or the dest."""
    longs = [o for o in action.option_strings if o.startswith("--")]
    return (longs or action.option_strings or [action.dest])[0]


@dataclass
class Flag:
    names: list[str]  # every option string: ["-v", "--verbose"]
    commands: list[str]  # the commands that take it


def cli_flags(entries: tuple[Entry, ...] = ENTRIES) -> dict[str, Flag]:
    """``{flag: Flag}`` for every option of every command (positionals left out), keyed by
    :func:`flag_name`. A training script's ``--KEY VALUE`` overrides are config keys (:func:`config_keys`)."""
    out: dict[str, Flag] = {}
    for c in commands(entries):
        for _, acts in _documented_actions(c.parser):
            for a in acts:
                if a.option_strings:
                    f = out.setdefault(flag_name(a), Flag([], []))
                    f.names += [o for o in a.option_strings if o not in f.names]
                    f.commands.append(c.name)
    return out


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell: one line; ``<``, ``>``, ``&`` and ``|`` escaped outside
    code spans (inside one, Python-Markdown's tables already keep a ``|``)."""
    s = " ".join(str(text).split())
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(s):
        out += [_escape(s[pos:m.start()]), m.group(0)]
        pos = m.end()
    return "".join(out + [_escape(s[pos:])])


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _code(value: Any) -> str:
    """A value as an inline code span."""
    s = " ".join((value if isinstance(value, str) else repr(value)).split())
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def _help(action: argparse.Action, prog: str) -> str:
    """The help text with argparse's ``%(default)s``-style fields filled, as ``--help`` prints it."""
    h = action.help or ""
    if "%(" in h:
        params = dict(vars(action), prog=prog)
        if action.choices is not None:
            params["choices"] = ", ".join(map(str, action.choices))
        try:
            h = h % params
        except (KeyError, TypeError, ValueError):
            pass
    return h


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    d = action.default
    if action.nargs == 0 or d is None or d is argparse.SUPPRESS:  # a switch, or nothing to show
        return ""
    return _code(d)


def _form(action: argparse.Action) -> str:
    """How the option is written: ``--theta-high``, ``--threshold`` ``FLOAT``."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}` (positional)"
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar
    if metavar is None:  # argparse's own, except that a typed value says its type (INT, FLOAT)
        typed = action.choices is None and getattr(action.type, "__name__", None)
        metavar = typed.upper() if typed else action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    arg = {"+": f"{metavar} [...]", "*": f"[{metavar} ...]", "?": f"[{metavar}]"}.get(action.nargs, metavar)
    repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return f"{names} {_code(arg)}{repeat}"


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _description(parser: argparse.ArgumentParser) -> list[str]:
    d = (parser.description or "").strip("\n")
    if not d:
        return []
    if "\n" in d.strip():  # a docstring or a list of formats: as the terminal shows it
        return ["```text", inspect.cleandoc(d), "```", ""]
    return [_cell(d), ""]


def cli_reference(entries: tuple[Entry, ...] = ENTRIES) -> str:
    """The Markdown of ``reference/cli.md``."""
    cmds = list(commands(entries))
    lines = ["# Command-line reference", "",
             "Generated from the argparse parsers at build time (`scripts/gen_docs_reference.py`): every command, "
             "every flag with its help, default and choices, exactly as `--help` knows them. The guides explain when "
             "to use them.", ""]
    for e in entries:
        lines.append(f"- [`{e.command}`](#{_anchor(e.command)})" + (f" (`{e.script}`)" if e.script else ""))
        for c in cmds:
            if c.name.startswith(e.command + " "):
                lines.append(f"    - [`{c.name[len(e.command) + 1:]}`](#{_anchor(c.name)})")
    lines.append("")
    for c in cmds:
        lines += [f'{"#" * min(2 + c.level, 4)} `{c.name}` {{ #{_anchor(c.name)} }}', ""]
        lines += _description(c.parser) or ([_cell(c.help), ""] if c.help else [])
        lines += ["```text", c.parser.format_usage().strip().replace("usage: ", "", 1), "```", ""]
        if c.subcommands:
            lines += ["| Subcommand | What it does |", "|---|---|"]
            sub = next(a for a in c.parser._actions if isinstance(a, argparse._SubParsersAction))
            helps = {ca.dest: ca.help or "" for ca in sub._choices_actions}
            lines += [f"| [`{n}`](#{_anchor(c.name + ' ' + n)}) | {_cell(helps.get(n, ''))} |" for n in c.subcommands]
            lines.append("")
        for title, acts in _documented_actions(c.parser):
            if title not in ("options", "optional arguments", "positional arguments"):
                lines += [f"**{_cell(title)}**", ""]
            lines += ["| Flag | Help | Default | Choices |", "|---|---|---|---|"]
            for a in acts:
                choices = ", ".join(f"`{x}`" for x in a.choices) if a.choices is not None else ""
                lines.append(f"| {_form(a)} | {_cell(_help(a, c.parser.prog))} | {_default(a)} | {_cell(choices)} |")
            lines.append("")
        if c.parser.epilog and c.parser.epilog.startswith("Config keys"):
            lines += ["Every other `--KEY VALUE` overrides a key of the recipe: see the "
                      "[configuration reference](config.md).", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the config dataclasses


@dataclass(frozen=True)
class ConfigDoc:
    """One config file kind: the dataclass its keys fill, and where it is used."""

    title: str
    cls: str  # "training.config.EvaluatorConfig"
    used_by: str
    base: str | None = None  # keys inherited unchanged from this class are listed there, not here

    def load(self) -> type:
        return _dotted(self.cls)

    def load_base(self) -> type:
        return _dotted(self.base)

    def table_keys(self) -> list["Key"]:
        """The keys its table lists: all of them, or with a base, those it adds or sets differently."""
        keys = config_fields(self.load())
        if self.base is None:
            return keys
        base = {k.name: (k.type, k.default, k.help) for k in config_fields(self.load_base())}
        return [k for k in keys if base.get(k.name) != (k.type, k.default, k.help)]


def _dotted(path: str) -> type:
    mod, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(mod), name)


#: every config a user writes (tests/test_docs.py checks that each field has help here)
CONFIGS: tuple[ConfigDoc, ...] = (
    ConfigDoc("Training recipes: the keys every task shares", "training.config.TrainConfig",
              "the YAML recipes of `configs/` and the `--KEY VALUE` overrides of `training/train_*.py`"),
    ConfigDoc("Evaluator", "training.config.EvaluatorConfig", "`training/train_evaluator.py`",
              base="training.config.TrainConfig"),
    ConfigDoc("Answer classifier", "training.config.AnswerClassifierConfig", "`training/train_answer_classifier.py`",
              base="training.config.TrainConfig"),
    ConfigDoc("Extractor", "training.config.ExtractorConfig", "`training/train_extractor.py`",
              base="training.config.TrainConfig"),
    ConfigDoc("Pipeline settings", "pipeline.core.PipelineConfig",
              "the YAML file of `python -m pipeline ask|evaluate --config`, and `CragPipeline(config=...)`"),
)

_SECTION = re.compile(r"#\s*-{2,}\s*(.+?)\s*-{2,}\s*$")


def _field_comments(cls: type) -> dict[str, tuple[str, str]]:
    """``{field: (section, comment)}`` from the class source: ``# --- section ---`` lines group the
    fields below them; a comment on a field's line, or the comment lines just above it, describe it."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, tuple[str, str]] = {}
    section, pending, line_of = "", [], {}
    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    for i, t in enumerate(toks):
        if t.type == tokenize.COMMENT:
            m = _SECTION.match(t.string)
            if m:
                section, pending = m.group(1), []
            elif toks[i - 1].type in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) \
                    or toks[i - 1].start[0] != t.start[0]:
                pending.append(t.string.lstrip("#").strip())
            else:  # a trailing comment: belongs to the field started on this line
                name = line_of.get(t.start[0])
                if name and name in out:
                    out[name] = (out[name][0], (out[name][1] + " " + t.string.lstrip("#").strip()).strip())
        elif t.type == tokenize.NAME and t.string in names and t.start[1] == _indent(src, t.start[0]) \
                and i + 1 < len(toks) and toks[i + 1].string == ":" and t.string not in out:
            out[t.string] = (section, " ".join(pending))
            line_of[t.start[0]] = t.string
            pending = []
        elif t.type == tokenize.NAME and t.string in ("def", "class") and t.start[0] != 1:
            pending = []
    return out


def _indent(src: str, line: int) -> int:
    text = src.splitlines()[line - 1]
    return len(text) - len(text.lstrip())


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]" if args else name
    return str(tp).replace("typing.", "")


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


@dataclass
class Key:
    name: str  # dotted for nested settings: "grading.grade_k"
    type: str
    default: Any
    help: str
    section: str
    nested: bool = False  # a mapping of its own keys (listed after it)


def _docstring(cls: type) -> str:
    """The first paragraph of the class's own docstring (not the signature dataclass makes up without one)."""
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    return "" if doc.startswith(cls.__name__ + "(") else doc.split("\n\n")[0]


def config_fields(cls: type, prefix: str = "") -> list[Key]:
    """Every key of a config dataclass, nested dataclass fields flattened to ``outer.inner``."""
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    keys: list[Key] = []
    for f in dataclasses.fields(cls):
        section, comment = comments.get(f.name, ("", ""))
        default = _field_default(f)
        tp = hints.get(f.name, f.type)
        nested = dataclasses.is_dataclass(tp)
        help = f.metadata.get("help") or comment or (_docstring(tp) if nested else "")
        if nested:
            help = f"A mapping of the `{prefix}{f.name}.*` keys below ({tp.__name__}). {help}".strip()
        keys.append(Key(prefix + f.name, "mapping" if nested else _type_name(tp), None if nested else default,
                        " ".join(help.split()), section, nested))
        if nested:
            keys += config_fields(tp, prefix + f.name + ".")
    return keys


def config_keys(configs: tuple[ConfigDoc, ...] = CONFIGS) -> dict[str, list[str]]:
    """``{key: [the configs whose table lists it]}`` (nested pipeline settings dotted, ``grading.grade_k``;
    a key the task configs inherit unchanged is listed once, under the base)."""
    out: dict[str, list[str]] = {}
    for c in configs:
        for k in c.table_keys():
            out.setdefault(k.name, []).append(c.cls)
    return out


def config_reference(configs: tuple[ConfigDoc, ...] = CONFIGS) -> str:
    """The Markdown of ``reference/config.md``."""
    lines = ["# Configuration reference", "",
             "Generated from the config dataclasses at build time (`scripts/gen_docs_reference.py`): every key with "
             "its type, default and help. A training recipe is a YAML mapping of these keys (plus `task`); each "
             "key can also be given on the command line as `--KEY VALUE` (the value read as YAML), which wins over "
             "the recipe.", ""]
    for c in configs:
        lines.append(f"- [{c.title}](#{_anchor(c.title)}): `{c.cls}`")
    lines.append("")
    for c in configs:
        cls = c.load()
        keys = c.table_keys()
        lines += [f"## {c.title} {{ #{_anchor(c.title)} }}", "", f"`{c.cls}`, used by {c.used_by}.", ""]
        doc = _docstring(cls)
        if doc:
            lines += [" ".join(doc.split()), ""]
        if c.base:
            lines += [f"The keys of the [shared table](#{_anchor(CONFIGS[0].title)}), and these, which this task "
                      "adds or sets differently:", ""]
            extra = getattr(cls, "TASK", None)
            if extra:
                lines += [f"A recipe for it says `task: {extra}`; with no `--config` the script runs "
                          f"`{Path(cls.DEFAULT_RECIPE).relative_to(ROOT)}`.", ""]
        section = None
        for k in keys:
            if k.section != section or section is None:
                if section is not None or k.section:
                    lines.append("")
                if k.section:
                    lines += [f"**{_cell(k.section)}**", ""]
                lines += ["| Key | Type | Default | Help |", "|---|---|---|---|"]
                section = k.section
            default = "" if k.nested or k.default is dataclasses.MISSING else _code(k.default)
            lines.append(f"| `{k.name}` | {_code(k.type)} | {default} | {_cell(k.help) or '(no help text)'} |")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the API pages: Sphinx roles in docstrings as code (a griffe extension, named in mkdocs.yml)

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def sphinx_roles(text: str) -> str:
    """``:class:`~a.b.C``` -> ``C`` and ``:func:`a.f``` -> ``a.f`` (as inline code)."""
    return _ROLE.sub(lambda m: "`" + (m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)) + "`", text)


try:
    import griffe
except ImportError:  # the docs extra is not installed: only the API pages need it
    griffe = None
else:
    class SphinxRoles(griffe.Extension):
        """The docstrings use Sphinx roles; mkdocstrings renders Markdown."""

        def on_object(self, *, obj, **kwargs) -> None:
            if getattr(obj, "docstring", None) is not None:
                obj.docstring.value = sphinx_roles(obj.docstring.value)

        def on_package(self, *, pkg, **kwargs) -> None:  # on_object skips the package itself
            self.on_object(obj=pkg)


# --------------------------------------------------------------------------------------------
# the mkdocs hook, and the script

PAGES: dict[str, Callable[[], str]] = {CLI_PAGE: cli_reference, CONFIG_PAGE: config_reference}


def on_files(files, config):
    """mkdocs hook: add the generated pages to the build (never written into ``docs/``)."""
    from mkdocs.structure.files import File

    for uri, make in PAGES.items():
        if files.get_file_from_path(uri) is not None:
            raise RuntimeError(f"docs/{uri} exists, but it is generated: delete it (scripts/gen_docs_reference.py)")
        files.append(File.generated(config, uri, content=make()))
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write reference/cli.md and config.md into (a preview; "
                    "the site build generates them itself)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for uri, make in PAGES.items():
        (out / Path(uri).name).write_text(make(), encoding="utf-8")
        print(out / Path(uri).name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
