#!/usr/bin/env python3
"""Check that this Python is the project's environment: torch, mmengine and the hosts
importable, and which peco_mm it would import.

Every tool in tools/ imports this module first: outside the environment (a system python, a
shell where .venv is not activated) a tool stops with one line that names the fix instead of a
ModuleNotFoundError traceback from deep inside its imports. Nothing is imported to find out
(importlib.util.find_spec), so this costs no time.
"""
import argparse
import importlib.util
import os.path as osp
import sys

ROOT = osp.dirname(osp.dirname(osp.realpath(__file__)))
NEEDED = ('torch', 'mmengine')  # what every tool imports
HOSTS = ('mmcv', 'mmpretrain', 'mmdet', 'mmseg', 'timm')  # what the configs build on


def missing(names=NEEDED) -> list[str]:
    """The packages of `names` this Python cannot import."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def fix_line(gone: list[str], tool: str) -> str:
    venv = osp.join(ROOT, '.venv', 'bin')
    fix = (f"source {osp.join(venv, 'activate')} first, or run {osp.join(venv, 'python')} "
           f'{tool}' if osp.exists(osp.join(venv, 'python')) else
           f'make install (in {ROOT}) builds it; then source .venv/bin/activate')
    return (f'{tool}: {", ".join(gone)} not found by {sys.executable}: the tools run in the '
            f"project's environment: {fix}")


def require(tool: str) -> None:
    """Exit with the fix when this Python lacks the project's packages (`tool`: the script's
    path, shown relative to the repository)."""
    gone = missing()
    if gone:
        path = osp.realpath(tool)
        raise SystemExit(fix_line(gone, osp.relpath(path, ROOT) if path.startswith(ROOT)
                                  else tool))


def light_module(path: str):
    """A module of this checkout's peco_mm loaded on its own by its path (`path` relative to
    peco_mm/, e.g. 'supervisor/cli.py'), without `import peco_mm` (which registers every model:
    torch, seconds): what a tool needs before it runs anything (--help, a bad flag,
    --preflight-only). Such a module imports only the standard library and mmengine's config
    at its top."""
    name = 'peco_mm_' + osp.splitext(osp.basename(path))[0]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, 'peco_mm', path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # (dataclasses look their module up)
        spec.loader.exec_module(module)
    return sys.modules[name]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='examples:\n  tools/check_environment.py     # 0 when everything is in place\n')
    parser.parse_args(argv)
    gone = missing(NEEDED + HOSTS)
    spec = importlib.util.find_spec('peco_mm')
    print(f'python: {sys.executable}')
    where = spec.origin if spec else 'not importable (pip install -e . or make install)'
    print(f'peco_mm: {where}')
    if gone:
        print(fix_line(gone, 'tools/check_environment.py'), file=sys.stderr)
    return 1 if gone else 0


if __name__ == '__main__':
    sys.exit(main())
else:  # imported by a tool: tell the user how to get the environment, then stop
    require(sys.argv[0] if sys.argv and sys.argv[0] else 'tools')
