"""The package's import graph in numbers (issue #56): its modules, what stands at its top level, the layers of
docs/ARCHITECTURE.md's table, the arrows (distinct module -> module imports of the package), the imports that run
back up (a module importing one whose folder stands in a later row of the table), and the modules importing the
exporter (torch, ultralytics). Reads a checkout's files; imports nothing of it, so a commit can be measured beside
another:

    python benchmarks/import_graph.py [ROOT]           # this checkout
    git worktree add /tmp/old REV && python benchmarks/import_graph.py /tmp/old
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

EXPORTERS = ("yolo_edge.export", "yolo_edge.model.export")  # where the exporter has lived


def layers(root: Path) -> list[list[str]]:
    """The rows of docs/ARCHITECTURE.md's Layers table: the names each holds (a trailing ``.``: a folder)."""
    section = (root / "docs" / "ARCHITECTURE.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    return [re.findall(r"`([\w.]+)`", cells) for _, cells in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M)]


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def arrows(root: Path) -> tuple[set[str], set[tuple[str, str]]]:
    """The package's modules and its imports between them (``from pkg import mod`` counts as mod)."""
    files = {module_name(root, p): p for p in (root / "yolo_edge").rglob("*.py")}
    found = set()
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("yolo_edge"):
                for a in node.names:
                    target = f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                    found.add((name, target))
            elif isinstance(node, ast.Import):
                found |= {(name, a.name) for a in node.names if a.name.startswith("yolo_edge")}
    return set(files), {(a, b) for a, b in found if a != b}


def row_of(module: str, table: list[list[str]]) -> int | None:
    """The row of ``module``'s top-level folder (or of the module itself, where it stands at the top level)."""
    top = ".".join(module.split(".")[:2])
    for i, names in enumerate(table):
        if f"{top}." in names or top in names:
            return i
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    root = ap.parse_args().root.resolve()
    table = layers(root)
    modules, edges = arrows(root)
    tops = {".".join(m.split(".")[:2]) for m in modules if m != "yolo_edge"}
    folders = sorted(t for t in tops if (root / "yolo_edge" / t.split(".")[1]).is_dir())
    up = []
    for a, b in sorted(edges):
        ra, rb = row_of(a, table), row_of(b, table)
        if ra is not None and rb is not None and rb > ra and a.split(".")[:2] != b.split(".")[:2]:
            up.append(f"{a} -> {b}")
    top = f"at the top level {len(tops) - len(folders)} modules and {len(folders)} folders"
    print(f"{root}: {len(modules)} modules; {top}")
    print(f"layers {len(table)}, arrows {len(edges)}, running back up {len(up)}" + "".join(f"\n  {u}" for u in up))
    print(f"modules importing the exporter: {len({a for a, b in edges if b in EXPORTERS})}")
    return 0


if __name__ == "__main__":
    import results_page

    with results_page.page("import-graph", "The import graph in numbers"):
        code = main()
    raise SystemExit(code)
