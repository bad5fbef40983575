"""Static checks of Python source (graders and evaluators): imports beyond the standard library.

Used by the task readers (which graders need a grader environment), ``clawrig verify`` (an
evaluator that promises stdlib only) and the four-folder reader.
"""

from __future__ import annotations

import ast
import functools
import sys


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source)``, compiled once to find what only the compiler refuses
    (``return`` outside a function, ...). Raises SyntaxError, also for a source too deeply
    nested for the parser or compiler (their RecursionError or MemoryError: ~3,000 chained
    ``+`` terms), so every reader reports one line for it."""
    try:
        tree = ast.parse(source, filename=filename)
        compile(tree, filename, "exec")
    except (RecursionError, MemoryError) as exc:
        raise SyntaxError(
            f"too deeply nested to parse ({type(exc).__name__})", (filename, 1, 0, "")
        ) from None
    return tree


def non_stdlib_imports(source: str) -> list[tuple[str, int]]:
    """(top-level module, line) for every import outside the standard library
    (``sys.stdlib_module_names``): ``import x``, ``from x import y``, ``__import__("x")`` and
    ``importlib.import_module("x")``, sorted by line. Relative imports count as non-stdlib
    (reported as the dots plus the module: a self-contained file has no package).
    Raises SyntaxError when ``source`` does not parse (:func:`parse`)."""
    tree = parse(source)
    found: list[tuple[str, int]] = []

    def note(module: str, line: int) -> None:
        top = module.split(".")[0]
        if top and top != "__future__" and top not in sys.stdlib_module_names:
            found.append((top, line))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                note(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(("." * node.level + (node.module or ""), node.lineno))
            elif node.module:
                note(node.module, node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = _const_str(node.args[0])
            if name in ("__import__", "import_module") and arg:
                note(arg, node.lineno)
    return sorted(set(found), key=lambda x: (x[1], x[0]))


def third_party_modules(source: str) -> list[str]:
    """Sorted names of the non-stdlib modules ``source`` imports ([] when it does not parse);
    relative imports are not among them (no environment provides them)."""
    return list(_third_party(source))


def relative_imports(source: str) -> list[str]:
    """Sorted relative imports of ``source`` as written (``.helpers``, ``..``); [] when it
    does not parse."""
    try:
        found = non_stdlib_imports(source)
    except SyntaxError:
        return []
    return sorted({name for name, _ in found if name.startswith(".")})


@functools.lru_cache(maxsize=256)
def _third_party(source: str) -> tuple[str, ...]:
    # one parse per grader source: a task's reader, its grader and the preflight all ask
    try:
        found = non_stdlib_imports(source)
        return tuple(sorted({name for name, _ in found if not name.startswith(".")}))
    except SyntaxError:
        return ()
