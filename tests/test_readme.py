"""The README's commands, as a user copies them: every ``yolo-edge`` line of its shell blocks is one the CLI takes
(its subcommand and flags exist and their values parse), and every input its examples read is made by
``benchmarks/readme_inputs.py`` (stand-ins for the user's own ``best.pt``, ``photos/``, ...) or by a README command
before it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
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


INPUT_FLAGS = ("--model", "--data", "--config", "--calib", "--source")


def _is_made_elsewhere(value: str) -> bool:
    """An input no file can stand in for, or one a README command writes before it is read: a usage line's
    placeholder (``M``, ``SRC``), ultralytics' model yaml (built from its name), a stream URL, a camera index, a
    file under ``out/`` (deploy's bundle, split's ONNX)."""
    return (
        value.isupper()
        or re.fullmatch(r"yolov8\w*\.yaml", value) is not None
        or "://" in value
        or value.isdigit()
        or value.startswith("out/")
    )


def readme_inputs_named() -> set[str]:
    """The files and folders the README's commands and its Python example read."""
    named = set(re.findall(r'model\("([^"]+)"', README.read_text()))  # yolo_edge.load(...)("photo.jpg")
    for command in readme_commands():
        words = shlex.split(command)
        for k, word in enumerate(words):
            if word in INPUT_FLAGS:
                for value in words[k + 1 :]:
                    if value.startswith("--"):
                        break
                    named.add(value)
    return {v for v in named if not _is_made_elsewhere(v)}


def test_every_input_a_readme_example_reads_is_made_by_readme_inputs(tmp_path: Path) -> None:
    named = readme_inputs_named()
    assert {"best.pt", "photos/", "video.mp4", "photo.jpg"} <= named  # what a user brings, in the examples
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "readme_inputs.py"
    env = {**os.environ, "YOLO_OFFLINE": "1"}
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], check=True, env=env, capture_output=True)
    assert sorted(v for v in named if not (tmp_path / v).exists()) == []
    assert len(list((tmp_path / "photos").glob("*.jpg"))) == 16 and (tmp_path / "video.mp4").stat().st_size > 0
