"""Pre-flight check: every file a config reads, checked before anything is built.

`find_problems(cfg, mode)` walks a loaded config and lists every input that is not in place:

- checkpoints: each `init_cfg=dict(type='Pretrained', checkpoint=...)` (the backbone's
  pretrained weights), the PeCo tokenizer (`model.target_generator.checkpoint`), the perceptual
  network (`model.perceptual.checkpoint`, `test_evaluator.perceptual.checkpoint`),
  `load_from`, and the `--resume` / test checkpoint;
- datasets: each loader's `data_root`, `ann_file` and image / label folders (`data_prefix`,
  mmpretrain's `split`; class folders where no annotation file lists the images), and the
  evaluators' annotation files (COCO).

Each problem names its config key, what was expected there (a folder layout, a kind of
checkpoint), where to get the file and how to point the config elsewhere. `report()` joins them
into one block; `PreflightError` (a FileNotFoundError) carries that block.

This module imports only the standard library (mmengine's Config where it loads a file), so a
launcher can run it before torch is imported or any process is started: `tools/dist_train.sh`
runs `tools/train.py CONFIG --preflight-only [flags]` once before torchrun starts the ranks.
`PECO_SKIP_PREFLIGHT=1` (or `--skip-preflight`) turns the check off.
"""
from __future__ import annotations

import difflib
import glob
import importlib
import importlib.util
import os
import os.path as osp
import sys
from dataclasses import dataclass, field

SKIP_ENV = 'PECO_SKIP_PREFLIGHT'
LAYOUTS = {
    'ImageNet': 'DATA_ROOT/train/<class>/*.JPEG and DATA_ROOT/val/<class>/*.JPEG '
                '(optionally DATA_ROOT/meta/train.txt, val.txt)',
    'CustomDataset': 'DATA_ROOT/<data_prefix>/<class>/<image>',
    'ADE20KDataset': 'DATA_ROOT/images/{training,validation}/*.jpg and '
                     'DATA_ROOT/annotations/{training,validation}/*.png',
    'CocoDataset': 'DATA_ROOT/annotations/instances_{train,val}2017.json and '
                   'DATA_ROOT/{train,val}2017/*.jpg',
}
# where each dataset comes from (the official download pages)
SOURCES = {
    'ImageNet': 'ImageNet-1K (ILSVRC 2012 train and val) from https://image-net.org',
    'ADE20KDataset': 'ADEChallengeData2016.zip from http://sceneparsing.csail.mit.edu',
    'CocoDataset': 'train2017.zip, val2017.zip and annotations_trainval2017.zip from '
                   'https://cocodataset.org/#download',
}
# what each kind of checkpoint is and where it comes from
TOKENIZER_HINT = ('a trained PeCo tokenizer: configs/peco/tokenizer_vqvae_in1k.py writes '
                  'work_dirs/tokenizer_vqvae_in1k/epoch_100.pth (MIM targets cannot come from '
                  'random weights)')
BACKBONE_HINT = ('a PeCo pretraining checkpoint (configs/peco/pretrain_vitb_in1k_800e.py writes '
                 'work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth), or a published ViT '
                 '(BEiT, MAE, timm, ...) converted by tools/convert_checkpoint.py')
PERCEPTUAL_HINTS = {
    'vit': ('the perceptual network, a self-supervised ViT-B: the released MoCo v3 ViT-B '
            '(https://github.com/facebookresearch/moco-v3, CONFIG.md) converted by '
            'tools/convert_checkpoint.py SRC DST (or any ViT format it reads)'),
    'resnet50': 'the perceptual network: torchvision or MoCo ResNet-50 weights',
    'vgg16': 'the perceptual network: torchvision VGG16 weights',
}


@dataclass
class Problem:
    """One input that is not in place."""
    key: str  # the config key (or command-line argument), e.g. 'model.backbone.init_cfg'
    message: str  # what is wrong, e.g. "model.backbone...checkpoint='x.pth' not found"
    details: list[str] = field(default_factory=list)  # expected layout, where to get it, fix
    path: str = ''  # the missing path (problems about one path are reported once)


class PreflightError(FileNotFoundError):
    """Some inputs of a config are missing; str() is the whole report."""

    def __init__(self, problems: list[Problem], config: str = '') -> None:
        self.problems = problems
        super().__init__(report(problems, config))

    def __str__(self) -> str:
        return self.args[0]


def skipped() -> bool:
    return os.environ.get(SKIP_ENV, '') not in ('', '0')


def validates(cfg) -> bool:
    """Whether training runs a validation loop: mmengine builds one whenever `val_cfg` is not
    None and a val dataloader is set, an empty `val_cfg=dict()` (the mmpretrain configs') too."""
    return cfg.get('val_cfg') is not None and bool(cfg.get('val_dataloader'))


def _sibling(name: str):
    """A standard-library module next to this one, also when this one was loaded by its path
    (tools/train.py --preflight-only imports no package)."""
    if __package__:
        return importlib.import_module(f'{__package__}.{name}')
    if f'peco_mm_{name}' not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            f'peco_mm_{name}', osp.join(osp.dirname(osp.abspath(__file__)), f'{name}.py'))
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[f'peco_mm_{name}']


# ---- checkpoints ------------------------------------------------------------------------------
def _is_local(path) -> bool:
    return isinstance(path, str) and bool(path) and '://' not in path


def _checkpoint_problem(key: str, path: str, what: str, fix: str) -> Problem:
    return Problem(key, f'{key}={path!r} not found', [f'Expected: {what}', f'Fix: {fix}'], path)


def checkpoint_problems(cfg, mode: str = 'train', resume=None,
                        checkpoint: str | None = None) -> list[Problem]:
    """Missing checkpoint files of the model, the evaluators, `load_from`, `--resume` and (test)
    the checkpoint to evaluate. Pretrained init_cfg weights are not needed when resuming."""
    out = []
    resuming = bool(resume) or bool(cfg.get('resume'))

    def walk(node, key):
        if isinstance(node, dict):
            ckpt = node.get('checkpoint')
            if node.get('type') == 'Pretrained':
                if mode == 'train' and not resuming and _is_local(ckpt) and not osp.isfile(ckpt):
                    if 'target_generator' in key:  # no "from scratch" for MIM targets
                        fix = f'--cfg-options {key}.checkpoint=PATH'
                        what = TOKENIZER_HINT
                    else:
                        fix = (f'--cfg-options {key}.checkpoint=PATH, or {key}=None to train '
                               'from scratch')
                        what = BACKBONE_HINT
                    out.append(_checkpoint_problem(f'{key}.checkpoint', ckpt, what, fix))
                return
            # a resumed run reads the frozen tokenizer from the checkpoint it resumes
            skip = resuming and key.endswith('target_generator')
            if _is_local(ckpt) and not osp.isfile(ckpt) and not skip:
                if key.endswith('target_generator'):
                    what = TOKENIZER_HINT
                elif key.endswith(('perceptual_cfg', 'perceptual')):
                    what = PERCEPTUAL_HINTS.get(str(node.get('net')), PERCEPTUAL_HINTS['vit'])
                else:
                    what = 'a checkpoint file'
                out.append(_checkpoint_problem(f'{key}.checkpoint', ckpt, what,
                                               f'--cfg-options {key}.checkpoint=PATH'))
            for k, v in node.items():
                # a tokenizer with perceptual_weight=0 (lambda = 0) builds no perceptual network
                unused = (k in ('perceptual', 'perceptual_cfg')
                          and node.get('perceptual_weight', 1) == 0)
                if k != 'checkpoint' and not unused:
                    walk(v, f'{key}.{k}' if key else k)
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f'{key}.{i}')

    walk(cfg.get('model') or {}, 'model')
    evaluators = ('test_evaluator',) if mode == 'test' else (
        ('val_evaluator',) if validates(cfg) else ())
    for name in evaluators:
        walk(cfg.get(name) or {}, name)
    if mode == 'test' and checkpoint is not None and not osp.isfile(checkpoint):
        out.append(Problem('CHECKPOINT', f'checkpoint {checkpoint!r} not found',
                           ['Expected: the weights to evaluate (a checkpoint tools/train.py '
                            'wrote)'], checkpoint))
    if isinstance(resume, str) and resume != 'auto' and not osp.isfile(resume):
        out.append(Problem('--resume', f'--resume {resume}: no such checkpoint file',
                           ['Expected: a checkpoint of this run, or --resume with no value for '
                            "the work dir's last one"], resume))
    load_from = cfg.get('load_from')
    if mode == 'train' and not resume and _is_local(load_from) and not osp.isfile(load_from):
        out.append(_checkpoint_problem('load_from', load_from, 'a checkpoint of this model',
                                       '--cfg-options load_from=PATH (or load_from=None)'))
    return out


def _has_checkpoint(folder: str) -> bool:
    return osp.isdir(folder) and (osp.isfile(osp.join(folder, 'last_checkpoint'))
                                  or bool(glob.glob(osp.join(glob.escape(folder), '*.pth'))))


def resume_problems(cfg, resume=None) -> list[Problem]:
    """`--resume` without a path (or `resume=True` without `load_from`) in a work dir that
    does not exist or holds no checkpoint: mmengine would start from scratch without a word.
    Names the work dirs next to it that hold checkpoints and look alike (a misspelt name)."""
    auto = resume == 'auto' or (resume is None and cfg.get('resume') is True
                                and not cfg.get('load_from'))
    work_dir = cfg.get('work_dir')
    if not auto or not work_dir or _has_checkpoint(work_dir):
        return []
    state = ('does not exist' if not osp.isdir(work_dir)
             else 'holds no checkpoint (no *.pth, no last_checkpoint)')
    details = ['Expected: the work dir of the run to continue, with the checkpoints it wrote']
    parent = osp.dirname(osp.normpath(work_dir)) or '.'
    runs = sorted(e.name for e in os.scandir(parent) if _has_checkpoint(e.path)) \
        if osp.isdir(parent) else []
    near = difflib.get_close_matches(osp.basename(osp.normpath(work_dir)), runs, n=3)
    if near:
        details.append('Did you mean --work-dir ' + ' or '.join(osp.join(parent, n)
                                                                for n in near) + '?')
    details.append('Fix: --work-dir DIR of that run, --resume CKPT for a checkpoint elsewhere, '
                   'or leave out --resume to start from scratch')
    return [Problem('--resume', f'--resume: work dir {work_dir!r} {state}, nothing to resume',
                    details, work_dir)]


# ---- datasets ---------------------------------------------------------------------------------
def dataset_cfgs(cfg, phases=('train', 'val', 'test')):
    """(loader name, dataset dict) of every dataset the loaders of `phases` build, wrapped
    datasets (RepeatDataset, ConcatDataset) included."""
    for phase in phases:
        loader = f'{phase}_dataloader'
        loader_cfg = cfg.get(loader)
        if not loader_cfg or not loader_cfg.get('dataset'):
            continue
        stack = [loader_cfg['dataset']]
        while stack:
            ds = stack.pop()
            if not isinstance(ds, dict):
                continue
            yield loader, ds
            inner = ds.get('dataset')
            stack += inner if isinstance(inner, list) else [inner]
            stack += list(ds.get('datasets', []) or [])


def dataset_kind(dtype: str) -> str:
    """The LAYOUTS entry of a dataset type: its own name, a registered parent class (once
    peco_mm and the hosts are imported), or a name that says it (e.g. CheckedCocoDataset)."""
    name = dtype.split('.')[-1]
    if name in LAYOUTS:
        return name
    if 'peco_mm' in sys.modules:  # the registries are filled: follow the class hierarchy
        from mmengine.registry import DATASETS
        try:
            cls = DATASETS.get(dtype)
        except Exception:  # an unknown type is reported by the Runner itself
            cls = None
        for base in getattr(cls, '__mro__', ()):
            if base.__name__ in LAYOUTS:
                return base.__name__
    for known in ('Coco', 'ADE20K', 'ImageNet'):
        if known in name:
            return next(k for k in LAYOUTS if k.startswith(known))
    return ''


def dataset_layout(dtype: str) -> str:
    """The expected folder layout of a dataset type."""
    return LAYOUTS.get(dataset_kind(dtype), 'see the dataset class docs')


def _prefixes(ds) -> list[tuple[str, str]]:
    """(key, folder) of a dataset's image / label folders, relative to data_root."""
    prefix = ds.get('data_prefix')
    if isinstance(prefix, dict):
        return [(f'data_prefix.{k}', v) for k, v in prefix.items() if isinstance(v, str) and v]
    if isinstance(prefix, str) and prefix:
        return [('data_prefix', prefix)]
    if ds.get('split'):  # mmpretrain ImageNet: data_prefix defaults to the split
        return [('split', ds['split'])]
    return []


def _has_subfolder(path: str) -> bool:
    with os.scandir(path) as it:
        return any(e.is_dir() for e in it)


def _evaluator_items(cfg, phase):
    """(key, evaluator dict) of a phase's evaluator, or of each one of a list."""
    evaluators = cfg.get(f'{phase}_evaluator')
    if isinstance(evaluators, (list, tuple)):
        return [(f'{phase}_evaluator.{i}', ev) for i, ev in enumerate(evaluators)]
    return [(f'{phase}_evaluator', evaluators)]


def root_options(cfg, root: str) -> str:
    """The --cfg-options that move a data root: the data_root of every loader that reads it
    (train, val, test) and every evaluator annotation file below it (COCO's), so one round
    of the fix is enough."""
    keys = []
    for loader, ds in dataset_cfgs(cfg):
        if ds.get('data_root') == root and f'{loader}.dataset.data_root=PATH' not in keys:
            keys.append(f'{loader}.dataset.data_root=PATH')
    base = root.rstrip('/') + '/'
    for phase in ('val', 'test'):
        for key, ev in _evaluator_items(cfg, phase):
            ann = ev.get('ann_file') if isinstance(ev, dict) else None
            if _is_local(ann) and ann.startswith(base):
                keys.append(f'{key}.ann_file=PATH/{ann[len(base):]}')
    return ' '.join(keys)


def dataset_problems(cfg, phases=('train', 'val', 'test'), classes: bool = False
                     ) -> list[Problem]:
    """Missing data roots, annotation files and image / label folders of the loaders of
    `phases` (and of their evaluators' annotation files), each with the expected layout;
    with `classes`, also heads whose number of classes is not the dataset's (class_counts)."""
    out, for_classes = [], []
    for loader, ds in dataset_cfgs(cfg, phases):
        dtype = str(ds.get('type', ''))
        kind = dataset_kind(dtype)
        for_classes.append((loader, ds, kind, None))
        layout = LAYOUTS.get(kind, 'see the dataset class docs')
        details = [f'Expected layout: {layout}']
        if kind in SOURCES:
            details.append(f'Get it: {SOURCES[kind]}')
        root = ds.get('data_root') or ''
        key = f'{loader}.dataset'
        if root and not osp.isdir(root):
            out.append(Problem(f'{key}.data_root',
                               f'{loader}: dataset {dtype} data_root {root!r} does not exist',
                               details + [f'Fix: put the data there (a symlink data -> '
                                          f'/your/datasets works), or --cfg-options '
                                          f'{root_options(cfg, root)}'], root))
            continue
        ann = ds.get('ann_file') or ''
        if not ann and ds.get('split'):  # mmpretrain reads meta/<split>.txt when it exists
            meta = osp.join('meta', f"{ds['split']}.txt")
            ann = meta if osp.isfile(osp.join(root, meta)) else ''
        if ann:
            path = ann if osp.isabs(ann) else osp.join(root, ann)
            if not osp.isfile(path):
                out.append(Problem(f'{key}.ann_file',
                                   f'{loader}: dataset {dtype} ann_file {path!r} does not exist',
                                   details + [f'Fix: --cfg-options {key}.ann_file=PATH'], path))
        for pkey, prefix in _prefixes(ds):
            path = prefix if osp.isabs(prefix) else osp.join(root, prefix)
            if not osp.isdir(path):
                out.append(Problem(f'{key}.{pkey}',
                                   f'{loader}: dataset {dtype} folder {path!r} does not exist',
                                   details, path))
            elif not ann and kind in ('ImageNet', 'CustomDataset') and not _has_subfolder(path):
                out.append(Problem(f'{key}.{pkey}',
                                   f'{loader}: dataset {dtype} folder {path!r} has no class '
                                   'folders (and no annotation file lists its images)',
                                   details, path + '/<class>'))
            elif not ann and kind in ('ImageNet', 'CustomDataset'):
                for_classes[-1] = (loader, ds, kind, path)
    if classes:
        out += _sibling('class_counts').problems(cfg, for_classes, Problem)
    for phase in phases:
        if not cfg.get(f'{phase}_dataloader'):
            continue
        for key, ev in _evaluator_items(cfg, phase):
            ann = ev.get('ann_file') if isinstance(ev, dict) else None
            if _is_local(ann) and not osp.isfile(ann):
                out.append(Problem(f'{key}.ann_file', f'{key}: ann_file {ann!r} does not exist',
                                   [f'Fix: --cfg-options {key}.ann_file=PATH'], ann))
    return out


# ---- the report -------------------------------------------------------------------------------
def merge(problems: list[Problem]) -> list[Problem]:
    """One problem per missing path: the keys that name the same path are listed together."""
    out, by_path = [], {}
    for p in problems:
        first = by_path.get(p.path) if p.path else None
        if first is None:
            by_path[p.path] = p
            out.append(p)
        elif p.key.split('.')[0] not in first.message:  # e.g. val and test share a dataset
            first.message += f" (also {p.key.split('.')[0]})"
    return out


def find_problems(cfg, mode: str = 'train', phases=None, resume=None,
                  checkpoint: str | None = None) -> list[Problem]:
    """Every missing input of `cfg` for a train or test run (see the module docstring)."""
    if phases is None:
        phases = ('test',) if mode == 'test' else (
            ('train', 'val') if validates(cfg) else ('train',))
    return merge(checkpoint_problems(cfg, mode, resume, checkpoint)
                 + (resume_problems(cfg, resume) if mode == 'train' else [])
                 + dataset_problems(cfg, phases, classes=True)
                 + _sibling('strides').problems(cfg, Problem))


def report(problems: list[Problem], config: str = '') -> str:
    """One block: a header, each problem with its details, and how to skip the check."""
    n = len(problems)
    head = (f'{config}: ' if config else '') + (
        f'{n} input{"s" if n > 1 else ""} of this config {"are" if n > 1 else "is"} missing; '
        'nothing was started:')
    lines = [head]
    for i, p in enumerate(problems, 1):
        lines.append(f'  {i}. {p.message}')
        lines += [f'     {d}' for d in p.details]
    lines.append(f'(paths are relative to {os.getcwd()}; skip this check with --skip-preflight '
                 f'or {SKIP_ENV}=1)')
    return '\n'.join(lines)


def check(cfg, mode: str = 'train', phases=None, resume=None, checkpoint: str | None = None,
          config: str = '') -> None:
    """Raise PreflightError listing every missing input (nothing when PECO_SKIP_PREFLIGHT=1)."""
    if skipped():
        return
    problems = find_problems(cfg, mode, phases, resume, checkpoint)
    if problems:
        raise PreflightError(problems, config)


def exit_message(err: PreflightError) -> str:
    """What a launcher prints when it stops: the whole report on rank 0 (or in a single
    process), one line on the other ranks, so a torchrun / Slurm job shows the block once."""
    rank = os.environ.get('RANK', '0')
    return str(err) if rank == '0' else (f'rank {rank}: inputs missing (rank 0 lists them)')


def load(config: str, options: dict | None = None, no_validate: bool = False):
    """A config file as the launcher sees it, without importing its custom modules (peco_mm,
    torch): `options` merged in, the validation loop dropped with no_validate."""
    import warnings
    with warnings.catch_warnings():  # mmengine imports the deprecated pkg_resources
        warnings.filterwarnings('ignore', message='pkg_resources is deprecated')
        from mmengine.config import Config
        cfg = Config.fromfile(config, import_custom_modules=False)
    if options:
        cfg.merge_from_dict(options)
    if no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    return cfg
