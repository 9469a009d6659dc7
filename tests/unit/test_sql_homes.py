"""Every SQL statement written as text lives in one of its homes (ADR 0021): a domain's
`repository.py`, the named query modules, `db/` and the migrations. A string literal that
begins a statement anywhere else fails here, with the file and line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import paycore

SOURCE = Path(paycore.__file__).resolve().parent
STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|WITH\s+\w+\s+AS|CREATE|ALTER|DROP)\b"
)
NAMED_QUERY_MODULES = {"invariants/checks.py", "invariants/books.py", "ledger/verify.py", "reconciliation/staging.py"}
NAMED_QUERY_PACKAGES = ("db/", "reports/")
EXCEPTIONS = {
    "http/routers/health.py": "the readiness probe's SELECT 1",
    "simulate/invariants.py": "the simulator's dump of every table, by the table's name",
}


def is_home(relative: str) -> bool:
    return (
        relative.endswith(("/repository.py", "_repository.py"))
        or relative in NAMED_QUERY_MODULES
        or relative.startswith(NAMED_QUERY_PACKAGES)
        or relative in EXCEPTIONS
    )


def docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def statements_in(source: str) -> list[int]:
    """Lines of string literals (f-strings by their literal parts) that begin a statement."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if STATEMENT.match(node.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.JoinedStr):
            literal = "".join(str(part.value) for part in node.values if isinstance(part, ast.Constant))
            if STATEMENT.match(literal):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_sql_text_lives_in_its_homes() -> None:
    strays = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        if not is_home(relative):
            strays += [f"src/paycore/{relative}:{line}" for line in statements_in(path.read_text())]
    assert strays == [], f"SQL text outside its homes (ADR 0021): move it to the domain's repository.py: {strays}"


def test_the_scan_finds_a_statement_and_skips_a_docstring() -> None:
    source = (
        '"""SELECT in a docstring is prose."""\nQUERY = "SELECT id FROM payments"\nTEXT = f"UPDATE t SET a = {1}"\n'
    )
    assert statements_in(source) == [2, 3]


def test_every_exception_is_still_needed() -> None:
    for relative in EXCEPTIONS:
        assert statements_in((SOURCE / relative).read_text()), f"{relative} has no SQL text now: drop its exception"
