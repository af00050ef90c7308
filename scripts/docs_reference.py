"""Write the reference pages that are generated, never edited by hand: ``docs/cli.md`` from the CLI's parsers and
``docs/reference/config.md`` from ``configs/default.yaml`` (every key, its default and its comment) and the device
profile's dataclasses (every key, its type and its comment, each registered backend's ``runtime_options`` too).

    python scripts/docs_reference.py          # write both
    python scripts/docs_reference.py --check  # exit 1 if either differs from what is written (tests/test_docs.py)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "cli.md"
CONFIG_PAGE = ROOT / "docs" / "reference" / "config.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ").strip()


def _flag_row(action: argparse.Action) -> str | None:
    if isinstance(action, argparse._HelpAction | argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
        return None
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
    if action.choices is not None and not isinstance(action.choices, dict):
        value = " \\| ".join(str(c) for c in action.choices)
    elif action.nargs == 0:
        value = ""
    else:
        value = str(action.metavar or action.dest.upper())
    more = {"+": " ...", "*": " ..."}.get(str(action.nargs), "")
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS, [], ()) or action.nargs == 0 else f"`{default}`"
    return f"| {names} | {_cell(value + more)} | {shown} | {_cell(action.help or '')} |"


def _commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """Each subcommand under ``parser`` (depth first), with its one-line help."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                if name not in helps:  # an alias (predict for run): listed with its command
                    continue
                found.append((f"{prefix} {name}", sub, helps[name]))
                found += _commands(sub, f"{prefix} {name}")
    return found


def cli_page() -> str:
    from yolo_edge.cli.main import build_parser

    parser = build_parser()
    lines = [
        "# The CLI reference",
        "",
        "Generated from the parsers by `python scripts/docs_reference.py` (`tests/test_docs.py` fails when it is out",
        "of date). `yolo-edge deploy --help` (or any command's) prints the same. Exit codes:",
        "[the reference](reference/exit-codes.md).",
        "",
    ]
    for name, sub, short in _commands(parser, "yolo-edge"):
        rows = [r for r in (_flag_row(a) for a in sub._actions) if r]
        lines += [f"## {name}", "", _cell(short) + ".", ""]
        if rows:
            lines += ["| argument | value | default | what it does |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines).rstrip() + "\n"


def _yaml_comments(text: str) -> dict[str, str]:
    """Each key path of a block YAML file (``a.b.c``) and its comment: the one on its line (continuation lines
    joined), else a comment block just above the keys it opens (given to the first, the others pointed to it)."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last, block, group, group_indent = "", [], "", -1
    for line in text.splitlines():
        key = re.match(r"^(\s*)([A-Za-z_][\w]*):(.*)$", line)
        if key:
            indent, name, rest = len(key.group(1)), key.group(2), key.group(3)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, name))
            last = ".".join(n for _, n in stack)
            own = rest.split("#", 1)[1].strip() if "#" in rest else ""
            if indent != group_indent:
                group = ""
            if block and len(stack) > 1 or block and indent == 0 and comments:
                own, group, group_indent, block = " ".join(block) + (f" {own}" if own else ""), last, indent, []
            elif not own and group:
                own = f"see `{group}`"
            block = []  # the file's own header comment opens no key
            comments[last] = own
        elif re.match(r"^\s+#", line) and last and comments.get(last) and not block and line.index("#") > 20:
            comments[last] += " " + line.strip().lstrip("#").strip()  # a trailing comment's continuation
        elif line.strip().startswith("#"):
            block.append(line.strip().lstrip("#").strip())
        elif not line.strip():
            group = ""
    return comments


def _field_comments(cls: type) -> dict[str, str]:
    """Each dataclass field of ``cls`` and the comment on its line (or the comment lines just above it)."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    found: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = lines[node.lineno - 1]
            comment = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            above, k = [], node.lineno - 2
            while not comment and k >= 0 and lines[k].strip().startswith("#"):
                above.insert(0, lines[k].strip().lstrip("#").strip())
                k -= 1
            found[node.target.id] = comment or " ".join(above)
    return found


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    text = str(hint) if not isinstance(hint, type) else hint.__name__
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", text).replace("typing.", "")


def _dataclass_rows(cls: type, prefix: str, data: Any = None) -> list[str]:
    hints = typing.get_type_hints(cls, include_extras=True)
    comments = _field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        bare = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
        options = [a for a in typing.get_args(bare) if dataclasses.is_dataclass(a)]
        nested = bare if dataclasses.is_dataclass(bare) else (options[0] if options else None)
        default = ""
        if f.default is not dataclasses.MISSING and not dataclasses.is_dataclass(f.default):
            default = f"`{f.default!r}`" if f.default == "" else f"`{f.default}`"
        what = _cell(comments.get(f.name, ""))
        rows.append(f"| `{prefix}{f.name}` | {_cell(_type_name(hint))} | {default} | {what} |")
        if nested is not None and isinstance(nested, type) and f.name != "runtime_options":
            rows += _dataclass_rows(nested, f"{prefix}{f.name}.")
    return rows


def config_page() -> str:
    from yolo_edge.core.config import DeviceProfile, configs_dir, read_yaml
    from yolo_edge.core.registry import backends

    default = (configs_dir() / "default.yaml").read_text()
    comments = _yaml_comments(default)
    values = read_yaml(configs_dir() / "default.yaml")

    def value(path: str) -> Any:
        node: Any = values
        for part in path.split("."):
            node = node[part]
        return node

    lines = [
        "# Config and profile keys",
        "",
        "Generated by `python scripts/docs_reference.py` from `yolo_edge/configs/default.yaml` and the device",
        "profile's dataclasses (`tests/test_docs.py` fails when it is out of date). Every key is checked where the",
        "YAML is read: an unknown key, a wrong type or a value out of range is one line naming it (exit 2).",
        "",
        "## Deploy settings (`--config`)",
        "",
        "A file of yours sets only what it changes, laid over `configs/default.yaml` key by key "
        "(`validate: {max_drift: 0.02}` alone is a whole config); each key, its shipped value and what it does.",
        "",
        "| key | shipped value | what it does |",
        "|---|---|---|",
    ]
    for path, comment in comments.items():
        shown = value(path)
        shown_text = "" if isinstance(shown, dict) else f"`{shown}`"
        lines.append(f"| `{path}` | {_cell(shown_text)} | {_cell(comment)} |")
    lines += [
        "",
        "## Device profiles",
        "",
        "A profile is a YAML file (`--device NAME` for a shipped one, or a path): these keys, `runtime_options` those",
        "of its runtime (below). See [devices](../devices.md).",
        "",
        "| key | type | default | what it is |",
        "|---|---|---|---|",
        *_dataclass_rows(DeviceProfile, ""),
        "",
        "## `runtime_options`, per runtime",
        "",
    ]
    for name, spec in backends().items():
        rows = _dataclass_rows(spec.options, "runtime_options.")
        lines += [f"### `runtime: {name}`", ""]
        if rows:
            lines += ["| key | type | default | what it is |", "|---|---|---|---|", *rows, ""]
        else:
            lines += ["No options.", ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs from what would be written")
    args = parser.parse_args()
    stale = []
    for page, text in ((CLI_PAGE, cli_page()), (CONFIG_PAGE, config_page())):
        if args.check:
            if not page.is_file() or page.read_text() != text:
                stale.append(str(page.relative_to(ROOT)))
        else:
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python scripts/docs_reference.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
