"""The house matches its drawing: no import cycle among c3kit modules, and one calibration store."""

import ast
import re
from pathlib import Path

import c3kit

ROOT = Path(c3kit.__file__).parent
STORE = "c3kit.cost.calib_store"
KINDS = ("gemm", "c3", "comm", "overlap", "contention", "dma")


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """c3kit modules imported anywhere in the file (module level or inside functions)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in MODULES else mod)
    return {m for m in out if m in MODULES and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_no_import_cycles():
    graph = {n: _imports(n, p) for n, p in MODULES.items()}
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


_KIND = "(" + "|".join(KINDS) + ")"
# the folder, a '<stem>-<kind>[-variant].json' name or its tail, a companion suffix, a bare '-<kind>',
# an op-level '-ops-<family>' name, the transfers file
_NAME = re.compile(r"(data/calib|^calib$|-" + _KIND + r"(-[\w-]*)?\.json$|^-[\w-]+\.json$|^-" + _KIND + "$"
                   r"|-ops-|transfers\.toml)")


def _calibration_strings(source: str) -> list[str]:
    """String literals (not docstrings) that name the calibration folder or build calibration file names."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip and _NAME.search(n.value)]


def test_only_the_store_knows_calibration_files():
    offenders = {name: hits for name, path in MODULES.items() if name != STORE
                 for hits in [_calibration_strings(path.read_text())] if hits}
    assert offenders == {}


def test_calibration_name_check_can_fail():
    src = '"""Reads data/calib files."""\np = root / "data" / "calib" / f"{slug}-contention.json"\nq = s + "-steady.json"\n'
    assert sorted(_calibration_strings(src)) == ["-contention.json", "-steady.json", "calib"]
    assert _calibration_strings('x = "data/calib/h200-sxm-dma.json"') == ["data/calib/h200-sxm-dma.json"]
    assert _calibration_strings('y = p.stem.replace("-comm", "")\nz = "ring-dma-prio"') == ["-comm"]
    assert sorted(_calibration_strings('p = d / f"{stem}-ops-{fam}.json"\nt = "transfers.toml"')) == ["-ops-", "transfers.toml"]
