"""A benchmark's results page: what it prints, written under ``docs/results/<name>.md`` with a stamp.

Each page keeps the latest run per kind of CPU and command: a section headed by the CPU (its model and
low-precision ISA flags, ``yolo_edge.core.host.cpu_name``) and the command, stamped with the commit, the date and
the cores. A run replaces its own section and moves the one it replaces to ``CHANGELOG.md`` (under "Results
replaced"), so a figure in the docs is always one a benchmark wrote, and the older ones are kept as history.

    if __name__ == "__main__":
        with results_page.page("decode", "Decode + NMS, three ways"):
            main()

Nothing is written when the benchmark fails or is interrupted; ``YOLO_EDGE_NO_RESULTS=1`` writes nothing (a try).
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
CHANGELOG = ROOT / "CHANGELOG.md"
REPLACED = "## Results replaced"
INTRO = (
    "Written by `benchmarks/{script}`: each section is its latest run on one kind of CPU with one command, stamped "
    "with the commit, date and cores; the runs it replaced are in `CHANGELOG.md`. Regenerate with the command in the "
    "section's heading."
)


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a terminal's colours (ultralytics' log lines): not for a page


class _Tee(io.TextIOBase):
    def __init__(self, out: io.TextIOBase) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(ANSI.sub("", text))
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def command() -> str:
    """This run's command line, as a user would type it (the offline switch the benchmarks need included)."""
    script = Path(sys.argv[0]).resolve()
    where = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    offline = "YOLO_OFFLINE=1 " if os.environ.get("YOLO_OFFLINE") else ""
    return f"{offline}python {shlex.join([str(where), *sys.argv[1:]])}"


def stamp() -> str:
    """The commit (``+changes`` when the tree differs from it, results pages aside), the date and the cores."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/results", ":!CHANGELOG.md"):
        commit += "+changes"
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return f"Run at {commit} on {date}, {os.cpu_count()} cores."


def heading() -> str:
    from yolo_edge.core.host import cpu_name

    return f"## {cpu_name()}: `{command()}`"


def _sections(text: str) -> tuple[str, dict[str, str]]:
    """A page's head (its title and intro) and its sections by heading."""
    parts = re.split(r"(?m)^(?=## )", text)
    head, sections = parts[0], {}
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        sections[title] = body
    return head, sections


def markdown(printed: str) -> str:
    """What a benchmark printed as a page's body: its markdown tables as tables, every other run of lines verbatim
    in a text block (aligned columns, progress and verdict lines stay as printed)."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        while run and not run[-1].strip():
            run.pop()
        if run:
            out.extend(["```text", *run, "```", ""])
        run.clear()

    lines = printed.strip().splitlines()
    for k, line in enumerate(lines):
        if line.startswith("|"):
            flush()
            if k and not lines[k - 1].startswith("|"):
                out.append("")
            out.append(line)
        elif line.startswith("### "):  # a benchmark's own subheading
            flush()
            out.extend(["", line, ""])
        else:
            if out and out[-1].startswith("|"):
                out.append("")
            if line.strip() or run:
                run.append(line)
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def write(name: str, title: str, body: str) -> Path:
    """``body`` as this run's section of ``docs/results/<name>.md``; a section it replaces goes to the changelog."""
    path = RESULTS / f"{name}.md"
    script = Path(sys.argv[0]).name
    head, sections = _sections(path.read_text()) if path.is_file() else ("", {})
    head = f"# {title}\n\n{INTRO.format(script=script)}\n\n"
    key = heading()
    old = sections.get(key)
    sections[key] = f"\n{stamp()}\n\n{markdown(body)}\n\n"
    if old is not None:
        log = CHANGELOG.read_text() if CHANGELOG.is_file() else "# Changelog\n"
        if REPLACED not in log:
            note = "Sections of `docs/results/` that a later run replaced, newest first."
            log = log.rstrip() + f"\n\n{REPLACED}\n\n{note}\n"
        entry = f"\n### {title}: {key.removeprefix('## ')}\n{old.rstrip()}\n"
        at = log.index(REPLACED) + len(REPLACED)
        at = log.index("\n", log.index("newest first", at)) + 1 if "newest first" in log[at:] else at
        CHANGELOG.write_text(log[:at] + entry + log[at:])
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = head + "".join(f"{k}\n{v}" for k, v in sections.items())
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text.rstrip() + "\n")
    tmp.replace(path)
    write_index()
    return path


def write_index() -> Path:
    """``docs/results/index.md``: every results page, its title and the runs it holds (CPU and command)."""
    lines = [
        "# Results",
        "",
        "Each page is written by the benchmark that measured it (`benchmarks/results_page.py`), one section per",
        "kind of CPU and command, stamped with the commit, date and cores; replaced runs are in `CHANGELOG.md`.",
        "",
    ]
    for path in sorted(RESULTS.glob("*.md")):
        if path.name == "index.md":
            continue
        head, sections = _sections(path.read_text())
        title = head.splitlines()[0].removeprefix("# ")
        lines.append(f"- [{title}]({path.name}): " + "; ".join(k.removeprefix("## ") for k in sections))
    index = RESULTS / "index.md"
    index.write_text("\n".join(lines) + "\n")
    return index


@contextlib.contextmanager
def page(name: str, title: str) -> Iterator[None]:
    """Everything printed inside, to stdout as ever and, when the block ends without an error, to its page."""
    tee = _Tee(sys.stdout)  # type: ignore[arg-type]
    with contextlib.redirect_stdout(tee):  # type: ignore[type-var]
        yield
    if os.environ.get("YOLO_EDGE_NO_RESULTS") != "1" and "--child" not in sys.argv:  # a run's own child process
        print(f"results: {write(name, title, tee.kept.getvalue()).relative_to(ROOT)}", file=sys.stderr)
