"""The package layering of logcore and the connector, checked on the sources.

Dependencies point down: records and storage know nothing of logs; log knows nothing of tiering,
the cleaner, the broker, the Kafka protocol (wire), the maintenance service or the tools
(tiering registers itself with the log layer instead); wire uses only records and errors, below
the broker, the tools and the connector; logcore never imports the Spark connector. And no
module imports a private name (`_x`) of another package, or uses a private attribute or method
of another package's objects (the cleaner and the broker go through `Log` / `LogRoot` methods):
what crosses a package boundary is public.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
SOURCES = {"logcore": REPO / "logcore", "pyspark_seglog": REPO / "connector" / "pyspark_seglog"}

# package -> packages (and their submodules) it must never import
FORBIDDEN = {
    "logcore.records": ("logcore.log", "logcore.tiered", "logcore.cleaner", "logcore.broker",
                        "logcore.maintenance", "logcore.tools", "logcore.wire", "pyspark_seglog"),
    "logcore.storage": ("logcore.log", "logcore.tiered", "logcore.cleaner", "logcore.broker",
                        "logcore.maintenance", "logcore.tools", "logcore.wire", "pyspark_seglog"),
    "logcore.log": ("logcore.tiered", "logcore.cleaner", "logcore.broker", "logcore.maintenance",
                    "logcore.tools", "logcore.wire", "pyspark_seglog"),
    # the Kafka protocol: below the broker, the tools and the connector; above records only
    "logcore.wire": ("logcore.storage", "logcore.log", "logcore.tiered", "logcore.cleaner",
                     "logcore.cluster", "logcore.broker", "logcore.maintenance", "logcore.tools",
                     "pyspark_seglog"),
    "logcore": ("pyspark_seglog",),
}


def _modules():
    """(module name, path, is_package) of every first-party module."""
    for top, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            yield ".".join(parts), path, is_package


def _package_of(module: str) -> str:
    """The package a first-party module name belongs to (itself for a package)."""
    top = module.split(".")[0]
    rest = module.split(".")[1:]
    folder = SOURCES[top].joinpath(*rest)
    return module if folder.is_dir() else module.rpartition(".")[0]


def _imports(name: str, path: Path, is_package: bool):
    """(imported module, imported name or None, line) of every import in the file, at any depth
    (imports inside functions count too), relative imports resolved."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                yield source, alias.name, node.lineno


def _first_party(module: str) -> bool:
    return module.split(".")[0] in SOURCES


def _is_module(dotted: str) -> bool:
    top, *rest = dotted.split(".")
    folder = SOURCES[top].joinpath(*rest)
    return folder.is_dir() or folder.with_suffix(".py").is_file() or any(
        folder.parent.glob(folder.name + ".*.so"))


def _layer_violations() -> list[str]:
    found = []
    for name, path, is_package in _modules():
        rules = [bad for pkg, bad in FORBIDDEN.items() if name == pkg or name.startswith(pkg + ".")]
        for source, imported, line in _imports(name, path, is_package):
            targets = [source] + ([f"{source}.{imported}"] if imported else [])
            for target in targets:
                for bad in (b for group in rules for b in group):
                    if target == bad or target.startswith(bad + "."):
                        found.append(f"{name} (line {line}) imports {target}")
    return sorted(set(found))


def _private_imports() -> list[str]:
    found = []
    for name, path, is_package in _modules():
        importer = name if is_package else name.rpartition(".")[0]
        for source, imported, line in _imports(name, path, is_package):
            if not _first_party(source):
                continue
            dotted = source + (f".{imported}" if imported else "")
            parts = dotted.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")),
                           None)
            if private is None:
                continue
            holder = ".".join(parts[:private])          # the module or package holding the name
            owner = _package_of(holder) if _is_module(holder) else holder.rpartition(".")[0]
            if owner != importer:
                found.append(f"{name} (line {line}) imports {dotted}, private to {owner}")
    return sorted(found)


def _private_attributes() -> list[str]:
    """`obj._name` (obj not self/cls) in a package, where `_name` is a private method or a
    `self._name` attribute of classes in other first-party packages only: reaching into another
    package's object. (A package that has a private of the same name itself is not flagged.)"""
    parsed = [(name.rpartition(".")[0] if not is_package else name, path,
               ast.parse(path.read_text(encoding="utf-8"), str(path))) for name, path, is_package in _modules()]
    defined: dict[str, set[str]] = {}
    for package, _path, tree in parsed:
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attr = node.name
                elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                      and isinstance(node.value, ast.Name) and node.value.id == "self"):
                    attr = node.attr
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    attr = node.target.id            # a dataclass field
                else:
                    continue
                if attr.startswith("_") and not attr.startswith("__"):
                    defined.setdefault(attr, set()).add(package)
    found = []
    for package, path, tree in parsed:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in defined
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and package not in defined[node.attr]):
                owners = ", ".join(sorted(defined[node.attr]))
                found.append(f"{path.relative_to(REPO) if REPO in path.parents else path.name} (line {node.lineno})"
                             f" uses {ast.unparse(node)}, private to {owners}")
    return sorted(found)


def test_every_module_imports():
    names = []
    for top, folder in SOURCES.items():
        package = importlib.import_module(top)
        assert Path(package.__file__).resolve().parent == folder, f"{top} is not imported from this checkout"
        names += [m.name for m in pkgutil.walk_packages([str(folder)], prefix=top + ".")]
    assert "logcore.log.log" in names and "pyspark_seglog.source" in names
    for name in names:
        if name.endswith("__main__"):
            continue
        importlib.import_module(name)


def test_dependencies_point_down():
    assert _layer_violations() == []


def test_no_private_name_crosses_a_package():
    assert _private_imports() == []


def test_no_private_attribute_of_another_package_is_used():
    assert _private_attributes() == []


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """The scanners are not vacuous: an upward import and a private import of another package
    in a module written for the purpose are both reported."""
    folder = tmp_path / "logcore"
    for sub in ("log", "records", "tiered"):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    (folder / "records" / "batch.py").write_text("def _assemble():\n    pass\n")
    (folder / "log" / "root.py").write_text(
        "def tier():\n    from logcore.tiered.remote_log import RemoteTier\n    return RemoteTier\n")
    (folder / "log" / "seg.py").write_text("from logcore.records.batch import _assemble\n"
                                           "from ..records import batch\n"
                                           "class Seg:\n    def _critical(self):\n        self._n = 1\n")
    (folder / "records" / "use.py").write_text("def swap(seg):\n    with seg._critical():\n        return seg._n\n")
    monkeypatch.setitem(SOURCES, "logcore", folder)
    monkeypatch.setitem(SOURCES, "pyspark_seglog", tmp_path / "none")
    (tmp_path / "none").mkdir()
    assert _layer_violations() == ["logcore.log.root (line 2) imports logcore.tiered.remote_log",
                                   "logcore.log.root (line 2) imports logcore.tiered.remote_log.RemoteTier"]
    assert _private_imports() == ["logcore.log.seg (line 1) imports logcore.records.batch._assemble,"
                                  " private to logcore.records"]
    assert _private_attributes() == ["use.py (line 2) uses seg._critical, private to logcore.log",
                                     "use.py (line 3) uses seg._n, private to logcore.log"]
