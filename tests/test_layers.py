"""The import layers: the library (tasks, policies, rollout, model, module, metrics, seeding and their
helpers) imports nothing above it; data modules and callbacks import the library only; analysis does
not import the commands; the command-line helpers are imported by commands only; and no cycle."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("omgpt", "datamodules", "callbacks", "analysis")
COMMANDS = {"omgpt.cli", "omgpt.cli_args", "omgpt.lightning_cli", "omgpt.evaluate", "omgpt.demo", "omgpt.interpret",
            "omgpt.bench", "omgpt.experiment", "omgpt.tune", "omgpt.__main__",
            "analysis.recipe", "analysis.reference_models"}  # the last two: tools run as `python -m analysis.X`


def is_command(module: str) -> bool:
    return module in COMMANDS or module.startswith("omgpt.experiment.")


LAYERS = [  # lowest first; a module may import its own layer and those below
    ("library", lambda m: m.startswith("omgpt") and not is_command(m)),
    ("data and callbacks", lambda m: m.split(".")[0] in ("datamodules", "callbacks")),
    ("analysis", lambda m: m.split(".")[0] == "analysis" and not is_command(m)),
    ("commands", is_command),
]


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imports() -> dict[str, set[str]]:
    """Every project module -> the project modules it imports (at module level or inside functions)."""
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found |= {r for t in targets if t.split(".")[0] in PACKAGES and (r := resolve(t)) not in (None, name, "omgpt")}
        graph[name] = found
    return graph


def layer(module: str) -> int:
    return next(i for i, (_, member) in enumerate(LAYERS) if member(module))


def test_no_module_imports_a_layer_above_its_own():
    graph = imports()
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer(d) > layer(m))
    assert not upward, upward


def test_the_command_line_helpers_are_imported_by_commands_only():
    graph = imports()
    users = {m for m, deps in graph.items() if deps & {"omgpt.cli", "omgpt.cli_args", "omgpt.lightning_cli"}}
    assert all(is_command(m) for m in users), users
    assert {m for m, deps in graph.items() if "omgpt.cli" in deps} <= {"omgpt.__main__"}, "only the entry point imports omgpt.cli"


def test_no_import_cycles():
    graph = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, " -> ".join(path + [m, d])
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
