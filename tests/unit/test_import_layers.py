"""The import graph of kudu_async: no cycles between modules, and packages import only the layers below them
(DESIGN.md section 2).

Every import counts: module level, under ``if TYPE_CHECKING:`` and inside functions, because each of them
is a dependency a reader (and a refactor) has to follow, and a cycle hidden in a function is still a cycle.
A parent package's ``__init__`` that runs before a submodule is not counted: it is Python's loading order,
not a dependency the code chose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "kudu_async"
PKG = "kudu_async"

# Modules of the package root that import nothing of ours: every layer may read them.
FLOOR_MODULES = frozenset({"kudu_async.version"})

# The packages each package may import (besides itself). "" is the package root: kudu-python's facade modules
# (``kudu_async``, ``kudu_async.schema``, ``kudu_async.errors``, ``kudu_async.aio``) over the client.
ALLOWED: dict[str, frozenset[str]] = {
    "common": frozenset(),
    # Identities, tokens, keys and certificates: plain objects over `cryptography`, beneath the RPC layer
    # that carries them and the roles that issue and check them.
    "security": frozenset({"common"}),
    "rpc": frozenset({"common", "security"}),
    "fs": frozenset({"common"}),
    "consensus": frozenset({"common", "rpc", "fs", "security"}),
    "tablet": frozenset({"common", "fs"}),
    # server is the node shell both roles run in (config, lifecycle, admin HTTP app, RPC server, the Raft
    # manager every node hosts): it knows neither tablets nor the catalog, so both roles stand on it.
    "server": frozenset({"common", "rpc", "fs", "consensus", "security"}),
    "tserver": frozenset({"common", "rpc", "fs", "consensus", "tablet", "server", "security"}),
    "master": frozenset({"common", "rpc", "fs", "consensus", "tablet", "server", "security"}),
    "client": frozenset({"common", "rpc", "security"}),
    "spark": frozenset({"common", "client"}),
    # Administration also speaks to a node's services the client does not wrap (Consensus, Generic), as
    # Kudu's CLI does: through the RPC client. The offline verbs (local_replica, wal, fs) read a stopped
    # node's files with the readers of the layers that write them (fs, consensus, tablet, and the tserver's
    # WAL entry forms and data directory layout), as Kudu's tool links its fs, log and tablet code.
    "tools": frozenset({"common", "rpc", "client", "security", "fs", "consensus", "tablet", "tserver"}),
    "testing": frozenset(
        {"common", "rpc", "fs", "consensus", "tablet", "server", "tserver", "master", "client", "", "security"}
    ),
    "": frozenset({"common", "client"}),
}

# Where the tree still breaks a rule, by (importer, imported) module: each is named, explained, and meant to be
# removed by the change that fixes it. The test fails when one no longer occurs, so none outlives its fix.
KNOWN_CYCLES: dict[frozenset[str], str] = {}
KNOWN_LAYER_BREAKS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that ``name`` (a module, or a name inside one) refers to; None if not ours."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(mod: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PKG:
                    target = _resolve(a.name, modules)
                    if target is not None:
                        yield target
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                src = ".".join([*base, node.module] if node.module else base)
            else:
                src = node.module or ""
            if src.split(".")[0] != PKG:
                continue
            for a in node.names:
                target = _resolve(f"{src}.{a.name}", modules)  # a submodule, or a name in ``src``
                if target is not None:
                    yield target


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        parents = {".".join(mod.split(".")[:i]) for i in range(1, mod.count(".") + 1)}
        graph[mod] = {t for t in _imports(mod, path, modules) if t != mod and t not in parents}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp: set[str] = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def _package(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1:
        return ""
    sub = parts[1]
    return sub if (ROOT / sub).is_dir() else ""


def test_the_graph_sees_every_kind_of_import() -> None:
    g = import_graph()
    assert "kudu_async.common.errors" in g["kudu_async.client.aio"]  # module level
    assert "kudu_async.common.schema" in g["kudu_async.common.partition"]
    assert g["kudu_async.common.errors"] == set()


def test_floor_modules_import_nothing_of_ours() -> None:
    g = import_graph()
    assert {m: g[m] for m in FLOOR_MODULES} == {m: set() for m in FLOOR_MODULES}


def test_cycle_finder_finds_cycles() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(g) == [{"a", "b", "c"}]


def test_no_import_cycles() -> None:
    found = {frozenset(c) for c in _cycles(import_graph())}
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, f"import cycles: {unexpected}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"cycles fixed: remove them from KNOWN_CYCLES: {gone}"


def test_packages_import_only_lower_layers() -> None:
    g = import_graph()
    breaks: set[tuple[str, str]] = set()
    for mod, targets in g.items():
        pkg = _package(mod)
        assert pkg in ALLOWED, f"package {pkg!r} of {mod} has no rule in ALLOWED"
        for t in targets:
            tp = _package(t)
            if t not in FLOOR_MODULES and tp != pkg and tp not in ALLOWED[pkg]:
                breaks.add((mod, t))
    unexpected = sorted(breaks - KNOWN_LAYER_BREAKS.keys())
    assert not unexpected, "imports across layers (importer, imported): " + "".join(f"\n  {b}" for b in unexpected)
    gone = sorted(KNOWN_LAYER_BREAKS.keys() - breaks)
    assert not gone, f"layer breaks fixed: remove them from KNOWN_LAYER_BREAKS: {gone}"
