"""Writes tests/compat/kudu_python_api.json: kudu-python's public names, read from its sources in a git
checkout of apache/kudu, so the compatibility test checks a list made from the code rather than by hand.

Usage: python scripts/compat/kudu_python_api.py /path/to/kudu.git [commit]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

# kudu-python module -> our module that serves it
MODULES = {
    "python/kudu/__init__.py": ("kudu", "kudu_async"),
    "python/kudu/client.pyx": ("kudu.client", "kudu_async.client"),
    "python/kudu/schema.pyx": ("kudu.schema", "kudu_async.schema"),
    "python/kudu/errors.pyx": ("kudu.errors", "kudu_async.errors"),
    "python/kudu/util.py": ("kudu.util", "kudu_async.util"),
}
CLASS = re.compile(r"^(?:cdef )?class (\w+)")
FUNC = re.compile(r"^(    )?(?:cp)?def (?:[\w.]+ )?(\w+)\(([^)]*)\)?", re.S)
PROP = re.compile(r"^    property (\w+):")
CONST = re.compile(r"^([A-Za-z]\w*) *= *\S")
IMPORT = re.compile(r"^from kudu\.\w+ import \(([^)]*)\)", re.M | re.S)
# Cython-only hooks, not callable from Python
SKIP = {"__cinit__", "__dealloc__", "__richcmp__"}


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def _params(raw: str) -> list[str]:
    """Parameter names (no types, no defaults, no self); a name with a default is written ``name=``."""
    out = []
    for p in raw.replace("\n", " ").split(","):
        p = p.strip()
        if not p:
            continue
        has_default = "=" in p
        name = p.split("=")[0].strip().split()[-1].lstrip("*")
        if name == "self":
            continue
        if p.startswith("**"):
            out.append("**" + name)
        elif p.startswith("*"):
            out.append("*" + name)
        else:
            out.append(name + ("=" if has_default else ""))
    return out


def parse(text: str, module: str, ours: str) -> list[dict[str, Any]]:
    names: list[dict[str, Any]] = []
    cls: str | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := CLASS.match(line):
            cls = m.group(1)
            if not cls.startswith("_"):
                names.append({"module": module, "ours": ours, "name": cls, "kind": "class"})
            continue
        if line and not line[0].isspace() and not line.startswith(("#", "@", ")", "def", "cpdef")):
            cls = None if not CLASS.match(line) else cls
        if m := PROP.match(line):
            if cls and not cls.startswith("_"):
                names.append({"module": module, "ours": ours, "name": f"{cls}.{m.group(1)}", "kind": "property"})
            continue
        if m := FUNC.match(line):
            indent, fname = m.group(1), m.group(2)
            sig = line + "".join(lines[i + 1 : i + 12]) if ")" not in line else line
            raw = sig[sig.index("(") + 1 : sig.index(")")] if ")" in sig else ""
            if fname.startswith("_") and fname not in ("__len__", "__getitem__", "__iter__", "__repr__", "__cinit__"):
                continue
            if fname == "__cinit__" and indent and cls and not cls.startswith("_"):
                names.append(
                    {
                        "module": module,
                        "ours": ours,
                        "name": f"{cls}.__init__",
                        "kind": "constructor",
                        "params": _params(raw),
                    }
                )
                continue
            if fname in SKIP:
                continue
            if indent and cls and not cls.startswith("_"):
                prev = lines[i - 1].strip()
                kind = "staticmethod" if prev == "@staticmethod" else "method"
                names.append(
                    {"module": module, "ours": ours, "name": f"{cls}.{fname}", "kind": kind, "params": _params(raw)}
                )
            elif not indent:
                cls = None
                names.append(
                    {"module": module, "ours": ours, "name": fname, "kind": "function", "params": _params(raw)}
                )
            continue
        if (m := CONST.match(line)) and not line.startswith(" "):
            cls = None
            name = m.group(1)
            if not name.startswith("_") and name not in ("cdef", "from", "import"):
                names.append({"module": module, "ours": ours, "name": name, "kind": "constant"})
    return names


def reexports(text: str, module: str, ours: str) -> list[dict[str, Any]]:
    """``from kudu.x import (a, b as c)`` in ``kudu/__init__.py``: the names kudu-python lends its top level."""
    out = []
    for m in IMPORT.finditer(text):
        for item in m.group(1).replace("\n", " ").split(","):
            item = item.split("#")[0].strip()
            if item:
                name = item.split(" as ")[-1].strip()
                out.append({"module": module, "ours": ours, "name": name, "kind": "reexport"})
    return out


def main() -> None:
    repo = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
    sha = _git(repo, "rev-parse", commit).strip()
    version = _git(repo, "show", f"{sha}:version.txt").strip()
    names: list[dict[str, Any]] = []
    for path, (module, ours) in MODULES.items():
        text = _git(repo, "show", f"{sha}:{path}")
        if path.endswith("__init__.py"):
            names += reexports(text, module, ours)
        names += parse(text, module, ours)
    seen: set[tuple[str, str]] = set()
    unique = []
    for n in names:
        if (n["module"], n["name"]) not in seen:
            seen.add((n["module"], n["name"]))
            unique.append(n)
    doc = {"source": "apache/kudu python/kudu", "commit": sha, "version": version, "names": unique}
    out = Path(__file__).resolve().parents[2] / "tests" / "compat" / "kudu_python_api.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(unique)} names from {sha[:12]} ({version}) -> {out}")


if __name__ == "__main__":
    main()
