"""No module of app/holodesk imports another package's private names.

A name that starts with one underscore (``_is_oom``, ``_Fail``) belongs to its package: modules of the same
package may share it, modules of another package may not (what both need moves to a public home). import-linter
works on modules, not on the names imported from them, so the rule is read here from the ast of every module:
``from holodesk.a.b import _x`` in a module of another package than ``holodesk.a`` fails, as does
``import holodesk.a._b`` / ``from holodesk.a import _b`` (a private module) from outside ``holodesk.a``.
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path, root: Path) -> str:
    """The package a module file belongs to (a package's ``__init__`` belongs to that package)."""
    module = _module_name(path, root)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str, root: Path) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def private_imports_across_packages(root: Path = APP) -> list[str]:
    """``"module:line imports package.name"`` for every import of another package's private name or private module
    under ``root``'s ``holodesk`` package."""
    found = []
    for path in sorted((root / "holodesk").rglob("*.py")):
        here = _package_of(path, root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            imported: list[tuple[str, str]] = []  # (owning package, private name)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith(
                    "holodesk"):
                for alias in node.names:
                    if not _is_private(alias.name):
                        continue
                    submodule = f"{node.module}.{alias.name}"
                    owner = node.module if _is_module(submodule, root) else node.module.rpartition(".")[0]
                    imported.append((owner, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    for i, part in enumerate(parts):
                        if parts[0] == "holodesk" and _is_private(part):
                            imported.append((".".join(parts[:i]), part))
                            break
            for owner, name in imported:
                if owner != here and not here.startswith(owner + "."):
                    found.append(f"{_module_name(path, root)}:{node.lineno} imports {owner}'s {name}")
    return found


def test_no_module_imports_another_packages_private_names() -> None:
    found = private_imports_across_packages()
    assert not found, "private names imported across packages (move them to a public home):\n" + "\n".join(found)


def test_the_check_sees_a_private_import_across_packages(tmp_path: Path) -> None:
    """The check fails on the import it exists for (a native module taking a Holotron module's private helper)
    and lets a module of the same package share one."""
    package = tmp_path / "holodesk"
    for folder in (package / "policy" / "holotron", package / "policy" / "native"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "policy" / "__init__.py").write_text("")
    (package / "policy" / "holotron" / "policy.py").write_text("def _is_oom() -> bool:\n    return False\n")
    (package / "policy" / "holotron" / "engine.py").write_text(
        "from holodesk.policy.holotron.policy import _is_oom\n")
    (package / "policy" / "native" / "policy.py").write_text(
        "from holodesk.policy.holotron.policy import _is_oom\n")
    assert private_imports_across_packages(tmp_path) == [
        "holodesk.policy.native.policy:1 imports holodesk.policy.holotron's _is_oom"]
