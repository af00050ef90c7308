"""The README's commands, as a user copies them: every ``yolo-edge`` line of its shell blocks is one the CLI takes
(its subcommand and flags exist and their values parse), and the inputs its examples name are made by
``benchmarks/readme_inputs.py`` or are the user's own (``best.pt``, ``photos/``: said so in the text beside them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from yolo_edge.cli.main import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[str]:
    """Each ``yolo-edge`` command of the README's bash blocks: continuation lines joined, comments, environment
    assignments and optional ``[...]`` parts dropped, ``&&`` chains split."""
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    # inline ones, the command table's included; a mere mention (`yolo-edge run`) is not a command
    lines += [m.replace("\n", " ") for m in re.findall(r"(?<!`)`(yolo-edge [^`]+)`(?!`)", text) if m.count(" ") > 1]
    commands = []
    for line in lines:
        while re.search(r"\[[^\[\]]*\]", line):  # optional parts, innermost first
            line = re.sub(r"\[[^\[\]]*\]", "", line)
        for part in line.split("&&"):
            words = shlex.split(part.split("|")[0], comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words.pop(0)
            if words[:1] == ["yolo-edge"] and "..." not in words:
                commands.append(shlex.join(words))
    return commands


def test_the_readme_has_the_commands_it_shows() -> None:
    commands = readme_commands()
    assert any(c == "yolo-edge deploy" for c in commands)  # the quick start's main job
    assert len(commands) >= 10 and any(c.startswith("yolo-edge sweep") for c in commands)


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_parses(command: str) -> None:
    """argparse exits 2 on a flag that does not exist or a value it refuses: what a user pasting the line would see."""
    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as exc:  # --help: 0
        assert exc.code == 0, command
