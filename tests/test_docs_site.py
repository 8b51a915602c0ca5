"""The docs site's checks themselves: the strict build refuses a link to a missing page or anchor,
and the benchmarks page stays short and shows every plot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build(tmp_path: Path, pages: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `pages` with the project's mkdocs.yml (its nav left out)."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the docs group, which make test installs")
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in pages.items():
        (docs / name).write_text(text, encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[0]
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}")
    config = config.replace("scripts/mkdocs_hooks.py", str(ROOT / "scripts" / "mkdocs_hooks.py"))
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml"]
    command += ["-d", str(tmp_path / "site")]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_good_links_build(tmp_path: Path) -> None:
    result = build(tmp_path, {"index.md": "[other](other.md#part)\n", "other.md": "## Part\n"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("link", "complaint"),
    [
        ("other.md#nowhere", "does not contain an anchor '#nowhere'"),
        ("missing.md", "'missing.md', but the target is not found"),
    ],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, link: str, complaint: str) -> None:
    result = build(tmp_path, {"index.md": f"[x]({link})\n", "other.md": "## Part\n"})
    assert result.returncode != 0
    assert complaint in result.stderr


def test_benchmarks_page_is_short_and_shows_every_plot() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert len(page.splitlines()) <= 300
    embedded = set(re.findall(r"!\[[^\]]*\]\(assets/benchmarks/([^)]+\.png)\)", page))
    plots = {plot.name for plot in (ROOT / "benchmarks" / "results").glob("*.png")}
    assert plots, "no plot in benchmarks/results"
    assert plots <= embedded, f"not shown on docs/benchmarks.md: {sorted(plots - embedded)}"


def test_no_file_cites_the_specification_or_points_outside_the_repository() -> None:
    """Every page and comment stands on the repository's own documents."""
    files = [ROOT / "README.md"]
    for folder in ("src", "docs", "benchmarks", "tests"):
        files += [path for path in (ROOT / folder).rglob("*") if path.is_file()]
    offenders = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images, compiled files
        for marker in ("SPEC §", "shared/"):
            if marker in text and path != Path(__file__):
                offenders.append(f"{path.relative_to(ROOT)}: {marker}")
    assert not offenders, offenders
