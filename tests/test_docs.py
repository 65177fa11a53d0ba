"""The docs do not drift from the code.

Every command shown in README.md, docs/*.md and the comments of configs/ (code blocks, indented
blocks and inline code) is extracted and checked: the scripts, configs and paths it names exist,
each flag it passes is one its tool's argparse accepts (read from the tool's `--help`), each
`--cfg-options` key has a parent in the config, tools shown as bare commands are executable, and
every tools/*.py answers `--help`. Each failure names its place, e.g.

    docs/x.md:12: tools/train.py has no flag --foo

so after a merge `python -m pytest tests/test_docs.py -q` (or `python tests/test_docs.py`, which
prints every problem) lists exactly what to fix. The `--help` speed limit is not asserted here.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ['README.md'] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / 'docs').glob('*.md'))
CONFIG_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / 'configs').rglob('*.py'))
PYTHONS = {'python', 'python3', '.venv/bin/python', '$(PY)', 'PY'}
REPO_DIRS = ('configs', 'tools', 'peco_mm', 'tests', 'docs')
REPO_FILES = {'README.md', 'Makefile', 'LICENSE', 'CITATION.cff', 'CHANGELOG.md', 'setup.cfg',
              'pyproject.toml', 'requirements.txt'}
HOSTS = ('mmpretrain', 'mmseg', 'mmdet')
# options of `mim train` / `mim test` themselves (openmim 0.3.x); the rest go to the host script
MIM_OPTIONS = {'--launcher', '--port', '--gpus', '--gpus-per-node', '--cpus-per-task',
               '--partition', '--srun-args', '--yes', '--checkpoint', '--help'}
HELP_TIMEOUT = 120
PUNCT = '`\'"[](),;|'


@dataclass
class Command:
    where: str  # 'docs/x.md:12'
    text: str
    kind: str  # 'tool', 'make' or 'mim'
    name: str  # tools/x.py, make target, or mim package
    args: list[str] = field(default_factory=list)
    bare: bool = False  # run as `tools/x.py ...`, not `python tools/x.py ...`
    inline: bool = False  # from an `inline span` (prose), not a code block


# ---- extraction --------------------------------------------------------------------------------
def _strip(tok: str) -> str:
    """A token without the Markdown / prose punctuation around it."""
    prev = None
    while tok != prev:
        prev, tok = tok, tok.strip(PUNCT)
        if tok.endswith(('.', ':')) and not tok.endswith('..'):
            tok = tok[:-1]
    return tok


def _drop_comment(text: str) -> str:
    return re.sub(r'(^|\s)#(\s.*)?$', '', text).strip()


def parse_command(text: str, where: str) -> Command | None:
    """A shell command line -> Command, or None when it runs nothing of this project."""
    toks = [t for t in (_strip(t) for t in _drop_comment(text).split()) if t]
    while toks and re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', toks[0]):  # VAR=value prefixes
        toks = toks[1:]
    if not toks:
        return None
    bare = True
    if toks[0] in PYTHONS or toks[0] == 'bash':
        toks, bare = toks[1:], False
    if not toks:
        return None
    if re.fullmatch(r'tools/[\w.-]+', toks[0]):
        return Command(where, text, 'tool', toks[0], toks[1:], bare)
    if toks[0] == 'make' and bare:
        return Command(where, text, 'make', toks[1] if len(toks) > 1 else '', toks[2:])
    if toks[0] == 'mim' and len(toks) > 2 and toks[1] in ('train', 'test'):
        return Command(where, text, 'mim', toks[2], toks[3:])
    return None


def _md_lines(path: str):
    """(line number, text, kind) of a Markdown file's lines, fences dropped; kind is 'prose',
    'code' (a fenced shell/plain block or an indented block) or 'python' (a fenced
    python/yaml block, not shell)."""
    fence = None
    for i, line in enumerate((ROOT / path).read_text().splitlines(), 1):
        if line.lstrip().startswith('```'):
            fence = None if fence is not None else line.strip()[3:].strip().lower()
            continue
        if fence is not None:
            yield i, line, 'python' if fence in ('python', 'py', 'yaml', 'yml') else 'code'
        else:
            yield i, line, 'code' if line.startswith('    ') and line.strip() else 'prose'


def _joined(lines):
    """Join shell continuations (`\\` at the end of a line); keep the first line's number."""
    out, buf, start = [], '', None
    for i, text in lines:
        if buf:
            buf += ' ' + text.strip()
        else:
            buf, start = text, i
        if buf.rstrip().endswith('\\'):
            buf = buf.rstrip()[:-1]
            continue
        out.append((start, buf))
        buf = ''
    if buf:
        out.append((start, buf))
    return out


def _inline_spans(text: str, first_line: int = 1):
    """(line number, content, paragraph) of the `inline code` spans of a text (spans may wrap
    lines); the paragraph is the text between the blank lines around the span."""
    for m in re.finditer(r'(?<!`)`([^`]+)`(?!`)', text):
        start, end = text.rfind('\n\n', 0, m.start()), text.find('\n\n', m.end())
        yield (first_line + text.count('\n', 0, m.start()), ' '.join(m.group(1).split()),
               text[start + 1:end if end >= 0 else len(text)])


@lru_cache(maxsize=None)
def extract(path: str):
    """Commands, inline spans, and all (line, token) pairs of one doc or config source."""
    commands, spans = [], []
    if path.endswith('.md'):
        lines = list(_md_lines(path))
        rows = [(i, t) for i, t, kind in lines if kind != 'python']
        code = [(i, t) for i, t, kind in lines if kind == 'code']
        spans = list(_inline_spans('\n'.join(t if k == 'prose' else '' for _, t, k in lines)))
    else:  # a config: comments and docstrings, with the leading '#' removed; commands are
        # the indented lines (`#   tools/dist_train.sh ...`), the rest is prose
        rows = [(i, re.sub(r'^\s*#', '', t)) for i, t in
                enumerate((ROOT / path).read_text().splitlines(), 1)]
        code = [(i, t) for i, t in rows if t.startswith('  ')]
        spans = [s for i, t in rows for s in _inline_spans(t, i)]
    for i, text in _joined(code):
        cmd = parse_command(text.strip(), f'{path}:{i}')
        if cmd:
            commands.append(cmd)
    for i, span, _ in spans:
        cmd = parse_command(span, f'{path}:{i}')
        if cmd and (cmd.args or not cmd.bare):  # a bare `tools/x.py` is a mention, not a run
            cmd.inline = True
            commands.append(cmd)
    tokens = [(i, tok) for i, text in rows for tok in text.split()]
    return commands, [(f'{path}:{i}', s, para) for i, s, para in spans], tokens


def all_commands():
    return [c for src in DOCS + CONFIG_SOURCES for c in extract(src)[0]]


# ---- what exists ------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def repo_basenames() -> frozenset:
    return frozenset(p.name for d in REPO_DIRS for p in (ROOT / d).rglob('*') if p.is_file())


def expand(pattern: str) -> list[str]:
    """Shell brace expansion of the first {a,b} group, recursively."""
    m = re.search(r'\{([^{}]*,[^{}]*)\}', pattern)
    if not m:
        return [pattern]
    return [x for alt in m.group(1).split(',')
            for x in expand(pattern[:m.start()] + alt + pattern[m.end():])]


def path_exists(pattern: str) -> bool:
    return all(glob.glob(str(ROOT / p.rstrip('/'))) for p in expand(pattern))


def activated_env() -> dict:
    """The environment of a shell after the docs' `source .venv/bin/activate` (the venv the
    tests run in): its bin/ first on PATH, VIRTUAL_ENV set, and nothing else added: no
    PYTHONPATH, so `python tools/x.py` finds peco_mm and the hosts only through the venv."""
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    env.update(PATH=f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               VIRTUAL_ENV=sys.prefix, OMP_NUM_THREADS='1')
    env.pop('PECO_SKIP_PREFLIGHT', None)
    return env


def _tool_help(tool: str) -> tuple[int, str]:
    """`python tools/x.py [SUB] --help`, run from the repository root in an activated shell."""
    try:
        script, *sub = tool.split()
        proc = subprocess.run(['python', script, *sub, '--help'], cwd=ROOT, env=activated_env(),
                              capture_output=True, text=True, timeout=HELP_TIMEOUT)
    except subprocess.TimeoutExpired:
        return -1, f'no answer in {HELP_TIMEOUT} s'
    return proc.returncode, proc.stdout + proc.stderr


def subcommands(text: str) -> list[str]:
    """The sub-commands an argparse help lists (`positional arguments:` then `  COMMAND` and
    one indented name per sub-command)."""
    block = text.split('positional arguments:\n', 1)[-1].split('\n\n')[0] \
        if 'positional arguments:' in text else ''
    return re.findall(r'^ {4}([a-z][\w-]*)(?: {2,}|$)', block, re.M)


@lru_cache(maxsize=None)
def tool_helps() -> dict:
    """`--help` of every tools/*.py, one subprocess each, run a few at a time; a tool with
    sub-commands also has `tools/x.py SUB` entries with each sub-command's help."""
    tools = sorted(str(p.relative_to(ROOT)) for p in (ROOT / 'tools').glob('*.py'))
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = dict(zip(tools, pool.map(_tool_help, tools)))
        subs = [f'{t} {sub}' for t, (_, text) in helps.items() for sub in subcommands(text)]
        helps.update(zip(subs, pool.map(_tool_help, subs)))
    return helps


def help_flags(text: str) -> set[str]:
    """The long flags of an argparse help text: its usage block and its option lines."""
    usage = text.split('\n\n')[0] if text.lstrip().startswith('usage:') else ''
    flags = set(re.findall(r'(?<![\w-])(--[A-Za-z0-9][\w-]*)', usage))
    for line in text.splitlines():  # '  -h, --help  show ...': invocations, 2+ spaces, help
        if re.match(r' {2}-', line):
            flags |= set(re.findall(r'--[A-Za-z0-9][\w-]*', re.split(r' {2,}', line[2:])[0]))
    return flags


def shell_target(tool: str) -> str | None:
    """The tools/*.py a launcher script forwards its extra flags to (dist_train.sh -> train.py),
    as its usage line says: `tools/dist_train.sh CONFIG NPROC [tools/train.py flags]`."""
    m = re.search(r'\[tools/(\w+\.py) flags\]', (ROOT / tool).read_text())
    return f'tools/{m.group(1)}' if m else None


@lru_cache(maxsize=None)
def host_flags(package: str, script: str) -> frozenset:
    """Flags of a host package's own tools/{train,test}.py (what `mim` runs), from its source."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return frozenset()
    src = Path(spec.origin).parent / '.mim' / 'tools' / script
    return frozenset(re.findall(r'[\'"](--[\w-]+)[\'"]', src.read_text())) if src.is_file() \
        else frozenset()


def project_flags() -> set[str]:
    return {f for _, text in tool_helps().values() for f in help_flags(text)}


def host_and_mim_flags() -> set[str]:
    flags = set(MIM_OPTIONS)
    for pkg in HOSTS:
        flags |= host_flags(pkg, 'train.py') | host_flags(pkg, 'test.py')
    return flags


@lru_cache(maxsize=None)
def load_config(path: str) -> dict:
    from mmengine.config import Config
    return Config.fromfile(str(ROOT / path)).to_dict()


def _config_arg(cmd: Command) -> str | None:
    for a in cmd.args:
        if re.fullmatch(r'configs/[\w/.-]+\.py', a) and (ROOT / a).is_file():
            return a
    return None


def _cfg_options(args: list[str]) -> list[str]:
    out, on = [], False
    for a in args:
        if a.startswith('--'):
            on = a == '--cfg-options'
        elif on and '=' in a:
            out.append(a.split('=', 1)[0])
    return out


def _makefile_targets() -> set[str]:
    return set(re.findall(r'^([\w.-]+):', (ROOT / 'Makefile').read_text(), re.M))


def _slug(heading: str) -> str:
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


@lru_cache(maxsize=None)
def anchors(md: str) -> frozenset:
    return frozenset(_slug(m) for m in re.findall(r'^#+\s+(.*)$', (ROOT / md).read_text(), re.M))


# ---- the checks: each returns every problem as 'place: message' ---------------------------------
def problems_paths() -> list[str]:
    out = []
    for src in DOCS + CONFIG_SOURCES:
        _, spans, tokens = extract(src)
        for i, raw in tokens:
            tok = _strip(_strip(raw).split('](')[-1].split('=')[-1])
            if '::' in tok or '...' in tok or '$' in tok:
                continue
            head = tok.split('/')[0]
            if (head in REPO_DIRS and '/' in tok) or tok in REPO_FILES:
                tok = tok.split('#')[0]
                if not path_exists(tok):
                    out.append(f'{src}:{i}: {tok} does not exist')
        for where, span, _ in spans:  # bare script / config names: `train.py`, `upernet_vit{b,l}..`
            for tok in map(_strip, span.split()):
                if re.fullmatch(r'[\w{},*-]+\.py', tok) and not all(
                        any(fnmatch.fnmatch(b, name) for b in repo_basenames())
                        for name in expand(tok)):
                    out.append(f'{where}: {tok} is not a file of this repository')
                if re.fullmatch(r'peco_mm(\.\w+)+', tok):
                    parts = tok.split('.')
                    if not any((ROOT / Path(*parts[:n])).with_suffix('.py').is_file()
                               or (ROOT / Path(*parts[:n]) / '__init__.py').is_file()
                               for n in range(2, len(parts) + 1)):
                        out.append(f'{where}: {tok} names no module of peco_mm')
        if src.endswith('.md'):
            text = (ROOT / src).read_text()
            for m in re.finditer(r'\]\(([^)\s]+)\)', text):
                target = m.group(1)
                if re.match(r'[a-z]+://', target) or target.startswith('mailto:'):
                    continue
                line = text.count('\n', 0, m.start()) + 1
                file, _, anchor = target.partition('#')
                md = os.path.normpath(os.path.join(os.path.dirname(src), file)) if file else src
                if not (ROOT / md).exists():
                    out.append(f'{src}:{line}: link to {target}: {md} does not exist')
                elif anchor and md.endswith('.md') and anchor not in anchors(md):
                    out.append(f'{src}:{line}: link to {target}: {md} has no heading #{anchor}')
    for cmd in all_commands():
        if cmd.kind == 'make' and cmd.name not in _makefile_targets():
            out.append(f'{cmd.where}: `make {cmd.name}`: the Makefile has no target {cmd.name!r}')
    return out


def problems_tools() -> list[str]:
    out = []
    for cmd in all_commands():
        if cmd.kind != 'tool':
            continue
        tool = ROOT / cmd.name
        if not tool.is_file():
            out.append(f'{cmd.where}: {cmd.name} does not exist')
        elif cmd.bare:
            first = tool.read_text().split('\n', 1)[0]
            if not first.startswith('#!'):
                out.append(f'{cmd.where}: {cmd.name} is run as a bare command but has no '
                           'shebang line (#!/usr/bin/env python)')
            if not os.access(tool, os.X_OK):
                out.append(f'{cmd.where}: {cmd.name} is run as a bare command but is not '
                           f'executable (chmod +x {cmd.name})')
    return out


def problems_convention() -> list[str]:
    """Every command is written the one way README.md states (`source .venv/bin/activate`
    once, then `python tools/x.py ...`): no `.venv/bin/python` / `.venv/bin/pip`, and no bare
    `tools/x.py` in a code block (a bare name in prose is a mention)."""
    out = []
    for cmd in all_commands():
        first = _drop_comment(cmd.text).split()
        first = [t for t in first if not re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', t)][:1]
        if first and first[0].startswith('.venv/'):
            out.append(f'{cmd.where}: `{first[0]} ...`: write `python ...` (the docs activate '
                       'the venv once: source .venv/bin/activate)')
        elif cmd.kind == 'tool' and cmd.bare and cmd.name.endswith('.py') and not cmd.inline:
            out.append(f'{cmd.where}: `{cmd.name} ...`: write `python {cmd.name} ...`')
    for src in DOCS:
        for i, line in enumerate((ROOT / src).read_text().splitlines(), 1):
            if '.venv/bin/pip' in line or '.venv/bin/python ' in line:
                out.append(f'{src}:{i}: .venv/bin/...: write `pip` / `python` (activated venv)')
    return out


def problems_help() -> list[str]:
    out = []
    for tool, (rc, text) in tool_helps().items():
        if rc != 0 or 'usage:' not in text:
            tail = ' | '.join(text.strip().splitlines()[-3:])
            out.append(f'{tool}: `python {tool} --help` failed (exit {rc}): {tail}')
    return out


def problems_flags() -> list[str]:
    helps, out = tool_helps(), []
    for cmd in all_commands():
        used = [a.split('=')[0] for a in cmd.args if re.match(r'--[A-Za-z0-9]', a)]
        if cmd.kind == 'tool':
            target = shell_target(cmd.name) if cmd.name.endswith('.sh') and \
                (ROOT / cmd.name).is_file() else cmd.name
            if target not in helps:
                continue
            if cmd.args and f'{target} {cmd.args[0]}' in helps:  # a sub-command's own flags
                target = f'{target} {cmd.args[0]}'
            known = help_flags(helps[target][1])
            out += [f'{cmd.where}: {target} has no flag {f}' for f in used if f not in known]
        elif cmd.kind == 'mim' and cmd.name in HOSTS:
            script = 'train.py' if ' train ' in f' {cmd.text} ' else 'test.py'
            known = MIM_OPTIONS | host_flags(cmd.name, script)
            out += [f'{cmd.where}: neither mim nor {cmd.name}\'s tools/{script} has flag {f}'
                    for f in used if f not in known]
    ours, hosts = project_flags(), host_and_mim_flags()
    for src in DOCS + CONFIG_SOURCES:
        for where, span, para in extract(src)[1]:
            if re.match(r'--[A-Za-z0-9]', span):  # a flag quoted on its own, e.g. `--resume`
                flag = span.split()[0].split('=')[0].rstrip('`-,.')
                # a host's own flag counts only where the paragraph speaks of mim or a host
                about_hosts = re.search(r'\b(mim|mmpretrain|mmseg|mmdet)\b', para)
                if flag not in ours and not (about_hosts and flag in hosts):
                    out.append(f'{where}: {flag} is a flag of no tool in tools/' +
                               (' (nor of mim / the hosts\' train.py, test.py)'
                                if about_hosts else ''))
    return out


def problems_cfg_keys() -> list[str]:
    out = []
    for cmd in all_commands():
        config = _config_arg(cmd)
        if cmd.kind == 'mim':
            if cmd.name not in HOSTS:
                if not cmd.name.isupper():  # PACKAGE placeholder
                    out.append(f'{cmd.where}: `mim {cmd.name}`: not a host package {HOSTS}')
            elif config and load_config(config).get('default_scope') != cmd.name:
                out.append(f'{cmd.where}: {config} runs in '
                           f"{load_config(config).get('default_scope')}, not {cmd.name}")
        if not config:
            continue
        for key in _cfg_options(cmd.args):
            node, walked = load_config(config), []
            for part in key.split('.')[:-1]:
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, (list, tuple)) and part.isdigit() and \
                        int(part) < len(node):
                    node = node[int(part)]
                else:
                    out.append(f'{cmd.where}: --cfg-options {key}: {config} has no '
                               f"{'.'.join(walked + [part])}")
                    break
                walked.append(part)
    return out


# ---- tests ------------------------------------------------------------------------------------
def _assert_none(problems: list[str]):
    assert not problems, f'{len(problems)} problem(s):\n' + '\n'.join(sorted(set(problems)))


def test_docs_name_existing_paths_links_and_make_targets():
    _assert_none(problems_paths())


def test_docs_tools_exist_and_bare_commands_are_executable():
    _assert_none(problems_tools())


def test_every_tool_answers_help():
    _assert_none(problems_help())


def test_docs_write_every_command_one_way():
    _assert_none(problems_convention())


def test_docs_flags_exist_in_the_tools_argparse():
    _assert_none(problems_flags())


def test_docs_cfg_options_keys_and_mim_hosts_match_the_configs():
    _assert_none(problems_cfg_keys())


def test_extraction_finds_commands_of_every_form():
    """Guards the checker itself: each form of command in the docs is seen."""
    cmds = all_commands()
    kinds = {(c.kind, c.bare) for c in cmds}
    assert {('tool', True), ('tool', False), ('make', False), ('mim', False)} <= kinds, kinds
    joined = parse_command('OMP_NUM_THREADS=2 python tools/x.py --a 1 \\', 'f:1')
    assert joined.name == 'tools/x.py' and not joined.bare and joined.args[:1] == ['--a']
    text = ('usage: x.py [-h] [--batch-size B]\n\noptions:\n  -h, --help  show\n'
            '  --local-rank L, --local_rank L\n\nexamples:\n  python x.py --not-a-flag\n')
    assert help_flags(text) == {'--batch-size', '--help', '--local-rank', '--local_rank'}
    assert expand('a_{b,c}_{d,e}.py') == ['a_b_d.py', 'a_b_e.py', 'a_c_d.py', 'a_c_e.py']


def section_commands(doc: str, heading: str) -> list[str]:
    """The lines of the first shell code block under a Markdown heading."""
    text = (ROOT / doc).read_text().split(f'\n## {heading}\n', 1)[1]
    block = text.split('```bash\n', 1)[1].split('```', 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_export_commands_run_as_written(tmp_path):
    """README's "Load a checkpoint in your own script": the export commands and the one-liners
    that load their output in timm and transformers, run as written (`python` being this
    interpreter) in a folder holding a tiny fine-tuned classifier at the path they name."""
    import shlex

    import pytest
    import torch
    pytest.importorskip('transformers')
    from peco_mm.models.vit import PeCoViT
    commands = section_commands('README.md', '3. Load a checkpoint in your own script')
    assert len(commands) == 4 and sum('tools/export_checkpoint.py' in c for c in commands) == 2
    vit = PeCoViT(arch='test', img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=False,
                  rel_pos_bias='per_block', layer_scale_init_value=0.1, out_type='avg_featmap',
                  final_norm=False)
    sd = {f'backbone.{k}': v for k, v in vit.state_dict().items()}
    sd.update({'head.fc.weight': torch.randn(3, 64), 'head.fc.bias': torch.zeros(3)})
    ckpt = tmp_path / shlex.split(commands[0])[2]
    ckpt.parent.mkdir(parents=True)
    torch.save({'state_dict': sd, 'meta': {}}, ckpt)
    (tmp_path / 'tools').symlink_to(ROOT / 'tools')
    for command in commands:
        assert shlex.split(command)[0] == 'python', command
        run_as_written(command, cwd=tmp_path)


# the configs README's own-script block names -> the tiny configs that stand in for them, and the
# host whose registry builds them
OWN_SCRIPT_STANDINS = {
    'configs/peco/finetune_vitb_in1k.py': ('configs/demo/finetune_tiny_cls.py', 'mmpretrain'),
    'configs/peco/mask_rcnn_vitb_coco.py': ('configs/demo/mask_rcnn_tiny_shapes.py', 'mmdet'),
    'configs/peco/upernet_vitb_ade20k.py': ('configs/demo/upernet_tiny_shapes.py', 'mmseg'),
}


def python_block(doc: str, heading: str) -> str:
    """The first fenced python block under a Markdown heading."""
    text = (ROOT / doc).read_text().split(f'\n## {heading}\n', 1)[1]
    return text.split('```python\n', 1)[1].split('```', 1)[0]


@pytest.mark.slow
def test_readme_own_script_inference_runs_as_written(tmp_path):
    """README's "Load a checkpoint in your own script": the block, as written, in a script run
    from a folder where each config it names is the demo's tiny one of the same host and each
    checkpoint is that model's weights saved as plain data: mmpretrain's inferencer, mmdet's
    init_detector / inference_detector and mmseg's init_model / inference_model each give
    their result for demo.jpg."""
    import importlib

    import numpy as np
    import torch
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from PIL import Image
    block = python_block('README.md', '3. Load a checkpoint in your own script')
    named = re.findall(r"'(configs/peco/\w+\.py)',\s*(?:pretrained=)?'(work_dirs/[\w/.]+\.pth)'",
                       block)
    assert sorted(c for c, _ in named) == sorted(OWN_SCRIPT_STANDINS), named
    for config, ckpt in named:
        tiny, scope = OWN_SCRIPT_STANDINS[config]
        (tmp_path / config).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / config).write_text(f'_base_ = {str(ROOT / tiny)!r}\n'
                                       'model = dict(backbone=dict(init_cfg=None))\n')
        cfg = Config.fromfile(str(tmp_path / config))
        with DefaultScope.overwrite_default_scope(scope):
            model = importlib.import_module(f'{scope}.registry').MODELS.build(cfg.model)
        (tmp_path / ckpt).parent.mkdir(parents=True, exist_ok=True)
        torch.save({'state_dict': model.state_dict(), 'meta': {}}, tmp_path / ckpt)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (96, 128, 3), np.uint8)).save(
        tmp_path / 'demo.jpg')
    (tmp_path / 'own_script.py').write_text(
        block + "print('result:', len(boxes), tuple(labels.shape), int(top1))\n")
    env = dict(activated_env(), PYTHONPATH=str(ROOT))  # this checkout's peco_mm
    proc = subprocess.run([sys.executable, 'own_script.py'], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    boxes, h, w, top1 = map(int, re.search(r'^result: (\d+) \((\d+), (\d+)\) (\d+)$',
                                           proc.stdout, re.M).groups())
    assert (h, w) == (96, 128) and 0 <= top1 < 3  # the label map at the image's size; 3 classes


# ---- what a user decides by --------------------------------------------------------------------
def _section(doc: str, heading: str) -> str:
    return (ROOT / doc).read_text().split(f'\n## {heading}\n', 1)[1].split('\n## ', 1)[0]


def test_readme_says_what_has_and_has_not_been_run():
    """README's results list states the GPU-hours of stages 1-2 as docs/reproduce.md's estimate
    table gives them, and that no checkpoint, real dataset or multi-GPU run exists."""
    listed = ' '.join(_section('README.md', 'Results').split())
    assert 'No PeCo checkpoint exists yet' in listed
    assert 'Nothing has run on the real datasets' in listed
    assert 'Nothing has run on several GPUs' in listed
    # the estimate table's rows: | row | throughput | GPU-hours (as shipped; the earlier default) |
    rows = {row: hours.replace(';', ' ').split() for row, hours in re.findall(
        r'^\| (PeCo [^|]+?) \| [^|]+ \| ([\d; ]+) \|$',
        (ROOT / 'docs/reproduce.md').read_text(), re.M)}
    tokenizer = rows['PeCo tokenizer, 100 ep (128 M images), fp32 as shipped']
    ep300 = rows['PeCo ViT-B pretraining, 300 ep (384 M images)']
    ep800 = rows['PeCo ViT-B pretraining, 800 ep (1.02 B images)']
    assert f'about {tokenizer[0]} GPU-hours' in listed
    assert f'about {ep300[0]} GPU-hours for 300 epochs and {ep800[0]} for 800' in listed
    assert f'({ep300[1]} and {ep800[1]} with the eager channels-last target, the earlier ' \
        'default)' in listed


def test_long_docs_open_with_a_summary_table():
    """reproduce.md and benchmarks.md (some 800 lines each) open with a table that links to
    their sections (the links are checked by test_docs_name_existing_paths_links_...)."""
    for doc in ('docs/reproduce.md', 'docs/benchmarks.md'):
        head = (ROOT / doc).read_text().split('\n## ', 1)[0]
        table = [ln for ln in head.splitlines() if ln.startswith('|')]
        first = table[:next((i for i, ln in enumerate(table[1:], 1)
                             if not ln.startswith('|')), len(table))]
        assert len(first) >= 6, doc
        assert len(re.findall(r'\]\(#[\w-]+\)', '\n'.join(first))) >= 3, doc


def test_video_data_layout_is_documented():
    """Each file and folder the TimeSformer configs read is named in getting_started's data
    layouts (with its {train,val} spelled out)."""
    from mmengine.config import Config
    layouts = _section('docs/getting_started.md', 'Data layouts')
    named = set()
    for token in re.findall(r'`([^`]+)`', layouts):
        named.update(expand(token))
    for name in ('timesformer_vitb_k400', 'timesformer_vitb_ssv2'):
        cfg = Config.fromfile(str(ROOT / 'configs/peco' / f'{name}.py'))
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            dataset = cfg[loader]['dataset']
            assert dataset['ann_file'] in named, (name, loader, dataset['ann_file'])
            folder = dataset['data_prefix']['video'].rstrip('/')
            assert any(n.rstrip('/') == folder or n.startswith(folder + '/') for n in named), \
                (name, loader, folder)


def test_model_zoo_and_benchmarks_no_longer_say_no_gpu_was_used():
    """Figures of docs/benchmarks.md were measured on a GPU (an H200): the model zoo and the
    memory section say so instead of 'no GPU was available'."""
    for doc in ('docs/model_zoo.md', 'docs/benchmarks.md', 'tools/gen_model_zoo.py'):
        text = ' '.join((ROOT / doc).read_text().split())
        assert 'No GPU was available' not in text and 'no GPU was available' not in text, doc
    assert 'H200' in (ROOT / 'docs/model_zoo.md').read_text()


def test_ci_runs_the_readmes_test_command():
    """README's two commands are `make demo` and `make test`, and CI (.ci/run, a fresh clone)
    runs that test command as written."""
    commands = [_drop_comment(c) for c in section_commands('README.md', 'The two commands')]
    assert commands == ['make demo', 'make test'], commands
    ci = [ln.strip() for ln in (ROOT / '.ci' / 'run').read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith('#')]
    assert ci[-1] == commands[1], ci


def test_local_folders_the_docs_recommend_are_ignored_by_git():
    """Every dataset (`data/...`), weights file (`checkpoints/...`) and run (`work_dirs/...`)
    path the docs name, and the report `make gpu-check` writes, is ignored by git; the
    repository's own test data folders (tests/*/data/) and its sources are not."""
    import shutil
    if shutil.which('git') is None or not (ROOT / '.git').exists():
        pytest.skip('not a git checkout')
    named = set()
    for src in DOCS:
        for _, raw in extract(src)[2]:
            tok = _strip(_strip(raw).split('](')[-1].split('=')[-1])
            if re.fullmatch(r'(data|checkpoints|work_dirs)/[\w./{},<>*-]*', tok):
                named.add(tok)
    assert {'data/imagenet', 'checkpoints/mocov3_vit_base_300ep.pth'} <= named
    kept = ['tests/ops/data/mmcv_ops_2.1.0.pt', 'tests/tokenizer/data/new.pth', 'configs/x.py',
            'peco_mm/datasets/x.py']

    def ignored(paths):
        proc = subprocess.run(['git', 'check-ignore', '--no-index', '--stdin'], cwd=ROOT,
                              input='\n'.join(paths) + '\n', capture_output=True, text=True)
        return set(proc.stdout.split())
    assert ignored(sorted(named) + ['gpu_check.md']) == named | {'gpu_check.md'}
    assert not ignored(kept)


# ---- documented commands, run as written -------------------------------------------------------
def documented(src: str, start: str) -> str:
    """The one documented command of `src` that starts with `start` (continuations joined,
    comment dropped)."""
    found = [c.text for c in extract(src)[0] if _drop_comment(c.text).startswith(start)]
    assert len(found) == 1, f'{src}: {len(found)} commands start with {start!r}: {found}'
    return ' '.join(_drop_comment(found[0]).split())


def run_as_written(command: str, cwd: Path, timeout: int = 300) -> str:
    """Run a command line in bash, in a shell that did what the docs say and nothing more
    (`source .venv/bin/activate`); return its output, failing with it on a non-zero exit."""
    proc = subprocess.run(['bash', '-c', command], cwd=cwd, env=activated_env(),
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'`{command}` failed ({proc.returncode}):\n{out[-4000:]}'
    return out


# a tiny classification run (the demo's toy fine-tuning config, 2 iterations), written where the
# documented plot_logs command reads a run
TINY_RUN = """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
work_dir = 'work_dirs/tokenizer_vqvae_in1k'
train_dataloader = dict(batch_size=4, dataset=dict(data_root='cls'))
val_dataloader = dict(dataset=dict(data_root='cls'))
test_dataloader = val_dataloader
param_scheduler = []
train_cfg = dict(max_iters=2, val_interval=2)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=2))
"""


@pytest.mark.slow
def test_documented_commands_run_as_written(tmp_path):
    """check_dataset on made ADE20K data, convert_checkpoint on a made MoCo v3 file, a tiny
    training run, plot_logs on its log and test.py on its checkpoint: each the documented line,
    placeholders (CONFIG, CHECKPOINT) filled in, run from a folder holding the repository's
    tools/ and configs/ and the made files, in the activated environment only."""
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from peco_mm.tooling.demo_data import make_class_folder
    from peco_mm.tooling.demo_data import make_ade
    for name in ('tools', 'configs'):
        (tmp_path / name).symlink_to(ROOT / name)
    # python tools/check_dataset.py configs/peco/upernet_vitb_ade20k.py --split train val
    make_ade(tmp_path / 'data' / 'ade' / 'ADEChallengeData2016', n_train=2, n_val=1)
    out = run_as_written(documented('docs/getting_started.md', 'python tools/check_dataset.py '
                                    'configs/peco/upernet_vitb_ade20k.py'), tmp_path)
    assert 'checking 3 images and 3 label maps' in out and 'all files are good' in out
    # python tools/convert_checkpoint.py vit-b-300ep.pth.tar checkpoints/mocov3_vit_base_300ep.pth
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4,
                            num_classes=0)
    torch.save({'epoch': 300, 'arch': 'vit_base', 'state_dict': {
        f'module.base_encoder.{k}': v for k, v in vit.state_dict().items()}},
        tmp_path / 'vit-b-300ep.pth.tar')
    convert = documented('README.md', 'python tools/convert_checkpoint.py')
    assert convert == documented('docs/getting_started.md', 'python tools/convert_checkpoint.py')
    (tmp_path / 'checkpoints').mkdir()
    out = run_as_written(convert, tmp_path)
    assert 'mocov3' in out
    from peco_mm.models import PeCoViT
    PeCoViT.from_checkpoint(str(tmp_path / 'checkpoints' / 'mocov3_vit_base_300ep.pth'))
    # python tools/train.py CONFIG [--work-dir DIR] ... (the optional flags left out)
    make_class_folder(tmp_path / 'cls' / 'train', size=32, per_class=4)
    make_class_folder(tmp_path / 'cls' / 'val', size=32, seed=1, per_class=2)
    (tmp_path / 'tiny.py').write_text(TINY_RUN.format(root=ROOT))
    preflight = documented('README.md', 'python tools/train.py CONFIG --preflight-only')
    assert run_as_written(preflight.replace('CONFIG', 'tiny.py'), tmp_path).startswith(
        'train.py: pre-flight of tiny.py passed: ')  # all there, one line
    train = re.sub(r'\s*\[.*\]', '', documented('README.md', 'python tools/train.py CONFIG ['))
    out = run_as_written(train.replace('CONFIG', 'tiny.py'), tmp_path)
    assert 'Iter(train) [2/2]' in out and 'Config:' not in out  # the config dump: in the log
    run = tmp_path / 'work_dirs' / 'tokenizer_vqvae_in1k'
    assert 'Config:' in next(run.glob('*/*.log')).read_text()
    # python tools/plot_logs.py work_dirs/tokenizer_vqvae_in1k --out .../plots
    out = run_as_written(documented('docs/getting_started.md', 'python tools/plot_logs.py '
                                    'work_dirs/tokenizer_vqvae_in1k'), tmp_path)
    assert (run / 'plots' / 'loss.png').is_file()
    # python tools/test.py CONFIG CHECKPOINT
    test = documented('README.md', 'python tools/test.py CONFIG CHECKPOINT')
    out = run_as_written(test.replace('CONFIG', 'tiny.py').replace(
        'CHECKPOINT', 'work_dirs/tokenizer_vqvae_in1k/iter_2.pth'), tmp_path)
    assert 'accuracy/top1' in out


# ---- the backbone in your own config: each documented snippet builds ---------------------------
def config_snippets() -> list[tuple[str, str]]:
    """(place, text) of every fenced python block of the docs that is a whole host config using
    PeCoViT (`_base_ = 'mmX::...'` and custom_imports)."""
    out = []
    for src in DOCS:
        block, start = None, 0
        for i, line, kind in _md_lines(src):
            if kind == 'python':
                if block is None:
                    block, start = [], i
                block.append(line)
            elif block is not None:
                text = '\n'.join(block)
                if re.search(r"^_base_ = 'mm\w+::", text, re.M) and 'custom_imports' in text:
                    out.append((f'{src}:{start}', text))
                block = None
    return out


def _tiny(node):
    """The snippet's model at test size: a 64-wide, 4-block ViT at 64 px without pretrained
    weights; the heads' ViT-B width (768) becomes 64 wherever the snippet states it."""
    if isinstance(node, dict):
        if node.get('type') == 'PeCoViT':
            node.update(arch=dict(embed_dims=64, num_layers=4, num_heads=2), img_size=64,
                        init_cfg=None)
        for k, v in node.items():
            if k == 'in_channels':
                node[k] = [64 if c == 768 else c for c in v] if isinstance(v, list) else (
                    64 if v == 768 else v)
            else:
                _tiny(v)
    return node


def test_backbone_snippets_build_in_their_hosts(tmp_path):
    import importlib

    import torch
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope
    snippets = config_snippets()
    hosts = sorted(re.search(r"_base_ = '(mm\w+)::", t).group(1) for _, t in snippets)
    assert hosts == ['mmdet', 'mmpretrain', 'mmseg', 'mmseg'], hosts  # README + getting started
    for i, (where, text) in enumerate(snippets):
        (tmp_path / f's{i}.py').write_text(text)
        cfg = Config.fromfile(str(tmp_path / f's{i}.py'))
        scope = cfg.default_scope
        MODELS = importlib.import_module(f'{scope}.registry').MODELS
        with DefaultScope.overwrite_default_scope(scope):  # the caller's scope stays
            model = revert_sync_batchnorm(MODELS.build(_tiny(cfg.model))).eval()
        x = torch.randn(1, 3, 64, 64)
        with torch.no_grad():
            if scope == 'mmdet':  # backbone pyramid -> FPN: 5 levels of 256 channels
                shapes = [tuple(f.shape) for f in model.extract_feat(x)]
                assert shapes == [(1, 256, 64 // s, 64 // s) for s in (4, 8, 16, 32, 64)], where
            else:
                out = model(x, mode='tensor')
                assert out.shape[:2] == ((1, 150) if scope == 'mmseg' else (1, 1000)), where


# the task a snippet of "Load a checkpoint in your own script" loads, by its host
SNIPPET_TASKS = {'mmdet': 'mask_rcnn', 'mmseg': 'upernet', 'mmpretrain': 'classifier'}


@pytest.mark.slow
def test_own_script_snippets_load_the_launchers_checkpoints(tmp_path):
    """getting_started's three own-script snippets, each run as written in a process of its own
    (peco_mm importable, as installed, for the PeCo models' classes; its reader not used), on
    tiny PeCoViT runs of tools/train.py: the work dir's config and checkpoint in place of the
    snippet's, a 96x64 image as demo.jpg."""
    import numpy as np
    from PIL import Image

    from tests.reliability.host_runs import train_host_runs
    text = _section('docs/getting_started.md', 'Load a checkpoint in your own script')
    blocks = re.findall(r'```python\n(.*?)```', text, re.S)
    hosts = [re.match(r'from (mm\w+)', b).group(1) for b in blocks]
    assert hosts == ['mmdet', 'mmseg', 'mmpretrain'], hosts
    runs = train_host_runs(tmp_path / 'runs', peco=True)
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)
                    ).save(tmp_path / 'demo.jpg')
    for host, block in zip(hosts, blocks):
        cfg, ckpt = runs[SNIPPET_TASKS[host]]
        code = re.sub(r"'work_dirs/[\w/]+\.py'", repr(str(cfg)), block)
        code = re.sub(r"'work_dirs/[\w/]+\.pth'", repr(str(ckpt)), code)
        assert code.count(str(tmp_path)) == 2, code
        code += '\nprint("result", type(result).__name__)\n'
        proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert proc.returncode == 0, proc.stderr[-3000:]
        want = {'mmdet': 'DetDataSample', 'mmseg': 'SegDataSample', 'mmpretrain': 'dict'}[host]
        # (mmpretrain's inferencer ends its progress bar without a newline)
        assert proc.stdout.splitlines()[-1].endswith(f'result {want}'), proc.stdout


if __name__ == '__main__':  # print every problem, grouped by check
    for check in (problems_paths, problems_tools, problems_convention, problems_help,
                  problems_flags, problems_cfg_keys):
        found = sorted(set(check()))
        print(f'== {check.__name__}: {len(found)}')
        print('\n'.join(found))
