"""The one table of settings (tau2site/settings_table.py): every environment name the code
reads has a row, and the configuration page and .env.production.example are made from it."""

from __future__ import annotations

import ast
from pathlib import Path

from dotenv import dotenv_values

from tau2site import settings_table

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tau2site", "tau2_env", "apps")
# The project's readers of the environment: a call of one of these, or os.environ.get(…) /
# os.environ[…], reads the variable named by its first argument.
READERS = frozenset(
    {
        "envstr",
        "envbool",
        "envint",
        "envfloat",
        "envlist",
        "env_value",
        "_env",
        "_env_int",
        "_env_seconds",
    }
    | {"_env_list", "getenv"}
)


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    constants: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                constants[target.id] = value
    return constants


def _names(expr: ast.expr, constants: dict[str, ast.expr]) -> set[str] | None:
    """The variable names an argument stands for: a string, a module constant holding one,
    or ``CONSTANT_DICT[key]`` (every value of that dict); ``None`` when it cannot be told."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.Name) and expr.id in constants:
        return _names(constants[expr.id], constants)
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Name)
        and isinstance(constants.get(expr.value.id), ast.Dict)
    ):
        found: set[str] = set()
        for value in constants[expr.value.id].values:  # type: ignore[attr-defined]
            names = _names(value, constants)
            if names is None:
                return None
            found |= names
        return found
    return None


def _is_environ(expr: ast.expr) -> bool:
    return ast.unparse(expr) in ("os.environ", "environ")


def _reads(source: str) -> tuple[set[str], list[str]]:
    """The environment names one module reads, and the reads whose name cannot be told
    (outside the readers themselves, which pass their ``name`` parameter on)."""
    tree = ast.parse(source)
    constants = _module_constants(tree)
    names: set[str] = set()
    unknown: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        argument = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called in READERS or (
                called == "get" and isinstance(func, ast.Attribute) and _is_environ(func.value)
            ):
                argument = node.args[0]
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environ(node.value)
        ):
            argument = node.slice
        if argument is not None:
            found = _names(argument, constants)
            if found is not None:
                names.update(found)
            elif function not in READERS:
                unknown.append(f"line {node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return names, unknown


def _names_read_by_the_code() -> tuple[dict[str, str], list[str]]:
    where: dict[str, str] = {}
    unknown: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            names, hidden = _reads(path.read_text(encoding="utf-8"))
            relative = path.relative_to(ROOT).as_posix()
            for name in names:
                where.setdefault(name, relative)
            unknown += [f"{relative} {read}" for read in hidden]
    return where, unknown


def test_every_environment_name_the_code_reads_has_a_row_in_the_table():
    where, unknown = _names_read_by_the_code()
    table = {s.name for s in settings_table.SETTINGS}

    assert not unknown, f"name the variable with a string or a module constant: {unknown}"
    missing = {
        name: path
        for name, path in where.items()
        if name not in table and name not in settings_table.NOT_SETTINGS
    }
    assert not missing, f"add a row to tau2site/settings_table.py for {missing}"
    assert len(where) > 80  # the scan found the settings module's and the engine's reads


def test_the_scan_sees_a_new_setting_however_it_is_read():
    source = (
        'LEDGER = "TAU2_NEW_LEDGER"\n'
        'VARS = {"a": "TAU2_NEW_A", "b": "TAU2_NEW_B"}\n'
        "def configure(provider):\n"
        '    envint("TAU2_NEW", 3, minimum=1)\n'
        '    config._env_int("TAU2_NEW_INT", 2)\n'
        "    config.env_value(LEDGER)\n"
        "    _env(VARS[provider])\n"
        '    os.environ.get("TAU2_NEW_RAW")\n'
        '    return os.environ["TAU2_NEW_ITEM"]\n'
    )

    names, unknown = _reads(source)

    assert names == {
        "TAU2_NEW",
        "TAU2_NEW_INT",
        "TAU2_NEW_LEDGER",
        "TAU2_NEW_A",
        "TAU2_NEW_B",
        "TAU2_NEW_RAW",
        "TAU2_NEW_ITEM",
    }
    assert unknown == []
    assert _reads("def configure(name):\n    return envint(name, 1)\n")[1] == [
        "line 2: envint(name, 1)"
    ]


def test_each_name_has_one_row_and_every_row_says_what_it_does():
    names = [s.name for s in settings_table.SETTINGS]

    assert len(names) == len(set(names))
    for setting in settings_table.SETTINGS:
        assert setting.meaning.strip() and setting.default.strip(), setting.name
        assert setting.scope in {"server", "compose", "client", "internal", "system"}


def test_the_configuration_page_is_what_the_table_makes():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")

    assert page == settings_table.markdown(), (
        "run: python -m tau2site.settings_table --markdown > docs/configuration.md"
    )
    for setting in settings_table.SETTINGS:
        assert f"| `{setting.name}` |" in page


def test_the_production_example_is_what_the_table_makes_and_dotenv_reads_it():
    text = (ROOT / ".env.production.example").read_text(encoding="utf-8")

    assert text == settings_table.env_production(), (
        "run: python -m tau2site.settings_table --env-production > .env.production.example"
    )
    production = dotenv_values(ROOT / ".env.production.example")
    for setting in settings_table.SETTINGS:
        listed = setting.scope in ("server", "compose") and setting.production is not None
        assert (setting.name in production) is listed, setting.name
        if listed:
            assert production[setting.name] == setting.production, setting.name
    assert production["DEBUG"] == "false"
    assert production["TAU2_AGENT_API_REQUIRE_KEY"] == "true"
