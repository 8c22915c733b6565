"""The manual under docs/ builds with MkDocs in strict mode: a broken link or anchor between
pages, or a page left out of mkdocs.yml's nav, fails the suite (as `make docs` fails)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy_of_the_docs(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", project / "docs")
    return project


def test_the_docs_build_strict_with_every_page_in_nav(tmp_path):
    result = _build(ROOT, tmp_path / "site")

    assert result.returncode == 0, result.stderr
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True
    in_nav = {next(iter(item.values())) for item in config["nav"]}
    assert in_nav == {p.name for p in (ROOT / "docs").glob("*.md")}
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_a_broken_anchor_fails_the_build(tmp_path):
    project = _copy_of_the_docs(tmp_path)
    with (project / "docs" / "index.md").open("a", encoding="utf-8") as page:
        page.write("\nSee [the keys](agents.md#no-such-section).\n")

    result = _build(project, tmp_path / "site")

    assert result.returncode != 0
    assert "does not contain an anchor '#no-such-section'" in result.stderr


def test_a_link_to_a_missing_page_or_a_page_outside_nav_fails_the_build(tmp_path):
    project = _copy_of_the_docs(tmp_path)
    with (project / "docs" / "tour.md").open("a", encoding="utf-8") as page:
        page.write("\nSee [the runbook](runbook.md).\n")
    (project / "docs" / "orphan.md").write_text("# Nobody links here\n", encoding="utf-8")

    result = _build(project, tmp_path / "site")

    assert result.returncode != 0
    assert "runbook.md" in result.stderr
    assert "orphan.md" in result.stderr


def test_the_readme_is_short_and_its_links_into_docs_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    assert len(readme.splitlines()) <= 200
    assert "```bash\nmake run\n```" in readme and "```bash\nmake test\n```" in readme
    links = re.findall(r"\]\((docs/[^)\s]+)\)", readme)
    assert len(links) >= 9  # where to read on: every page
    for target in sorted(set(links)):
        assert (ROOT / target.split("#")[0]).is_file(), target
