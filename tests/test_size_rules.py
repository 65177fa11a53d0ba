"""The size rules (docs/architecture.md, "Size rules") for the package and the tools alike: no
module or tool over 450 lines, no function over 60 (a nested function counts inside its parent
and on its own)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def covered() -> list[Path]:
    """tools/*.py, setup.py and every Python package at the top of the repository (peco_mm and
    any package beside it), not the tests."""
    packages = [p for p in ROOT.iterdir()
                if p.is_dir() and (p / '__init__.py').is_file() and p.name != 'tests']
    files = [f for pkg in packages for f in pkg.rglob('*.py')]
    return sorted(files + list((ROOT / 'tools').glob('*.py')) + [ROOT / 'setup.py'])


def oversized(name: str, source: str) -> list[str]:
    """What in one file breaks the rules, one line each."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f'{name}: {lines} lines (at most {MAX_MODULE_LINES})')
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f'{name}:{node.lineno} {node.name}(): {length} lines '
                             f'(at most {MAX_FUNCTION_LINES})')
    return found


def test_the_package_and_the_tools_keep_the_size_rules():
    files = covered()
    assert {ROOT / 'tools' / 'train.py', ROOT / 'peco_mm' / 'registry.py'} <= set(files)
    found = [line for f in files
             for line in oversized(str(f.relative_to(ROOT)), f.read_text(encoding='utf-8'))]
    assert not found, '\n'.join(found)


def test_the_check_catches_what_it_should():
    body = ''.join(f'    x{i} = {i}\n' for i in range(59))
    assert oversized('ok.py', f'def f():\n{body}') == []  # 60 lines: allowed
    assert oversized('long.py', f'def f():\n{body}    return 1\n') == [
        'long.py:1 f(): 61 lines (at most 60)']
    inner = ''.join(' ' * 8 + line + '\n' for line in body.splitlines())
    nested = f'class A:\n    def m(self):\n        def g():\n{inner}'  # g: 60 lines, m: 61
    assert [line.split(' ')[1] for line in oversized('n.py', nested)] == ['m():']
    assert oversized('big.py', 'x = 1\n' * 451) == ['big.py: 451 lines (at most 450)']
