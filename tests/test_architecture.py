"""The house's layers, checked: import-linter's contracts (pyproject.toml), and imports
of the project's own modules hidden inside functions kept few, each saying why.

The same contracts run in ``make lint``; here they run in CI's ``make test`` too, so a
change that breaks a layer does not land.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OWN = ("apps", "tau2site", "tau2_env")
# Inner imports allowed, each with a comment on its line or the line above saying why
# (an AppConfig.ready must import after the app registry is ready, for one).
MAX_INNER_IMPORTS = 10


def test_the_import_contracts_are_kept():
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def inner_imports() -> list[tuple[str, int, str]]:
    """(file, line, the line and the one above) of every import of the project's own
    modules inside a function, outside migrations."""
    found = []
    for package in OWN:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text()
            lines = source.splitlines()
            for func in ast.walk(ast.parse(source)):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, ast.ImportFrom):
                        own = node.level > 0 or (node.module or "").split(".")[0] in OWN
                    elif isinstance(node, ast.Import):
                        own = any(a.name.split(".")[0] in OWN for a in node.names)
                    else:
                        continue
                    if own:
                        near = "\n".join(lines[max(0, node.lineno - 2) : node.lineno])
                        found.append((str(path.relative_to(ROOT)), node.lineno, near))
    return sorted(set(found))


def test_imports_inside_functions_are_few_and_each_says_why():
    found = inner_imports()
    unexplained = [f"{file}:{line}" for file, line, near in found if "#" not in near]
    assert not unexplained, f"Say why each import sits inside a function: {unexplained}"
    assert len(found) <= MAX_INNER_IMPORTS, [f"{file}:{line}" for file, line, _ in found]


def test_the_inner_import_check_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """The counter above would pass on any tree if it found nothing: show it finds one."""
    package = tmp_path / "apps"
    package.mkdir()
    (package / "x.py").write_text("def f():\n    from apps import y\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "OWN", ("apps",))
    assert inner_imports() == [("apps/x.py", 2, "def f():\n    from apps import y")]
