"""The docs cannot drift silently: the README stays a front door (at most 250 lines, the quick start in its first 40),
every page stays short, the generated references are what the parsers and the config say, every link between pages
resolves, every results page carries its stamps, and each figure the README shows at a glance is on the results page
it links to. (The commands in the README and the docs are parsed by ``tests/test_readme.py``; the site is built with
``mkdocs build --strict`` by ``.ci/run``.)"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGE_LINES = 260  # "about 250" each


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _script(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the detail to docs/"
    assert lines.index("## Quick start") < 40


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_page_is_short(page: Path) -> None:
    assert len(page.read_text().splitlines()) <= PAGE_LINES, f"{page}: split it by topic"


def test_the_generated_references_are_up_to_date() -> None:
    """docs/cli.md is the parsers' and docs/reference/config.md the shipped config's and the profile's, as
    ``python scripts/docs_reference.py`` writes them; a new flag or key without a regenerated page fails here."""
    reference = _script("docs_reference")
    assert (DOCS / "cli.md").read_text() == reference.cli_page(), "run python scripts/docs_reference.py"
    assert (DOCS / "reference" / "config.md").read_text() == reference.config_page(), "run scripts/docs_reference.py"


def test_the_config_reference_has_every_key_of_the_shipped_config_and_of_a_profile() -> None:
    from yolo_edge.core.config import configs_dir, read_yaml

    text = (DOCS / "reference" / "config.md").read_text()
    documented = set(re.findall(r"^\| `([\w.]+)` \|", text, flags=re.M))

    def keys(node: object, prefix: str = "") -> set[str]:
        if not isinstance(node, dict):
            return set()
        return {k for key, value in node.items() for k in {f"{prefix}{key}", *keys(value, f"{prefix}{key}.")}}

    assert keys(read_yaml(configs_dir() / "default.yaml")) <= documented
    profile = read_yaml(configs_dir() / "devices" / "rk3588.yaml")
    shipped = {k for k in keys(profile) if not k.startswith(("op_support.ops.", "peak_tops."))}
    assert shipped - {f"runtime_options.{k}" for k in profile.get("runtime_options", {})} <= documented
    # every CLI subcommand has its section
    from yolo_edge.cli.main import build_parser

    cli = (DOCS / "cli.md").read_text()
    subcommands = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert all(f"## yolo-edge {name}" in cli for name in subcommands._name_parser_map if name != "predict")


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]


@pytest.mark.parametrize("page", [README, *_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    """A link from the README or a page to another page (its anchor included) or a folder resolves."""
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(target)
        elif anchor and where.is_file():
            headings = re.findall(r"^#+ (.+)$", where.read_text(), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            if anchor not in slugs:
                broken.append(target)
    assert broken == []


def test_every_results_page_is_written_by_a_benchmark_and_stamped() -> None:
    """Each section of docs/results/ names the CPU and the command of a benchmark that exists, and its stamp (commit,
    date, cores); the index lists every page."""
    index = (DOCS / "results" / "index.md").read_text()
    pages = [p for p in (DOCS / "results").glob("*.md") if p.name != "index.md"]
    assert pages, "no results page: run a benchmark (benchmarks/deploys.py)"
    for page in pages:
        text = page.read_text()
        script = re.search(r"Written by `benchmarks/(\w+\.py)`", text)
        assert script and (ROOT / "benchmarks" / script.group(1)).is_file(), page
        stamped = r"^## (.+): `(.+)`\n\nRun at (\w+)(?:\+changes)? on (\d{4}-\d\d-\d\d), (\d+) cores\."
        sections = re.findall(stamped, text, re.M)
        assert sections and len(sections) == text.count("\n## "), page
        assert all(script.group(1) in command for _cpu, command, *_ in sections), page
        assert f"]({page.name})" in index, page


def test_the_readme_figures_at_a_glance_are_on_the_pages_they_link() -> None:
    """Every figure in the README's "Results at a glance" is written on the results page its row links to."""
    section = README.read_text().split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("|") and "](docs/results/" in r]
    assert 4 <= len(rows) <= 6
    for row in rows:
        page = (ROOT / re.search(r"\]\((docs/results/[\w-]+\.md)\)", row).group(1)).read_text()  # type: ignore[union-attr]
        cells = row.split("|")[1:-1]
        figures = [f for cell in cells[:-1] for f in re.findall(r"\d+\.\d+x?|\b\d+ of \d+\b", cell)]
        assert figures, row
        assert all(f in page for f in figures), [f for f in figures if f not in page]


def test_the_results_page_writer_keeps_one_section_per_cpu_and_command(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A second run of the same command on the same CPU replaces its section and moves the old one to the changelog;
    another command gets a section of its own."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(results_page, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(results_page, "CHANGELOG", tmp_path / "CHANGELOG.md")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "decode.py"), "--imgsz", "320"])
    results_page.write("decode", "Decode", "| a | 1.00 |")
    results_page.write("decode", "Decode", "| a | 2.00 |")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "decode.py")])
    page = results_page.write("decode", "Decode", "| a | 3.00 |").read_text()
    assert "2.00" in page and "3.00" in page and "1.00" not in page and page.count("\n## ") == 2
    log = (tmp_path / "CHANGELOG.md").read_text()
    assert "1.00" in log and "2.00" not in log and results_page.REPLACED in log
    assert "[Decode](decode.md)" in (tmp_path / "results" / "index.md").read_text()
