"""The package's layers, read from its imports: no cycle, no import upward against the order
docs/architecture.md gives, and the core (what a config builds or a user imports to train)
never importing what lies beside it: the launcher's supervisor (`peco_mm.supervisor`) and tool
support (`peco_mm.tooling`).

Every import counts, also those inside functions: a deferred import is still a dependency.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'peco_mm'

# bottom to top, as docs/architecture.md draws them; a package may import its own layer and
# those below it. `peco_mm/__init__.py` (which registers everything) sits above them all.
LAYERS = [
    ('registry', 'version', 'utils'),
    ('layers',),
    ('checkpoint',),
    ('models', 'datasets', 'ops'),
    ('tokenizer',),
    ('evaluation',),
    ('engine',),
    ('supervisor',),
    ('tooling',),
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
# beside the core: imported by the tools that use them, never by the core
NOT_CORE = ('supervisor', 'tooling')


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def project_imports(path: Path) -> set[str]:
    """The peco_mm modules `path` imports (absolute names), wherever the import statement is."""
    name = module_name(path)
    package = name if path.name == '__init__.py' else name.rsplit('.', 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split('.')
                base = base[:len(base) - node.level + 1]
                target = '.'.join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ''
            if target == 'peco_mm' or target.startswith('peco_mm.'):
                # `from . import x` / `from .pkg import mod`: the imported name may be a module
                found.update(f'{target}.{a.name}' for a in node.names)
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split('.')[0] == 'peco_mm')
    modules = set(MODULES)
    return {m for m in found if m in modules} - {name}


MODULES = {module_name(p): p for p in PACKAGE.rglob('*.py')}
GRAPH = {m: project_imports(p) for m, p in MODULES.items()}


def top_package(module: str) -> str | None:
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_a_layer():
    tops = {top_package(m) for m in MODULES} - {None}
    assert tops == set(LEVEL), f'packages without a layer: {tops - set(LEVEL)}; ' \
        f'layers without a package: {set(LEVEL) - tops}'


def test_no_upward_import():
    upward = []
    for mod, deps in GRAPH.items():
        src = top_package(mod)
        if src is None:  # peco_mm/__init__.py: the top
            continue
        for dep in deps:
            dst = top_package(dep)
            if dst is None or LEVEL[dst] > LEVEL[src]:
                upward.append(f'{mod} -> {dep}')
    assert not upward, 'imports against the layer order (docs/architecture.md):\n' + \
        '\n'.join(sorted(upward))


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(mod, path):
        state[mod] = 1
        for dep in sorted(GRAPH[mod]):
            # a package's __init__ importing its own modules is how packages work, not a cycle
            if dep.startswith(mod + '.'):
                continue
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[mod] = 2

    for mod in sorted(GRAPH):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, 'import cycles:\n' + '\n'.join(' -> '.join(c) for c in cycles)


def test_the_core_imports_no_supervisor_and_no_tool_support():
    """Also `peco_mm/__init__.py` (the top): neither its imports nor the modules it imports by
    name to register them (`CORE_MODULES`, `HOST_MODULES`) lie outside the core."""
    core = [m for m in GRAPH if top_package(m) not in NOT_CORE]
    bad = [f'{m} -> {d}' for m in core for d in GRAPH[m] if top_package(d) in NOT_CORE]
    import peco_mm
    bad += [f'peco_mm (register_all) -> {m}' for m in [*peco_mm.CORE_MODULES, *peco_mm.HOST_MODULES]
            if top_package(m) in NOT_CORE]
    assert not bad, 'the core imports what lies beside it:\n' + '\n'.join(sorted(bad))


def test_docs_draw_the_same_layers():
    text = (ROOT / 'docs' / 'architecture.md').read_text()
    drawn = re.search(r'Layers, bottom to top: ([^\n]+)\.\n', text)
    assert drawn, 'docs/architecture.md lost its "Layers, bottom to top: ..." line'
    levels = [tuple(sorted(re.findall(r'`([a-z_]+)`', part)))
              for part in drawn.group(1).split(' < ')]
    assert levels == [tuple(sorted(names)) for names in LAYERS]


def test_the_checks_catch_what_they_should(monkeypatch):
    """The checks fail on a planted upward import and on a planted cycle."""
    monkeypatch.setitem(GRAPH, 'peco_mm.layers.x', {'peco_mm.models.vit'})
    with pytest.raises(AssertionError, match='against the layer order'):
        test_no_upward_import()
    monkeypatch.setitem(GRAPH, 'peco_mm.models.vit', GRAPH['peco_mm.models.vit'] |
                        {'peco_mm.layers.x'})
    with pytest.raises(AssertionError, match='import cycles'):
        test_no_import_cycle()
    monkeypatch.setitem(GRAPH, 'peco_mm.engine.x', {'peco_mm.supervisor.launch'})
    with pytest.raises(AssertionError, match='against the layer order'):
        test_no_upward_import()
    with pytest.raises(AssertionError, match='the core imports what lies beside it'):
        test_the_core_imports_no_supervisor_and_no_tool_support()
