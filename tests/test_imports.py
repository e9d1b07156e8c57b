"""The package's import graph, read from the source: no cycles, and each SDK behind one module.

Every import counts, at module level or inside a function (a lazy import is still an import);
only ``if TYPE_CHECKING:`` blocks, which never run, are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import remote_bash
from remote_bash.models import Host

from .test_cli import base_env, host_entry, write_inventory

PACKAGE = Path(remote_bash.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str) -> set[str]:
    """Every module ``module`` imports at run time: internal ones resolved to the module file
    that runs (``from .x import name`` is ``x.name`` when that is a module), external ones by name."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & MODULES.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(source)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and not node.args[0].value.startswith(".")):
            found.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    found.discard(module)
    return found


def test_the_walk_sees_the_imports_it_must() -> None:
    # The walk itself: relative, absolute, submodule and lazy (in-function) imports are all seen.
    assert "remote_bash.tool" in _imports("remote_bash.agent")
    assert "remote_bash.tools.edit" in _imports("remote_bash.agent")
    assert "remote_bash.tools._base" in _imports("remote_bash.tools.edit")
    assert "remote_bash.agent" in _imports("remote_bash.fleet.per_host")  # inside a function
    assert "anthropic" in _imports("remote_bash.agent")
    assert "anthropic" not in _imports("remote_bash.fleet.per_host")  # a TYPE_CHECKING block
    assert len(MODULES) > 40


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    graph = {name: {m for m in _imports(name) if m in MODULES} for name in MODULES}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        cycle = exc.args[1]
        raise AssertionError(f"import cycle: {' -> '.join(reversed(cycle))}") from None


@pytest.mark.parametrize(("library", "edge"), [
    ("anthropic", "remote_bash.agent"),
    ("mcp", "remote_bash.mcp"),
    ("asyncssh", "remote_bash._ssh"),  # a package of small modules: asyncssh stays inside it
])
def test_each_sdk_stays_behind_one_module(library: str, edge: str) -> None:
    importers = sorted(name for name in MODULES if any(m.split(".")[0] == library for m in _imports(name)))
    assert importers, f"nothing imports {library}: the walk is broken"
    assert all(name == edge or name.startswith(f"{edge}.") for name in importers), importers


def _reach(module: str) -> set[str]:
    """Every module ``module`` may load, directly or through others, lazily or not."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for found in _imports(todo.pop()):
            if found not in seen:
                seen.add(found)
                if found in MODULES:
                    todo.append(found)
    return seen


@pytest.mark.parametrize("module", ["remote_bash.mcp", "remote_bash.hub", "remote_bash.tool",
                                    "remote_bash.tools.edit", "remote_bash.tools.host_edit",
                                    "remote_bash.fleet.host_tool", "remote_bash.fleet.conversation",
                                    "remote_bash.transcript", "remote_bash.agent_models"])
def test_the_mcp_server_hub_and_tools_never_reach_anthropic(module: str) -> None:
    reached = _reach(module)
    assert "remote_bash.agent" not in reached
    assert not {m for m in reached if m.split(".")[0] == "anthropic"}


def test_the_mcp_servers_calls_and_the_fleets_tools_never_load_anthropic(web1: Host, tmp_path: Path) -> None:
    # A bash and an editor call through the hub the MCP server answers with, on a real sshd, and
    # the fleet's per-host tools made as the coordinator makes them: once, making a tool pulled the
    # SDK in to register the tool with it.
    write_inventory(tmp_path / "hosts.yaml", {"web-1": host_entry(web1)})
    code = f"""
import asyncio, sys
from remote_bash import fleet, mcp
from remote_bash.hub import SessionHub
from remote_bash.inventory import load_inventory
from remote_bash.tools.host_edit import HostEditTool

inventory = load_inventory({str(tmp_path / "hosts.yaml")!r})
factory = fleet.SessionFactory(inventory, audit=False)

async def main():
    async def session(name):
        return factory(inventory.hosts[name])
    hub = SessionHub(inventory, session)
    try:
        ran = await hub.bash("web-1", {{"command": "echo ran"}}, tool_use_id="t1")
        viewed = await hub.edit("web-1", {{"command": "view", "path": "/tmp"}}, tool_use_id="t2")
    finally:
        await hub.aclose()
    pool = fleet.FleetPool(inventory, session_factory=factory)
    fleet.HostBashTool(pool, [inventory.hosts["web-1"]]).to_dict()
    HostEditTool(pool.connect, [inventory.hosts["web-1"]]).to_dict()
    print(ran.text.strip(), ran.is_error, viewed.is_error, "anthropic" in sys.modules)

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent,
                         timeout=120, env={**base_env(tmp_path), "PYTHONPATH": str(PACKAGE.parent)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ran", "False", "False", "False"], out.stdout


def test_the_sdk_tools_subclass_the_sdks_base_class() -> None:
    from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool

    from remote_bash import BashTool, EditTool

    for tool in (BashTool, EditTool):
        assert BetaAsyncBuiltinFunctionTool in tool.__mro__
