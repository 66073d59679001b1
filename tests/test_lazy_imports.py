"""Every import inside a function of app/holodesk says why it is lazy (issue 35: project imports at the top of the
module, unless start-up time, an optional or heavy dependency or an import cycle needs a lazy one).

The rule read from the source with :mod:`ast` and :mod:`tokenize`: an ``import`` or ``from ... import`` anywhere
under a ``def`` (outside ``if TYPE_CHECKING:``) needs a comment containing ``lazy`` on one of its lines, on the line
above (a trailing comment, as on a ``try:``) or in the comment lines just above it. One such comment covers a run
of consecutive import statements of the same block (blank lines between them allowed), and a ``lazy`` comment that
says "... below" (``# lazy (here and below): ...``) on an earlier statement of the same block covers the imports
after it in that block.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app" / "holodesk"

ImportNode = ast.Import | ast.ImportFrom


def _comments(source: str) -> dict[int, str]:
    """The comment of each line that has one: ``{line number (1-based): comment text with its '#'}``."""
    return {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _function_imports(tree: ast.AST) -> list[tuple[ImportNode, list[ast.stmt]]]:
    """Each import under a ``def`` (outside ``if TYPE_CHECKING:`` bodies), with the statement list it is in."""
    found: list[tuple[ImportNode, list[ast.stmt]]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for _field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for child in value:
                    if not isinstance(child, ast.AST):
                        continue
                    if isinstance(child, ast.If) and _type_checking(child):
                        for stmt in child.orelse:
                            walk_statement(stmt, child.orelse, in_function)
                        continue
                    walk_statement(child, value, in_function)
            elif isinstance(value, ast.AST):
                walk(value, in_function)

    def walk_statement(child: ast.AST, block: list[ast.stmt], in_function: bool) -> None:
        if in_function and isinstance(child, ast.Import | ast.ImportFrom):
            found.append((child, block))
        walk(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    walk(tree, False)
    return found


class _Module:
    """One source file's lines and comments, and the reason text around a statement."""

    def __init__(self, path: Path) -> None:
        self.source = path.read_text(encoding="utf-8")
        self.lines = self.source.splitlines()
        self.comments = _comments(self.source)

    def reason(self, node: ast.stmt) -> str:
        """The comments on ``node``'s lines, on the line above it and in the comment-only lines just above."""
        end = node.end_lineno or node.lineno
        texts = [self.comments.get(line, "") for line in range(node.lineno - 1, end + 1)]
        line = node.lineno - 1
        while line >= 1 and self.lines[line - 1].strip().startswith("#"):
            texts.append(self.lines[line - 1])
            line -= 1
        return " ".join(texts)

    def covered(self, node: ImportNode, block: list[ast.stmt]) -> bool:
        """True when ``node`` carries a lazy reason (module docstring's rule)."""
        index = next(i for i, stmt in enumerate(block) if stmt is node)
        back = index
        while back >= 0 and isinstance(block[back], ast.Import | ast.ImportFrom):
            if "lazy" in self.reason(block[back]):
                return True
            back -= 1
        return any("lazy" in text and "below" in text for text in map(self.reason, block[:index]))


def unexplained_imports(root: Path) -> list[str]:
    """``"path:line: statement"`` for each import inside a function under ``root`` without a lazy reason."""
    missing = []
    for path in sorted(root.rglob("*.py")):
        module = _Module(path)
        for node, block in _function_imports(ast.parse(module.source, filename=str(path))):
            if not module.covered(node, block):
                statement = module.lines[node.lineno - 1].strip()
                missing.append(f"{path.relative_to(root.parent)}:{node.lineno}: {statement}")
    return missing


def test_every_import_inside_a_function_says_why_it_is_lazy() -> None:
    missing = unexplained_imports(APP)
    assert not missing, ("imports inside functions without a '# lazy: why' comment (move them to the top of the "
                         "module, or say why they must stay lazy):\n" + "\n".join(missing))


GOOD = '''
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def one() -> None:
    import torch  # lazy: torch (optional, heavy)


def group() -> None:
    # lazy: start-up time
    from a import b
    from c import d

    from e import f


def below() -> None:
    try:  # lazy (here and below): python-xlib exists only with X11
        from Xlib import X
        x = 1
        from Xlib.protocol import event
    except ImportError:
        pass


def two_lines() -> None:
    # lazy: Qt loads only in the child
    # process
    from PySide6 import QtGui
'''


@pytest.mark.parametrize(("source", "expected"), [
    (GOOD, []),
    ("def f() -> None:\n    import torch\n", ["pkg/m.py:2: import torch"]),
    ("def f() -> None:\n    x = 1  # lazy: about x\n    y = 2\n    import torch\n", ["pkg/m.py:4: import torch"]),
    ("def f() -> None:\n    # lazy: a\n    import a\n    x = 1\n    import b\n", ["pkg/m.py:5: import b"]),
    ("class C:\n    def m(self) -> None:\n        if True:\n            from x import y\n",
     ["pkg/m.py:4: from x import y"]),
    ("import os\n\nif os:\n    import sys\n", []),
])
def test_the_rule_on_small_modules(tmp_path: Path, source: str, expected: list[str]) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(source, encoding="utf-8")
    assert unexplained_imports(tmp_path / "pkg") == expected
