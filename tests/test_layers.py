"""The import layers, as the folders show them (docs/architecture.md), lowest first:

1. the library, ``omgpt/`` (tasks, policies, rollout, model, module, evaluation, metrics, files, ...);
2. the data modules, ``datamodules/`` (installed as ``omgpt.datamodules``);
3. the analysis, ``analysis/`` (``omgpt.analysis``);
4. the callbacks, ``callbacks/`` (``omgpt.callbacks``: Algorithm 1's parts apply the data modules'
   schedule, the probing callback runs the analysis);
5. the benchmark scripts, ``benchmarks/`` (run by ``omgpt bench`` and by hand);
6. the commands, ``omgpt/commands/``, and the entry point ``omgpt/__main__.py``;
7. the maintenance tools, ``tools/`` (``python -m tools.X``; not installed).

A module imports its own layer and those below; the command-line helpers are imported by commands
only; and there is no cycle, counting the benchmark scripts ``omgpt bench`` loads by file name (a
dynamic import the static check would otherwise miss).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {  # repository folder -> module prefix (pyproject.toml's package-dir)
    "omgpt": "omgpt", "datamodules": "omgpt.datamodules", "callbacks": "omgpt.callbacks", "analysis": "omgpt.analysis",
    "benchmarks": "benchmarks", "tools": "tools",
}  # fmt: skip
CLI_HELPERS = {"omgpt.commands.cli", "omgpt.commands.args", "omgpt.commands.lightning_cli"}


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


LAYERS = [  # lowest first
    ("library", lambda m: within(m, "omgpt")),
    ("data modules", lambda m: within(m, "omgpt.datamodules")),
    ("analysis", lambda m: within(m, "omgpt.analysis")),
    ("callbacks", lambda m: within(m, "omgpt.callbacks")),
    ("benchmark scripts", lambda m: within(m, "benchmarks")),
    ("commands", lambda m: within(m, "omgpt.commands") or m == "omgpt.__main__"),
    ("tools", lambda m: within(m, "tools")),
]


def layer(module: str) -> int:
    return max(i for i, (_, member) in enumerate(LAYERS) if member(module))


def modules() -> dict[str, Path]:
    out = {}
    for folder, prefix in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            out[".".join((prefix, *parts)).removesuffix(".__init__")] = path
    return out


def imports() -> dict[str, set[str]]:
    """Every project module -> the project modules it imports (at module level or inside functions),
    plus the benchmark scripts it loads by name (``load_benchmark("kv_cache")``)."""
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
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "load_benchmark"
                and isinstance(node.args[0], ast.Constant)
            ):
                targets = [f"benchmarks.{node.args[0].value}"]
            else:
                continue
            found |= {r for t in targets if (r := resolve(t)) not in (None, name, "omgpt")}
        graph[name] = found
    return graph


def test_the_folders_hold_what_the_readme_says():
    mods = modules()
    assert not list((ROOT / "results").rglob("*.py")), "results/ holds results, not code"
    commands = {m for m in mods if layer(m) == 5}
    for command in ("cli", "evaluate", "tune", "demo", "experiment", "bench", "interpret", "lightning_cli"):
        assert f"omgpt.commands.{command}" in commands
    # the library holds no command: nothing below omgpt/commands parses arguments or runs as a script
    library = [m for m in mods if layer(m) == 0]
    runs_as_script = [m for m in library if 'if __name__ == "__main__"' in mods[m].read_text()]
    assert not runs_as_script, runs_as_script
    assert not (ROOT / "omgpt" / "callbacks").exists() and not (ROOT / "omgpt" / "analysis").exists(), (
        "the design card's folders stay at the top level; pyproject.toml installs them under omgpt"
    )


def test_no_module_imports_a_layer_above_its_own():
    graph = imports()
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer(d) > layer(m))
    assert not upward, upward


def test_the_load_benchmark_edges_are_seen():
    """The dynamic import that once made a cycle (omgpt bench -> benchmarks/streaming.py -> omgpt bench)."""
    assert "benchmarks.streaming" in imports()["omgpt.commands.bench"]


def test_the_command_line_helpers_are_imported_by_commands_only():
    graph = imports()
    users = {m for m, deps in graph.items() if deps & CLI_HELPERS}
    assert all(layer(m) >= 5 for m in users), users
    entry = {m for m, deps in graph.items() if "omgpt.commands.cli" in deps}
    assert entry <= {"omgpt.__main__", "tools.interpretability_train"}, (
        "only the entry points import omgpt.commands.cli"
    )


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
