"""Imports go downward between the layers of ``docs/architecture.md``.

The layer table is read from that page (between its ``layers: begin``/``end`` markers), every
module under ``src/reverie`` is parsed with :mod:`ast`, and each import of another layer must be
one its row allows — at module level, inside a function or under ``TYPE_CHECKING`` alike.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
ARCHITECTURE = REPO / "docs" / "architecture.md"

ALLOWED: dict[tuple[str, str], str] = {
    # (importing module, imported module): why it is tolerated for now. Each entry is a known
    # stray import; the test fails when one disappears, so remove its entry with the fix.
}


@dataclass(frozen=True, slots=True)
class Layer:
    """One row of the table."""

    name: str
    packages: tuple[str, ...]
    may_import: frozenset[str]


def _layers() -> list[Layer]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("<!-- layers: begin -->", 1)[1].split("<!-- layers: end -->", 1)[0]
    rows = [line for line in block.strip().splitlines() if line.startswith("|")][2:]
    layers = []
    for row in rows:
        name, packages, _holds, may = (cell.strip() for cell in row.strip("|").split("|"))
        layers.append(
            Layer(
                name=name,
                packages=tuple(re.findall(r"`([\w.]+)", packages)),
                may_import=frozenset(
                    part.strip() for part in may.split(",") if part.strip() not in ("", "—")
                ),
            )
        )
    return layers


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every ``reverie`` module ``path`` imports, with the line (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((target, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == "reverie"]


def _layer_of(module: str, layers: list[Layer]) -> Layer | None:
    """The layer whose package is the longest prefix of ``module``."""
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for package in layer.packages:
            inside = module == package or module.startswith(package + ".")
            if inside and (best is None or len(package) > best[0]):
                best = (len(package), layer)
    return best[1] if best else None


def _modules() -> list[tuple[Path, str]]:
    return [(path, _module_name(path)) for path in sorted((SRC / "reverie").rglob("*.py"))]


def _violations() -> dict[tuple[str, str], str]:
    layers = _layers()
    by_name = {layer.name: layer for layer in layers}
    found: dict[tuple[str, str], str] = {}
    for path, module in _modules():
        source = _layer_of(module, layers)
        assert source is not None, f"{module} belongs to no layer of {ARCHITECTURE.name}"
        if "every layer" in source.may_import:
            continue
        for target, line in _imports(path, module):
            dest = _layer_of(target, layers)
            assert dest is not None, f"{module}:{line} imports {target}, which is in no layer"
            if dest is source or dest.name in source.may_import:
                continue
            assert dest.name in by_name
            found[(module, target)] = (
                f"{path.relative_to(REPO)}:{line}: {source.name} ({module}) imports "
                f"{dest.name} ({target})"
            )
    return found


def test_the_layer_table_names_only_known_layers() -> None:
    layers = _layers()
    names = {layer.name for layer in layers}
    assert {"contracts", "storage", "loop", "runtime", "command line"} <= names
    for layer in layers:
        assert layer.packages, layer
        assert layer.may_import <= names | {"every layer"}, layer


def test_every_module_belongs_to_a_layer() -> None:
    layers = _layers()
    orphans = [module for _, module in _modules() if _layer_of(module, layers) is None]
    assert orphans == []


def test_imports_go_downward_between_the_layers() -> None:
    stray = {key: where for key, where in _violations().items() if key not in ALLOWED}
    assert stray == {}, "upward imports:\n" + "\n".join(sorted(stray.values()))


def test_the_allowed_stray_imports_still_exist() -> None:
    # An entry whose import is gone would hide the next stray import of the same pair.
    stale = sorted(set(ALLOWED) - set(_violations()))
    assert stale == [], f"fixed: remove these from ALLOWED: {stale}"


def test_the_loop_imports_only_the_contracts() -> None:
    layers = {layer.name: layer for layer in _layers()}
    assert layers["loop"].may_import == {"contracts"}


def _imports_between(source: str, target: str) -> list[str]:
    layers = {layer.name: layer for layer in _layers()}
    found = []
    for path, module in _modules():
        if _layer_of(module, list(layers.values())) is not layers[source]:
            continue
        for imported, line in _imports(path, module):
            if _layer_of(imported, list(layers.values())) is layers[target]:
                found.append(f"{path.relative_to(REPO)}:{line}: {imported}")
    return found


def test_the_configuration_does_not_import_the_command_line() -> None:
    # scripted: model files are read by reverie.testing, not by a CLI module.
    assert (
        "command line" not in {layer.name: layer for layer in _layers()}["configuration"].may_import
    )
    assert _imports_between("configuration", "command line") == []


def test_the_command_line_does_not_import_the_test_doubles() -> None:
    # The CLI reaches scripted: models through reverie.config.resolve_model_spec only.
    assert "testing" not in {layer.name: layer for layer in _layers()}["command line"].may_import
    assert _imports_between("command line", "testing") == []


def test_the_model_spec_grammar_is_parsed_in_one_module() -> None:
    # Every reader of "provider:model" strings goes through reverie.models.spec.ModelSpec.
    offenders = []
    for path, module in _modules():
        if module == "reverie.models.spec":
            continue
        text = path.read_text(encoding="utf-8")
        for needle in (
            'startswith("hermes:")',
            'startswith("openai-compat:")',
            'prefix == "hermes"',
        ):
            if needle in text:
                offenders.append(f"{path.relative_to(REPO)}: {needle}")
    assert offenders == []
