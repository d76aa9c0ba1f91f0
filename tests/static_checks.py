"""Static checks of generated programs against the real, installed libraries.

What this proves, and what it does not:
- every call whose callee is reached from an import (`torch.autocast(...)`,
  `SD3Transformer2DModel(...)`, `DistributedDataParallel(...)`) names an object that exists
  in the installed torch / diffusers / transformers / accelerate, and its keyword arguments
  (and number of positional ones) bind to that object's real signature;
- calls into optimum-habana are bound against the signatures in its installed *source*,
  read with `ast`: optimum-habana installs here, but importing it needs Habana's plugin, so
  nothing of it is imported or faked;
- every habana_frameworks symbol the program reaches is collected, so tests can hold it to
  the allow-list in benchc.catalog.habana. habana_frameworks itself is not available here:
  its signatures are NOT checked, only the names.
Calls on local objects (`model.train()`) are out of reach of this check; the device-neutral
core that makes them is the same text as the CPU program, which the tests run for real.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field
from pathlib import Path

HABANA_ROOTS = ("habana_frameworks",)
SOURCE_ONLY_ROOTS = ("optimum.habana",)


@dataclass
class Report:
    checked: list[str] = field(default_factory=list)  # qualified names of calls checked
    problems: list[str] = field(default_factory=list)
    habana_symbols: set[str] = field(default_factory=set)


def imports_of(tree: ast.AST) -> dict[str, str]:
    """Local name -> qualified name, for every import in the module (nested ones too)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def qualify(chain: str, imports: dict[str, str]) -> str | None:
    root, _, rest = chain.partition(".")
    if root not in imports:
        return None
    return imports[root] + (f".{rest}" if rest else "")


def resolve(qualname: str):
    """The object a qualified name stands for: import the longest module prefix, then getattr."""
    parts = qualname.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)  # AttributeError: the name does not exist
        return obj
    raise ImportError(qualname)


def _bind(signature: inspect.Signature, call: ast.Call, skip_self: bool) -> str | None:
    parameters = list(signature.parameters.values())
    if skip_self and parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    signature = signature.replace(parameters=parameters)
    if any(isinstance(a, ast.Starred) for a in call.args):
        positional = []  # *args: the count cannot be known statically
    else:
        positional = [None] * len(call.args)
    keywords = {k.arg: None for k in call.keywords if k.arg is not None}
    try:
        signature.bind_partial(*positional, **keywords)
    except TypeError as exc:
        return str(exc)
    return None


def _source_signature(qualname: str) -> inspect.Signature:
    """Signature of a function, class or method in optimum-habana, read from its installed
    source: `package.module.function`, `package.module.Class` (its __init__) or
    `package.module.Class.method`."""
    parts = qualname.split(".")
    top = importlib.util.find_spec(parts[0])
    if top is None or not top.submodule_search_locations:
        raise ImportError(parts[0])
    base = Path(next(iter(top.submodule_search_locations)))
    for cut in range(len(parts) - 1, 1, -1):
        relative = Path(*parts[1:cut])
        for path in (base / relative.with_suffix(".py"), base / relative / "__init__.py"):
            if path.exists():
                return _signature_in(ast.parse(path.read_text()), parts[cut:], path)
    raise ImportError(qualname)


def _signature_in(tree: ast.Module, names: list[str], path: Path) -> inspect.Signature:
    body = tree.body
    for depth, name in enumerate(names):
        node = next(
            (n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name), None
        )
        if node is None:
            raise AttributeError(f"{'.'.join(names)} is not defined in {path}")
        last = depth == len(names) - 1
        if isinstance(node, ast.FunctionDef):
            if last:
                return _signature_from_ast(node)
            raise AttributeError(f"{name} in {path} is a function")
        if last:
            init = next(
                (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
            )
            return _signature_from_ast(init) if init else inspect.Signature()
        body = node.body
    raise AttributeError(".".join(names))


def _signature_from_ast(function: ast.FunctionDef) -> inspect.Signature:
    args = function.args
    kinds = inspect.Parameter
    parameters = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults):
        parameters.append(
            kinds(arg.arg, kinds.POSITIONAL_OR_KEYWORD, default=kinds.empty if default is None else None)
        )
    if args.vararg:
        parameters.append(kinds(args.vararg.arg, kinds.VAR_POSITIONAL))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        parameters.append(
            kinds(arg.arg, kinds.KEYWORD_ONLY, default=kinds.empty if default is None else None)
        )
    if args.kwarg:
        parameters.append(kinds(args.kwarg.arg, kinds.VAR_KEYWORD))
    return inspect.Signature(parameters)


def check_program(source: str) -> Report:
    tree = ast.parse(source)
    imports = imports_of(tree)
    report = Report()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # `import a.b` (side effects) or `import a.b as c`
            report.habana_symbols |= {a.name for a in node.names if a.name.startswith(HABANA_ROOTS)}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(HABANA_ROOTS):
            report.habana_symbols |= {f"{node.module}.{a.name}" for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = dotted(node)
            qualname = qualify(chain, imports) if chain else None
            if qualname and qualname.startswith(HABANA_ROOTS):
                report.habana_symbols.add(qualname)
        if not isinstance(node, ast.Call):
            continue
        chain = dotted(node.func)
        qualname = qualify(chain, imports) if chain else None
        if qualname is None or qualname.startswith(HABANA_ROOTS):
            continue
        where = f"line {node.lineno}: {qualname}"
        try:
            if qualname.startswith(SOURCE_ONLY_ROOTS):
                signature, skip_self = _source_signature(qualname), True
            else:
                obj = resolve(qualname)
                signature, skip_self = inspect.signature(obj), False
        except (ImportError, AttributeError) as exc:
            report.problems.append(f"{where}: no such object ({exc})")
            continue
        except ValueError:  # a builtin without a signature: existence is all we can check
            report.checked.append(qualname)
            continue
        problem = _bind(signature, node, skip_self)
        if problem:
            report.problems.append(f"{where}: {problem}")
        report.checked.append(qualname)
    # a module that is only reached through its attributes is not itself a used symbol
    report.habana_symbols = {
        s for s in report.habana_symbols if not any(o.startswith(s + ".") for o in report.habana_symbols)
    }
    return report


def returned_dict_keys(source: str, function: str) -> set[str]:
    """Keys of the dict literals in a function (or method) of the program: what it returns,
    directly or spread into the dict it returns."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    keys |= {k.value for k in inner.keys if isinstance(k, ast.Constant)}
    return keys


def keyword_names(source: str, function: str, callee_suffix: str) -> set[str]:
    """Keyword names passed in calls whose callee text ends with `callee_suffix`, inside
    `function` (for calls through a table, like TORCH_OPTIMIZERS[name](..., fused=True))."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith(callee_suffix):
                    names |= {k.arg for k in call.keywords if k.arg}
    return names
