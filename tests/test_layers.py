"""The package layering of logcore and the connector, and the shape of its classes, checked on
the sources.

Dependencies point down: records and storage know nothing of logs; log knows nothing of tiering,
the cleaner, the cluster, replication, the coordinators, the broker, the Kafka protocol (wire), the
maintenance service or the tools (tiering registers itself with the log layer instead); tiered,
cleaner, cluster and replication know nothing of the coordinators, the broker, the maintenance
service, the tools or Spark (nor tiered and cleaner of each other, of cluster or replication, or
of wire); the coordinators know nothing of the broker, the maintenance service, the tools or
Spark; wire uses only records and errors, below the broker, the tools and the connector; the
connector, a peer of the broker and the tools, reaches a broker through wire and never imports
broker, maintenance, tools, cluster, replication or the coordinators; logcore never imports the
Spark connector.
An import counts wherever it is written (inside functions too) and however: `import`, `from`,
and a module loaded by name (`importlib.import_module(...)`, `__import__(...)`, with a literal
or a module-level string constant; a name the check cannot read is itself reported).

What crosses a package boundary is public: no module imports a private name (`_x`) of another
package, or uses a private attribute or method of another package's objects.

A class touches only its own private names (`_x` and `__x`; not dunders, not `_x_` sunders, not
namedtuple's `_replace`/`_asdict`/`_fields`/`_make`; a module's `_helper` is not a class's and
is not checked here). As checked with `ast`, for every class C of logcore and the connector:
- C's private names are the methods and class attributes of its body (`__slots__` included) and
  the names its methods assign on their first parameter (`self._x = ...`, `cls._x = ...`,
  `setattr(self, "_x", ...)`, `object.__setattr__(self, "_x", ...)`).
- In a method of C (nested functions included, nested classes being classes of their own),
  `self._x`, `cls._x`, `type(self)._x`, `self.__class__._x` and `C._x` must name a private of C
  or of one of its bases found in the repo (resolved through the imports); `super()._x` one of
  a base. So a mixin that reads what its host class sets is reported.
- `obj._x` on any other object is reported, unless obj is clearly of C's kind: a parameter
  annotated with C or one of its bases (`C`, `"C"`, `C | None`, `Optional[C]`), the other
  operand of one of C's comparison dunders, or a local built in the method by `C(...)`,
  `cls(...)`, `type(self)(...)`, `X.__new__(...)` or `copy.copy(self)` (then `_x` must be
  C's). Types the check cannot see (an attribute's type, isinstance narrowing) are not guessed.
- Outside the methods of a class (module functions, class bodies) every `obj._x` is reported.
- `mod._x` where mod is a module bound by an import is a module's name, not a class's.
- `getattr/setattr/hasattr/delattr(obj, "_x")` count as `obj._x`.
- The rule is about this repo's objects: a private name no code here creates (no class defines
  it, nothing assigns it) belongs to a third-party library (fsspec's `_strip_protocol`) and is
  not checked.

And `Log` is composed, not inherited: at most three bases, `Log.__init__` at most six
parameters besides self. `Broker` has no base class (its handler groups are objects it holds).
"""
from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
SOURCES = {"logcore": REPO / "logcore", "pyspark_seglog": REPO / "connector" / "pyspark_seglog"}

# package -> packages (and their submodules) it must never import
_ABOVE_LOG = ("logcore.tiered", "logcore.cleaner", "logcore.cluster", "logcore.replication", "logcore.coordinator",
              "logcore.broker", "logcore.maintenance", "logcore.tools", "logcore.wire", "pyspark_seglog")
FORBIDDEN = {
    "logcore.records": ("logcore.log",) + _ABOVE_LOG,
    "logcore.storage": ("logcore.log",) + _ABOVE_LOG,
    "logcore.log": _ABOVE_LOG,
    # the Kafka protocol: below the broker, the tools and the connector; above records only
    "logcore.wire": ("logcore.storage", "logcore.log", "logcore.tiered", "logcore.cleaner", "logcore.cluster",
                     "logcore.replication", "logcore.coordinator", "logcore.broker", "logcore.maintenance",
                     "logcore.tools", "pyspark_seglog"),
    # the services above the log: none of them knows the broker, the CLI or Spark
    "logcore.tiered": ("logcore.cleaner", "logcore.cluster", "logcore.replication", "logcore.coordinator",
                       "logcore.broker", "logcore.maintenance", "logcore.tools", "logcore.wire", "pyspark_seglog"),
    "logcore.cleaner": ("logcore.tiered", "logcore.cluster", "logcore.replication", "logcore.coordinator",
                        "logcore.broker", "logcore.maintenance", "logcore.tools", "logcore.wire", "pyspark_seglog"),
    "logcore.cluster": ("logcore.coordinator", "logcore.broker", "logcore.maintenance", "logcore.tools",
                        "pyspark_seglog"),
    # (applies once the package exists: replication moves out of broker/)
    "logcore.replication": ("logcore.coordinator", "logcore.broker", "logcore.maintenance", "logcore.tools",
                            "pyspark_seglog"),
    # the coordinators: above the log and replication (whose objects they take duck-typed), below
    # the broker, which hands requests to them
    "logcore.coordinator": ("logcore.broker", "logcore.maintenance", "logcore.tools", "pyspark_seglog"),
    # the quotas: the broker wires them in (ZooKeeper through the cluster's znode layout)
    "logcore.quota": ("logcore.log", "logcore.tiered", "logcore.cleaner", "logcore.replication",
                      "logcore.coordinator", "logcore.broker", "logcore.maintenance", "logcore.tools",
                      "logcore.wire", "pyspark_seglog"),
    # the metrics: read the broker's objects duck-typed (the broker wires them), know none of them
    "logcore.metrics": ("logcore.storage", "logcore.log", "logcore.tiered", "logcore.cleaner", "logcore.cluster",
                        "logcore.replication", "logcore.coordinator", "logcore.broker", "logcore.maintenance",
                        "logcore.tools", "pyspark_seglog"),
    # the connector is a peer of the broker and the CLI: it talks to a broker through wire only
    "pyspark_seglog": ("logcore.broker", "logcore.maintenance", "logcore.tools", "logcore.cluster",
                       "logcore.replication", "logcore.coordinator"),
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


def _tree(path: Path) -> ast.Module:
    """The parsed file; parsed once for all the checks (the trees are only read)."""
    stat = path.stat()
    return _parsed(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parsed(path: str, _mtime_ns: int, _size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), path)


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
    for node in ast.walk(_tree(path)):
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
    yield from _imports_by_name(path, package)


def _imports_by_name(path: Path, package: str):
    """(module, None, line) of every `importlib.import_module(...)` / `__import__(...)` in the file;
    the name is a string literal or a module-level string constant (a relative name resolved
    against `package`). A name the check cannot read is reported as `<computed name>`, so a
    dynamic import cannot hide an upward dependency."""
    tree = _tree(path)
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if called not in ("import_module", "__import__"):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            name = arg.value
        elif isinstance(arg, ast.Name) and arg.id in constants:
            name = constants[arg.id]
        else:
            yield "<computed name>", None, node.lineno
            continue
        if name.startswith("."):
            level = len(name) - len(name.lstrip("."))
            base = package.split(".")[:len(package.split(".")) - level + 1]
            name = ".".join(base + ([name.lstrip(".")] if name.lstrip(".") else []))
        yield name, None, node.lineno


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
            if source == "<computed name>":
                found.append(f"{name} (line {line}) imports a module by a name the check cannot read")
                continue
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
               _tree(path)) for name, path, is_package in _modules()]
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


# --- private names across classes -----------------------------------------------------------

# Underscore names that are public API by convention: namedtuple's methods and fields list.
_UNDERSCORE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
_COMPARISONS = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}


def _is_private(attr: str) -> bool:
    """`_x` and `__x`; not dunders (`__x__`), not sunders (`_x_`, enum/ctypes API), not the
    namedtuple API."""
    return (attr.startswith("_") and not attr.endswith("_") and attr not in _UNDERSCORE_API)


class _Module:
    """One parsed module: its classes by name and what its names are bound to by imports."""

    def __init__(self, name: str, path: Path, is_package: bool):
        self.name, self.path = name, path
        self.package = name if is_package else name.rpartition(".")[0]
        self.tree = _tree(path)
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.from_imports: dict[str, tuple[str, str]] = {}   # local name -> (module, name)
        self.modules: set[str] = set()                       # local names bound to modules
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.modules.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = self.package.split(".")[:len(self.package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                for alias in node.names:
                    local = alias.asname or alias.name
                    dotted = f"{source}.{alias.name}"
                    if _first_party(dotted) and _is_module(dotted) or (
                            not _first_party(dotted) and alias.name[:1].islower()):
                        self.modules.add(local)   # a module (third party: a lowercase name)
                    else:
                        self.from_imports[local] = (source, alias.name)


class _ClassPrivates:
    """The private names of every first-party class and where each class touches one."""

    def __init__(self):
        self.modules = {name: _Module(name, path, is_package) for name, path, is_package in _modules()}
        self.nodes: dict[tuple[str, str], ast.ClassDef] = {}     # (module, qualified name) -> class
        for module in self.modules.values():
            self._collect(module.name, module.tree, "")
        self.defined = {key: self._defines(cls) for key, cls in self.nodes.items()}
        # the private names this repo's code creates: owned by its classes, or set on an object
        # from outside (`seg._x = ...`); any other is a third-party library's
        self.any_class = set().union(*self.defined.values()) | {
            node.attr if isinstance(node, ast.Attribute) else node.args[1].value
            for module in self.modules.values() for node in ast.walk(module.tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
            or self._by_string(node) and isinstance(node.func, ast.Attribute)
            or self._by_string(node) and node.func.id == "setattr"}

    def _collect(self, module: str, node, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                self.nodes[(module, prefix + child.name)] = child
                self._collect(module, child, prefix + child.name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._collect(module, child, prefix + child.name + ".<locals>.")
            else:
                self._collect(module, child, prefix)

    def resolve(self, module: str, expr, depth: int = 0):
        """The (module, class name) a name or `module.Name` expression refers to, or None."""
        m = self.modules.get(module)
        if m is None or depth > 5:
            return None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):   # a string annotation
            try:
                expr = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(expr, ast.Name):
            name = expr.id
            if name in m.classes:
                return module, name
            if name in m.from_imports:
                source, original = m.from_imports[name]
                if source in self.modules:
                    return self.resolve(source, ast.Name(original), depth + 1)
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            if expr.value.id in m.modules:
                for source in (n for n in self.modules if n.endswith("." + expr.value.id) or n == expr.value.id):
                    found = self.resolve(source, ast.Name(expr.attr), depth + 1)
                    if found:
                        return found
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):     # C | None
            return self.resolve(module, expr.left, depth) or self.resolve(module, expr.right, depth)
        elif isinstance(expr, ast.Subscript):                                     # Optional[C]
            return self.resolve(module, expr.slice, depth)
        return None

    def chain(self, key) -> list[tuple[str, str]]:
        """The class and its bases found in the repo, depth first."""
        seen = []
        todo = [key]
        while todo:
            current = todo.pop(0)
            if current in seen or current not in self.defined:
                continue
            seen.append(current)
            cls = self.nodes[current]
            todo += [b for b in (self.resolve(current[0], base) for base in cls.bases) if b]
        return seen

    def owned(self, key) -> set[str]:
        return set().union(*(self.defined[k] for k in self.chain(key)))

    @staticmethod
    def _methods(cls: ast.ClassDef):
        """(method, name of its self/cls parameter or None) of the functions in the class body."""
        body = list(cls.body)
        while body:
            node = body.pop(0)
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                body += [n for field in ("body", "orelse", "finalbody", "handlers")
                         for n in getattr(node, field, [])]
            elif isinstance(node, ast.ExceptHandler):
                body += node.body
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
                args = node.args.posonlyargs + node.args.args
                yield node, (args[0].arg if args and not static else None)

    @staticmethod
    def _walk(node):
        """The nodes under `node`, not entering nested classes (they are classes of their own)."""
        todo = list(ast.iter_child_nodes(node))
        while todo:
            current = todo.pop()
            yield current
            if not isinstance(current, ast.ClassDef):
                todo += list(ast.iter_child_nodes(current))

    def _defines(self, cls: ast.ClassDef) -> set[str]:
        names = set()
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                        if target.id == "__slots__":
                            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
        for method, me in self._methods(cls):
            names.add(method.name)
            if me is None:
                continue
            for node in self._walk(method):
                if (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
                        and isinstance(node.value, ast.Name) and node.value.id == me):
                    names.add(node.attr)
                elif (_ClassPrivates._by_string(node) and isinstance(node.args[0], ast.Name)
                      and node.args[0].id == me):
                    names.add(node.args[1].value)     # setattr(self, "_x", v), object.__setattr__(...)
        return {n for n in names if isinstance(n, str) and _is_private(n)}

    @staticmethod
    def _touches(node):
        """(object expression, private name) when the node reads or writes one: `obj._x`, or
        getattr/setattr/hasattr/delattr(obj, "_x")."""
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            return node.value, node.attr
        if _ClassPrivates._by_string(node) and _is_private(node.args[1].value):
            return node.args[0], node.args[1].value
        return None

    @staticmethod
    def _by_string(node) -> bool:
        """getattr/setattr/hasattr/delattr(obj, "name", ...) or object.__setattr__(obj, "name", v)."""
        if not (isinstance(node, ast.Call) and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            return False
        func = node.func
        return (isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr", "delattr")
                or isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__getattribute__")
                and isinstance(func.value, ast.Name) and func.value.id == "object")

    def _same_class_names(self, module: str, key, method, me) -> dict[str, tuple[str, str]]:
        """Names in the method that clearly hold an instance (or the class) of a class of the
        chain: self/cls, a parameter annotated with such a class, the other operand of a
        comparison, a local built by `C(...)`, `cls(...)`, `type(self)(...)`, `X.__new__(...)` or
        `copy.copy(self)`."""
        chain = self.chain(key)
        names = {key[1].rpartition(".")[2]: key}
        if me:
            names[me] = key
        args = method.args.posonlyargs + method.args.args + method.args.kwonlyargs
        for arg in args:
            if arg.annotation is not None:
                found = self.resolve(module, arg.annotation)
                if found in chain:
                    names[arg.arg] = found
        if method.name in _COMPARISONS and len(args) > 1:
            names[args[1].arg] = key
        for node in self._walk(method):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Call)):
                func = node.value.func
                first = node.value.args[0] if node.value.args else None
                built = (isinstance(func, ast.Name) and (func.id in names or self.resolve(module, func) in chain)
                         or isinstance(func, ast.Attribute) and func.attr == "__new__"
                         or isinstance(func, ast.Call) and isinstance(func.func, ast.Name)
                         and func.func.id == "type"
                         or isinstance(func, ast.Attribute) and func.attr == "__class__"
                         or ast.unparse(func) in ("copy.copy", "copy.deepcopy")
                         and isinstance(first, ast.Name) and first.id == me)
                if built:
                    names[node.targets[0].id] = key
        return names

    def _receiver(self, obj, names, module: str):
        """The class whose privates `obj` may touch here, "module" for a module, or None."""
        if isinstance(obj, ast.Name):
            if obj.id in names:
                return names[obj.id]
            if obj.id in self.modules[module].modules:
                return "module"
            return None
        if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super":
            return "super"
        if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "type" and obj.args:
            return self._receiver(obj.args[0], names, module)
        if isinstance(obj, ast.Attribute) and obj.attr == "__class__":
            return self._receiver(obj.value, names, module)
        if (isinstance(obj, ast.Attribute) and isinstance(obj.value, ast.Name)
                and obj.value.id in self.modules[module].modules):
            return "module"                   # package.module._name: a module's private, not a class's
        return None

    def violations(self) -> list[str]:
        found = []
        inside = set()
        for key, cls in self.nodes.items():
            module = self.modules[key[0]]
            for method, me in self._methods(cls):
                names = self._same_class_names(module.name, key, method, me)
                for node in self._walk(method):
                    inside.add(id(node))
                    touch = self._touches(node)
                    if not touch:
                        continue
                    obj, attr = touch
                    if attr not in self.any_class:
                        continue              # no class here owns it: a third-party library's name
                    receiver = self._receiver(obj, names, module.name)
                    if receiver == "module":
                        continue
                    if receiver == "super":
                        owned = set().union(*(self.defined[k] for k in self.chain(key)[1:]))
                    else:
                        owned = self.owned(receiver) if receiver else set()
                    if attr not in owned:
                        what = ("defined in no class of its chain" if receiver
                                else "private to another object")
                        found.append(f"{_where(module.path)}:{node.lineno} {key[1]}.{method.name}"
                                     f" touches {ast.unparse(obj)}.{attr}: {what}")
        for module in self.modules.values():
            for node in ast.walk(module.tree):
                touch = None if id(node) in inside else self._touches(node)
                if touch and touch[1] in self.any_class and self._receiver(touch[0], {}, module.name) != "module":
                    found.append(f"{_where(module.path)}:{node.lineno} touches"
                                 f" {ast.unparse(touch[0])}.{touch[1]} outside a method of its class")
        return sorted(set(found), key=lambda line: (line.split(":")[0], int(line.split(":")[1].split()[0]), line))


def _where(path: Path) -> str:
    return str(path.relative_to(REPO if REPO in path.parents else SOURCES["logcore"].parent))


def _class_private_violations() -> list[str]:
    return _ClassPrivates().violations()


def _by_package(found: list[str]) -> str:
    """The violations grouped by package (the folder of the file each line names)."""
    groups: dict[str, list[str]] = {}
    for line in found:
        groups.setdefault(line.split(":")[0].rpartition("/")[0], []).append(line)
    return "\n".join(f"{package} ({len(lines)}):\n  " + "\n  ".join(lines) for package, lines in groups.items())


LOG_MAX_BASES = 3
LOG_MAX_INIT_PARAMETERS = 6


def _log_shape() -> list[str]:
    """What is wrong with the shape of `Log` (logcore/log): more than three bases, or an
    `__init__` with more than six parameters besides self (*args and **kwargs count as one each)."""
    classes = [n for path in sorted((SOURCES["logcore"] / "log").rglob("*.py"))
               for n in _tree(path).body
               if isinstance(n, ast.ClassDef) and n.name == "Log"]
    assert len(classes) == 1, "one class Log in logcore/log"
    log = classes[0]
    problems = []
    if len(log.bases) > LOG_MAX_BASES:
        problems.append(f"Log has {len(log.bases)} bases (at most {LOG_MAX_BASES}):"
                        f" {', '.join(ast.unparse(b) for b in log.bases)}")
    init = next((n for n in log.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        a = init.args
        params = ([x.arg for x in a.posonlyargs + a.args][1:] + [x.arg for x in a.kwonlyargs]
                  + ([f"*{a.vararg.arg}"] if a.vararg else []) + ([f"**{a.kwarg.arg}"] if a.kwarg else []))
        if len(params) > LOG_MAX_INIT_PARAMETERS:
            problems.append(f"Log.__init__ has {len(params)} parameters besides self (at most"
                            f" {LOG_MAX_INIT_PARAMETERS}): {', '.join(params)}")
    return problems


def _broker_bases() -> list[str]:
    """The bases of `Broker` (logcore/broker/broker.py): none, its handler groups are objects
    it holds (mixins would share its fields, which the private-name check cannot see)."""
    classes = [n for n in _tree(SOURCES["logcore"] / "broker" / "broker.py").body
               if isinstance(n, ast.ClassDef) and n.name == "Broker"]
    assert len(classes) == 1, "one class Broker in logcore/broker/broker.py"
    return [ast.unparse(b) for b in classes[0].bases if ast.unparse(b) != "object"]


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
    found = _layer_violations()
    assert not found, f"{len(found)} imports against the layers:\n" + "\n".join(found)


def test_no_private_name_crosses_a_package():
    assert _private_imports() == []


def test_no_private_attribute_of_another_package_is_used():
    assert _private_attributes() == []


def test_a_class_touches_only_its_own_private_names():
    found = _class_private_violations()
    assert not found, f"{len(found)} private names touched across classes:\n{_by_package(found)}"


def test_log_is_composed_not_inherited():
    """`Log` has at most three bases and `Log.__init__` at most six parameters besides self:
    its parts are collaborators it holds, and how it is opened is one policy object."""
    problems = _log_shape()
    assert not problems, "\n".join(problems)


def test_broker_is_composed_not_inherited():
    """`Broker` has no base class: it holds its handler groups (admin, fetch, groups, cluster,
    reassignments), each built with the collaborators it uses, and dispatches to their methods."""
    assert _broker_bases() == []


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


def test_the_class_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """The newer scanners are not vacuous: a module loaded by name, a mixin reading its host's
    private, a private read on another object, and a Log and a Broker of the old shape are all
    reported; a subclass using its base's private and the other operand of a comparison are not."""
    folder = tmp_path / "logcore"
    for sub in ("log", "tiered", "broker"):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    (folder / "log" / "byname.py").write_text(
        "import importlib\nTIER = 'logcore.tiered'\n"
        "def load():\n    importlib.import_module(TIER)\n    __import__('logcore.tiered.cache')\n")
    (folder / "log" / "parts.py").write_text(
        "class Reading:\n"
        "    def read(self):\n"
        "        return self._segments\n"                          # 3: the host's private
        "class Base:\n"
        "    def __init__(self):\n"
        "        self._lock = None\n"
        "    def _roll(self):\n"
        "        pass\n")
    (folder / "log" / "log.py").write_text(
        "from logcore.log.parts import Base, Reading\n"
        "class Log(Reading, Base, object, dict):\n"
        "    def __init__(self, a, b, c, d, e, f, *, g=None):\n"
        "        super().__init__()\n"
        "        self._segments = []\n"
        "        self._roll()\n"                                    # 6: a base's, fine
        "    def __eq__(self, other):\n"
        "        return self._segments == other._segments\n"      # 8: same class, fine
        "    def adopt(self, other: 'Log', seg):\n"
        "        return other._lock, seg._lock, getattr(seg, '_segments')\n")   # 10: seg's
    (folder / "tiered" / "tier.py").write_text(
        "def attach(log):\n    log._segments.append(1)\n")        # 2: outside a class
    (folder / "broker" / "broker.py").write_text(
        "class FetchHandlers:\n    pass\nclass Broker(FetchHandlers, object):\n    pass\n")
    monkeypatch.setitem(SOURCES, "logcore", folder)
    monkeypatch.setitem(SOURCES, "pyspark_seglog", tmp_path / "none")
    (tmp_path / "none").mkdir()
    assert _layer_violations() == ["logcore.log.byname (line 4) imports logcore.tiered",
                                   "logcore.log.byname (line 5) imports logcore.tiered.cache"]
    assert _class_private_violations() == [
        "logcore/log/log.py:10 Log.adopt touches seg._lock: private to another object",
        "logcore/log/log.py:10 Log.adopt touches seg._segments: private to another object",
        "logcore/log/parts.py:3 Reading.read touches self._segments: defined in no class of its chain",
        "logcore/tiered/tier.py:2 touches log._segments outside a method of its class"]
    assert _log_shape() == ["Log has 4 bases (at most 3): Reading, Base, object, dict",
                            "Log.__init__ has 7 parameters besides self (at most 6): a, b, c, d, e, f, g"]
    assert _broker_bases() == ["FetchHandlers"]
