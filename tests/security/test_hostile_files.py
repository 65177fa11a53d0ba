"""Nothing runs from a file you load: every route that reads a weights file, against every
hostile file of `hostile.py`, refuses it with a one-line error naming the file and what is
wrong, and the marker the payloads would create never appears.

Routes are called in-process (the tools through their `main(argv)`); a few run as the
command a user types, to see the error as printed.
"""
import contextlib
import re
import sys
from types import SimpleNamespace

import pytest
import torch

from peco_mm.checkpoint.budget import BUDGET_ENV
from tests.conftest import ROOT, load_tool, run_tool
from tests.security.hostile import (ALLOCATION, BUDGET_MB, CODE_IN_CONFIG, EXPECTED,
                                    LIVE_IN_PROCESS, NAME_EXPECTED, OTHER_REGISTRY_NAME,
                                    TINY_PARTS, TRACE_MODULE, build_corpus, build_name_corpus,
                                    name_payloads)
from tests.tools.conftest import isolated_mmengine  # noqa: F401

TINY_TOK = dict(base_channels=4, channel_mult=(1, 2, 2), num_res_blocks=1, num_embeddings=16,
                embed_dims=8, perceptual_weight=0.0)
TINY_VIT = dict(arch=dict(embed_dims=16, num_layers=2, num_heads=2), img_size=32,
                patch_size=8)
LEGACY_TOKENIZER = ROOT / 'tests/security/data/legacy_tokenizer.pth'
TINY_CLS = """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
train_dataloader = dict(batch_size=2, dataset=dict(data_root='{data}'))
val_dataloader = dict(batch_size=2, dataset=dict(data_root='{data}'))
test_dataloader = val_dataloader
param_scheduler = []
train_cfg = dict(max_iters=2, val_interval=100)
"""
# the pretraining demo config with the committed tiny tokenizer (4x down, 8x8 codes at 32 px)
TINY_PECO = """
_base_ = '{root}/configs/demo/pretrain_tiny_photos.py'
model = dict(backbone=dict(img_size=32, patch_size=4),
             target_generator=dict(checkpoint='{tokenizer}'))
"""


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # the read budget the allocation payloads exceed
        mp.setenv(BUDGET_ENV, BUDGET_MB)
        yield make_corpus(tmp_path_factory)


def make_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp('hostile')
    files, marker, texts = build_corpus(root)
    from peco_mm.tooling.demo_data import make_class_folder
    make_class_folder(root / 'data' / 'train', per_class=1, size=32)
    make_class_folder(root / 'data' / 'val', per_class=1, size=32, seed=1)
    (root / 'cls.py').write_text(TINY_CLS.format(root=ROOT, data=root / 'data'))
    (root / 'peco.py').write_text(TINY_PECO.format(root=ROOT, tokenizer=LEGACY_TOKENIZER))
    images = root / 'data' / 'val'
    return SimpleNamespace(root=root, files=files, marker=marker, texts=texts, images=images,
                           image=sorted(images.rglob('*.png'))[0], cls=root / 'cls.py',
                           peco=root / 'peco.py')


def check_refused(call, path, expected: str, marker) -> str:
    """`call()` must raise (or exit) with one line naming `path` and matching `expected`."""
    with pytest.raises((Exception, SystemExit)) as info:
        call()
    msg = str(info.value)
    assert not marker.exists(), f'{path}: code ran ({msg})'
    assert '\n' not in msg.strip(), msg
    assert str(path) in msg and re.search(expected, msg), msg
    return msg


# ---- the routes: each reads `path` the way a user's command would ------------------------------
def tokenizer_routes():
    from peco_mm.tokenizer import FrozenPeCoTokenizer, PeCoTokenizer

    def init_cfg(p, c):
        PeCoTokenizer(**TINY_TOK, init_cfg=dict(type='Pretrained', checkpoint=str(p))
                      ).init_weights()
    return {
        'FrozenPeCoTokenizer': lambda p, c: FrozenPeCoTokenizer(str(p)),
        'PeCoTokenizer init_cfg Pretrained': init_cfg,
    }


def model_routes():
    from peco_mm.models import PeCoViT, ViTPyramidAdapter
    from peco_mm.tokenizer.perceptual import PerceptualLoss, _load_torchvision_state

    def pretrained(p):
        return dict(type='Pretrained', checkpoint=str(p))

    def head(p, c):
        import mmpretrain.models  # noqa: F401  (registers the heads)
        from mmengine.registry import DefaultScope
        from mmpretrain.registry import MODELS
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            MODELS.build(dict(type='LinearClsHead', num_classes=2, in_channels=16,
                              init_cfg=pretrained(p))).init_weights()
    return {
        'PeCoViT.from_checkpoint': lambda p, c: PeCoViT.from_checkpoint(p),
        'backbone init_cfg Pretrained': lambda p, c: PeCoViT(
            **TINY_VIT, init_cfg=pretrained(p)).init_weights(),
        'neck init_cfg Pretrained': lambda p, c: ViTPyramidAdapter(
            16, init_cfg=pretrained(p)).init_weights(),
        'head init_cfg Pretrained (mmpretrain)': head,
        'perceptual network (vit)': lambda p, c: PerceptualLoss(
            'vit', str(p), layers=(1,), vit_cfg=dict(num_heads=2)),
        'perceptual network (torchvision)': lambda p, c: _load_torchvision_state(str(p),
                                                                                 'vgg16'),
    }


def runner_routes():
    """load_from and resume as mmengine's Runner does them, and the launcher's resume check."""
    from peco_mm.engine.hooks import ResumeCheckHook
    return {
        'Runner.load_checkpoint (load_from)': lambda p, c: c.runner.load_checkpoint(str(p)),
        'Runner.resume (--resume)': lambda p, c: c.runner.resume(str(p)),
        'ResumeCheckHook (--resume)': lambda p, c: ResumeCheckHook(str(p)).before_run(c.runner),
    }


def main(name, *args):
    return load_tool(name).main([str(a) for a in args])


def tool_routes():
    """Tools that reach the file within a fraction of a second."""
    def convert(p, c):
        load_tool('convert_checkpoint').convert_file(str(p), str(c.root / 'out' / 'conv.pth'))

    return {
        'tools/convert_checkpoint.py': convert,
        'tools/tokenize_dataset.py': lambda p, c: main(
            'tokenize_dataset', p, c.images, '--out', c.root / 'out' / 'codes.npz',
            '--img-size', 32, '--workers', 0, '--device', 'cpu'),
        'tools/visualize_reconstructions.py': lambda p, c: main(
            'visualize_reconstructions', p, c.images, '--out', c.root / 'out' / 'r.png',
            '--img-size', 32, '--device', 'cpu'),
        'tools/visualize_mim.py --tokenizer': lambda p, c: main(
            'visualize_mim', c.peco, LEGACY_TOKENIZER, c.image, '--tokenizer', p,
            '--out', c.root / 'out' / 'mim', '--device', 'cpu'),
        'tools/measure_code_agreement.py': lambda p, c: main(
            'measure_code_agreement', '--checkpoint', p, '--images', c.images,
            '--img-size', 32, '--num', 2),
        'tools/measure_grad_share.py --perceptual-checkpoint': lambda p, c: main(
            'measure_grad_share', '--perceptual-checkpoint', p, '--layers', 1, '--images',
            c.images, '--img-size', 32, '--num', 2, '--lambdas', 1),
        'tools/measure_grad_share.py --tokenizer': lambda p, c: main(
            'measure_grad_share', '--tokenizer', p, '--images', c.images, '--img-size', 32,
            '--num', 2, '--lambdas', 1),
    }


# tools that build a config's model or runner first (2-6 s a call): every hostile file the
# gate refuses for a different reason would cost a minute, so each gets one file with code
# in a pickle and one with code in its stored config, the two ways a route that bypassed
# read_checkpoint would run code (the gate's answer to every file is checked above)
HEAVY_SAMPLE = ('pickle_zip', 'cfg_expression')
HEAVY_TOOLS = {
    'tools/visualize_mim.py CHECKPOINT': lambda p, c: main(
        'visualize_mim', c.peco, p, c.image, '--out', c.root / 'out' / 'mim', '--device',
        'cpu'),
    'tools/adversarial_eval.py': lambda p, c: main(
        'adversarial_eval', c.cls, p, '--iters', 1, '--max-batches', 1, '--device', 'cpu'),
    'tools/test.py': lambda p, c: main('test', c.cls, p, '--work-dir', c.root / 'work_t'),
    'tools/train.py --resume PATH': lambda p, c: main(
        'train', c.cls, '--work-dir', c.root / 'work_r', '--resume', p),
    'tools/train.py --cfg-options load_from=PATH': lambda p, c: main(
        'train', c.cls, '--work-dir', c.root / 'work_l', '--cfg-options', f'load_from={p}'),
}
ROUTES = {'tokenizer': tokenizer_routes, 'model': model_routes, 'runner': runner_routes,
          'tool': tool_routes}


@pytest.fixture(scope='module')
def runner(corpus):
    from mmengine.runner import Runner

    from peco_mm.models import PeCoViT
    return Runner(model=PeCoViT(**TINY_VIT), work_dir=str(corpus.root / 'work_runner'),
                  experiment_name='hostile_runner')


def refuse_all(routes: dict, names, corpus, runner, files=None, expected=EXPECTED,
               marker=None) -> list[str]:
    """Run every route on every named file (of `corpus`, or `files`); the failures, one
    line each."""
    ctx = SimpleNamespace(**vars(corpus), runner=runner)
    files, marker = files or corpus.files, marker or corpus.marker
    failures = []
    for route, call in routes.items():
        for name in names:
            path = files[name]
            try:
                check_refused(lambda: call(path, ctx), path, expected[name], marker)
            except BaseException as err:  # (pytest.fail's exception is a BaseException)
                failures.append(f'{route} / {name}: {type(err).__name__} {str(err)[:300]}')
    assert not marker.exists()
    return failures


@pytest.mark.parametrize('group', ['read_checkpoint', *ROUTES])
def test_every_route_refuses_every_hostile_file(group, corpus, runner, monkeypatch,
                                                isolated_mmengine):  # noqa: F811
    from peco_mm.checkpoint import checkpoints_through_gate, read_checkpoint
    routes = ({'read_checkpoint': lambda p, c: read_checkpoint(p)} if group == 'read_checkpoint'
              else ROUTES[group]())
    monkeypatch.syspath_prepend(str(corpus.root))  # where the custom_imports plugin lies
    # mmengine's own reads (a host's init_cfg, Runner.load_checkpoint / resume) as PeCo's
    # launcher and tools make them; the tools enter the context themselves
    with (checkpoints_through_gate() if group in ('model', 'runner')
          else contextlib.nullcontext()):
        failures = refuse_all(routes, EXPECTED, corpus, runner)
    assert not failures, '\n'.join(failures)


@pytest.mark.parametrize('route', HEAVY_TOOLS)
def test_tools_that_build_first_refuse_code(route, corpus, runner, isolated_mmengine):  # noqa: F811
    failures = refuse_all({route: HEAVY_TOOLS[route]}, HEAVY_SAMPLE, corpus, runner)
    assert not failures, '\n'.join(failures)


# ---- plain data naming code: every route that rebuilds a tokenizer from a file's names ---------
TRACE_MODULES = (TRACE_MODULE, OTHER_REGISTRY_NAME)  # importing either creates the marker


@pytest.fixture
def name_corpus(corpus):
    """The files of `build_name_corpus`, with the trace module importable (and unimported)."""
    files, marker = build_name_corpus(corpus.root)
    sys.path.insert(0, str(corpus.root))
    for module in TRACE_MODULES:
        sys.modules.pop(module, None)
    try:
        yield SimpleNamespace(files=files, marker=marker)
    finally:
        sys.path.remove(str(corpus.root))
        for module in TRACE_MODULES:
            sys.modules.pop(module, None)


def resumed_target_generator(p, c):
    """`--resume p` of a pretraining run whose tokenizer file is gone: the target generator
    is read from the resumed file (`frozen_weights_from_resumed`), then built."""
    from mmengine.config import Config

    from peco_mm.supervisor.safeguards import frozen_weights_from_resumed
    from peco_mm.registry import MODELS
    cfg = Config(dict(model=dict(target_generator=dict(
        type='FrozenPeCoTokenizer', checkpoint=str(c.root / 'gone' / 'tokenizer.pth'))),
        resume=True, load_from=str(p)))
    assert frozen_weights_from_resumed(cfg)
    MODELS.build(cfg.model.target_generator)


def pretraining_target(p, c):
    """The pretraining model of a config whose target generator names the file (what
    tools/train.py builds), built in mmpretrain's scope."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    cfg = Config.fromfile(str(c.peco))
    cfg.model.target_generator.checkpoint = str(p)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        MODELS.build(cfg.model)


def rebuild_routes() -> dict:
    """Every route that rebuilds a tokenizer from a file: the tools (tokenize_dataset, both
    visualize tools, both measure tools) and the pretraining target, built or resumed."""
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    tools = tool_routes()
    return {
        'FrozenPeCoTokenizer': lambda p, c: FrozenPeCoTokenizer(str(p)),
        'FrozenPeCoTokenizer with_decoder': lambda p, c: FrozenPeCoTokenizer(
            str(p), with_decoder=True),
        'pretraining target (config)': pretraining_target,
        'pretraining --resume (tokenizer file gone)': resumed_target_generator,
        **{k: v for k, v in tools.items() if 'convert' not in k and 'perceptual' not in k},
    }


REBUILD_ROUTES = ('FrozenPeCoTokenizer', 'FrozenPeCoTokenizer with_decoder',
                  'pretraining target (config)',
                  'pretraining --resume (tokenizer file gone)', 'tools/tokenize_dataset.py',
                  'tools/visualize_reconstructions.py', 'tools/visualize_mim.py --tokenizer',
                  'tools/measure_code_agreement.py', 'tools/measure_grad_share.py --tokenizer')
# visualize_mim and the pretraining config build the pretraining model first (about 1 s a call)
HEAVY_NAME_SAMPLE = ('parts_dotted_type', 'parts_scope', 'parts_remote_code',
                     'parts_other_registry', 'cfg_model_remote_code')


@pytest.mark.parametrize('route', REBUILD_ROUTES)
def test_every_rebuild_route_refuses_parts_outside_the_schema(route, corpus, name_corpus, runner,
                                                              isolated_mmengine):  # noqa: F811
    """A dotted `type` (mmengine would import and call it), a module name as `type`, a
    `_scope_`, a registered host builder that runs a folder's code, a name registered in
    another registry (imported as a module), a nested part, a path argument, in the part
    configs, the old flat arguments and an old file's config text: refused before anything
    is built, nothing imported."""
    routes = rebuild_routes()
    assert set(routes) == set(REBUILD_ROUTES)
    heavy = 'visualize_mim' in route or 'config' in route
    names = HEAVY_NAME_SAMPLE if heavy else NAME_EXPECTED
    failures = refuse_all({route: routes[route]}, names, corpus, runner,
                          files=name_corpus.files, expected=NAME_EXPECTED,
                          marker=name_corpus.marker)
    assert not failures, '\n'.join(failures)
    assert not set(TRACE_MODULES) & set(sys.modules)


def test_rebuild_routes_with_the_hosts_imported(corpus, name_corpus, tmp_path):
    """With mmdet's, mmseg's and mmpretrain's models imported (thousands of registered names,
    `mmpretrain.AutoModelForCausalLM` among them), the rebuild routes refuse every payload
    and nothing runs; built the trusting way, the remote-code payload runs its folder's
    Python (no network: a local folder, the hub offline)."""
    import json
    import os
    env = dict(PYTHONPATH=f'{ROOT}{os.pathsep}{corpus.root}', HF_HOME=str(tmp_path / 'hf'),
               HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1')
    proc = run_tool([sys.executable, '-m', 'tests.security.rebuild_with_hosts', corpus.root],
                    env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out['registered'] > 1000
    assert not out['failures'], '\n'.join(out['failures'])
    assert out['refused_cleanly'] and out['remote_code_live']
    name_corpus.marker.unlink()


# a converted file's `meta.pecovit_args` (what the study's random twin is built from):
# name -> (the arguments stored, the refusal)
PECOVIT_ARGS = {
    'init_cfg_dotted_type': (dict(init_cfg=dict(type=f'{TRACE_MODULE}.touch')),
                             r'meta\.pecovit_args\.init_cfg: not an argument a checkpoint may '
                             r'give PeCoViT; allowed: arch, '),
    'pretrained_path': (dict(pretrained='/checkpoints/elsewhere.pth'),
                        r'meta\.pecovit_args\.pretrained: not an argument'),
    'arch_with_type': (dict(arch=dict(type=f'{TRACE_MODULE}.touch', embed_dims=16)),
                       r"meta\.pecovit_args\.arch: key 'type' is not a plain argument name"),
    'url_word': (dict(out_type='https://example.com/x'),
                 r"meta\.pecovit_args\.out_type: 'https://example\.com/x' is not a plain word"),
}


@pytest.mark.parametrize('case', list(PECOVIT_ARGS))
def test_a_converted_files_arguments_are_checked_against_the_schema(case, name_corpus,
                                                                    tmp_path):
    """The PeCoViT a converted file describes (`demo_checks.random_twin`, the study's
    baseline) is built only from plain arguments of PeCoViT's signature: an initialiser
    named by a dotted path (mmengine imports it at init_weights), a file, a nested `type`,
    a URL are refused before anything is built."""
    from peco_mm.tooling.demo_checks import random_twin
    changed, expected = PECOVIT_ARGS[case]
    path = tmp_path / 'converted.pth'
    args = dict(arch=dict(embed_dims=16, num_layers=2, num_heads=2), img_size=32,
                patch_size=8)
    torch.save({'state_dict': {}, 'meta': dict(pecovit_args={**args, **changed})}, path)
    check_refused(lambda: random_twin(str(path), 0), path, expected, name_corpus.marker)
    torch.save({'state_dict': {}, 'meta': dict(pecovit_args=args)}, path)
    assert random_twin(str(path), 0)[0].num_layers == 2  # the plain arguments build


def test_the_name_corpus_is_live(name_corpus, corpus):
    """Built the trusting way (mmengine's registry, no check), each payload that needs no
    host imports the trace module: the refusals above are not refusals of inert files
    (`test_rebuild_routes_with_the_hosts_imported` shows the remote-code payload live)."""
    from peco_mm.registry import MODELS
    for name in LIVE_IN_PROCESS:
        parts = name_payloads(corpus.root)[name]
        for module in TRACE_MODULES:
            sys.modules.pop(module, None)
        hostile = next(part for k, part in parts.items() if part != TINY_PARTS[k])
        with contextlib.suppress(Exception):  # it imports, then calls or fails to build
            MODELS.build(hostile)
        assert name_corpus.marker.exists(), name
        name_corpus.marker.unlink()


def test_the_corpus_is_live(corpus, monkeypatch):
    """Read the trusting way (weights_only=False, mmengine's Config), every code-carrying
    file of the corpus runs its payload: the refusals above are not refusals of inert files."""
    from mmengine.config import Config
    monkeypatch.syspath_prepend(str(corpus.root))
    for name in ('pickle_zip', 'pickle_legacy', *CODE_IN_CONFIG):
        if name.startswith('pickle'):
            torch.load(corpus.files[name], weights_only=False)
        else:
            monkeypatch.delitem(sys.modules, 'evil_plugin', raising=False)
            Config.fromstring(corpus.texts[name], '.py')
        assert corpus.marker.exists(), name
        corpus.marker.unlink()
    for name in ALLOCATION:  # each allocates 8 MiB (a real attack: gigabytes)
        x = torch.load(corpus.files[name], weights_only=True)['x']
        assert (x.numel() * x.element_size() if torch.is_tensor(x) else len(x)) >= 4 << 20


def test_auto_resume_refuses_a_symlink_out_of_the_work_dir(corpus, tmp_path,
                                                           isolated_mmengine):  # noqa: F811
    from peco_mm.supervisor.resume import find_resumable_checkpoint
    work = tmp_path / 'work'
    work.mkdir()
    torch.save({'meta': {'iter': 2}, 'state_dict': {}}, work / 'iter_2.pth')
    link = work / 'iter_4.pth'
    link.symlink_to(corpus.files['pickle_zip'])
    (work / 'last_checkpoint').write_text(str(link))  # the newest, as a resume would take it
    expected = rf'{link} is a symlink to {corpus.files["pickle_zip"]}, outside the work dir'
    check_refused(lambda: find_resumable_checkpoint(str(work)), link, expected, corpus.marker)
    check_refused(lambda: main('train', corpus.cls, '--work-dir', work, '--resume'), link,
                  expected, corpus.marker)
    inside = work / 'iter_6.pth'  # a link within the work dir is the work dir's own file
    inside.symlink_to(work / 'iter_2.pth')
    (work / 'last_checkpoint').write_text(str(inside))
    assert find_resumable_checkpoint(str(work))[0] == str(inside)


def test_a_tool_prints_the_refusal_as_one_line(corpus):
    out = corpus.root / 'out' / 'cli.npz'
    proc = run_tool(['tools/tokenize_dataset.py', corpus.files['cfg_import'], corpus.images,
                     '--out', out, '--img-size', 32, '--workers', 0], check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and not corpus.marker.exists() and not out.exists()
    assert str(corpus.files['cfg_import']) in last and re.search(EXPECTED['cfg_import'], last)


def test_every_mmengine_scheme_reads_through_the_gate_while_a_run_lasts(corpus):
    """load_from / resume / init_cfg go through mmengine's CheckpointLoader: inside
    `checkpoints_through_gate` (PeCo's launcher and tools) every scheme mmengine knows is
    answered by peco_mm's loader; outside, and after, each has the loader it had, also one a
    user registered over mmengine's."""
    from mmengine.runner import checkpoint as mm
    from mmengine.runner.checkpoint import CheckpointLoader

    from peco_mm.checkpoint import (MMENGINE_SCHEMES, checkpoints_through_gate,
                                    load_from_weights_only)

    def table():
        return dict(CheckpointLoader._schemes)  # (mmengine's table; read only)
    assert {f.__module__ for f in table().values()} == {'mmengine.runner.checkpoint'}
    assert table()['pavi://'] is mm.load_from_pavi

    def users_pavi(filename, map_location=None):
        return {'state_dict': {}}
    CheckpointLoader.register_scheme('pavi://', users_pavi, force=True)
    try:
        before = table()
        with checkpoints_through_gate():
            with checkpoints_through_gate():  # nested, as a tool calling the launcher
                assert set(MMENGINE_SCHEMES) <= set(table())
                assert {p for p, f in table().items()
                        if f is not load_from_weights_only} == set()
            assert table()['pavi://'] is load_from_weights_only
            path = corpus.files['pickle_zip']
            check_refused(lambda: mm._load_checkpoint(str(path)), path,
                          EXPECTED['pickle_zip'], corpus.marker)
        assert table() == before
    finally:
        CheckpointLoader.register_scheme('pavi://', mm.load_from_pavi, force=True)
