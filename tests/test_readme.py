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
DOC_PAGES = sorted((README.parent / "docs").rglob("*.md"))
ALL_PAGES = (README, *DOC_PAGES)  # the README's commands first, then the pages', in order


def readme_commands(pages: tuple[Path, ...] = (README,)) -> list[str]:
    """Each ``yolo-edge`` command of the bash blocks of ``pages`` (the README's by default): continuation lines
    joined, comments, environment assignments and optional ``[...]`` parts dropped, ``&&`` chains split."""
    text = "\n".join(page.read_text() for page in pages)
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


@pytest.mark.parametrize("command", readme_commands(ALL_PAGES))
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
    for command in readme_commands(ALL_PAGES):
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


# The README's commands this suite does not run, by why. Each takes minutes (a deploy, the search, a sweep of 12
# deploys) or needs what this machine has not (a camera, an RTSP server); ``benchmarks/readme_examples.py`` runs
# every one that can run here, as written, in a folder made by readme_inputs.
NOT_RUN_HERE = {
    "deploy": "minutes: benchmarks/readme_examples.py",
    "plan": "minutes: benchmarks/readme_examples.py",
    "sweep": "12 deploys: benchmarks/readme_examples.py",
    "toolchain install": "installs a toolchain (the README's test command did)",
    "stream": "a camera or an RTSP server",
    "usage": "a usage line (M, D, BUNDLE, SRC stand for the user's values)",
}


def not_run_why(command: str) -> str | None:
    """Why the suite does not run ``command`` (a key of :data:`NOT_RUN_HERE`), or None: it runs it."""
    words = shlex.split(command)[1:]
    if any(w.isupper() for w in words):
        return "usage"
    if any("://" in w for w in words) or words[-2:] == ["--source", "0"]:
        return "stream"
    if words[:2] == ["toolchain", "install"]:
        return "toolchain install"
    return words[0] if words[0] in NOT_RUN_HERE else None


def readme_python() -> str:
    """The README's one-line-predict example, less its camera loop (this machine has no camera)."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S) if "yolo_edge.load" in b]
    kept, skipping = [], False
    for line in block.splitlines():
        if line.startswith("for r in model(0"):
            skipping = True
        elif skipping and not line.startswith((" ", "\t")):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


@pytest.mark.slow
def test_the_readme_examples_run_as_written(deployed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Every README and docs command that takes seconds, as written, in order (the README's first), in a folder
    made by readme_inputs with the bundle ``yolo-edge deploy`` writes (the suite's host-lowp deploy of the demo) at
    ``out/bundle``; then the Python example. Each exits 0 and writes what it names (``--out``, ``--save``,
    ``--save-json``, ``--plot``)."""
    import shutil

    env = {**os.environ, "YOLO_OFFLINE": "1"}
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "readme_inputs.py"
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], check=True, env=env, capture_output=True)
    shutil.copytree(deployed.bundle, tmp_path / "out" / "bundle")
    ran, failed = [], []
    for command in dict.fromkeys(readme_commands(ALL_PAGES)):
        if not_run_why(command) is not None:
            continue
        words = shlex.split(command)
        done = subprocess.run(
            [sys.executable, "-m", "yolo_edge.cli.main", *words[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        written = [words[k + 1] for k, w in enumerate(words[:-1]) if w in ("--out", "--save", "--save-json", "--plot")]
        missing = [w for w in written if not (tmp_path / w).exists()]
        if done.returncode or missing:
            failed.append(f"{command}: exit {done.returncode}, missing {missing}: {done.stderr.strip()[-300:]}")
        ran.append(command)
    assert failed == []
    assert any(c.startswith("yolo-edge run out/bundle --source photos/") for c in ran) and len(ran) >= 5
    assert len(list((tmp_path / "out" / "annotated").glob("*.jpg"))) == 16
    code = readme_python()
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]
    assert (tmp_path / "annotated.jpg").stat().st_size > 0 and "preprocess" in done.stdout


def test_every_readme_command_is_run_by_the_suite_or_named_with_why() -> None:
    """A new README command is run by the test above unless it is one of the kinds named in NOT_RUN_HERE."""
    kinds = {not_run_why(c) for c in readme_commands(ALL_PAGES)}
    assert kinds - {None} <= set(NOT_RUN_HERE) and None in kinds
    assert not_run_why("yolo-edge deploy --device rk3588") == "deploy"
    assert not_run_why("yolo-edge run out/bundle --source video.mp4") is None
