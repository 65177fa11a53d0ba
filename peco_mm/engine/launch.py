"""What `tools/train.py` and `tools/test.py` do before handing a config to mmengine's Runner.

Kept here (not in the scripts) so that it is importable and tested:
- the scope comes from the config (`default_scope`), so one launcher serves mmpretrain,
  mmdet and mmseg configs alike;
- multi-process training on CPU: mmengine 0.10.7's `init_dist` calls `torch.cuda.set_device`
  and builds DDP with `device_ids=[local_rank]`; we start the gloo group ourselves and build
  DDP with `device_ids=None`;
- `--amp`: bf16 autocast on CUDA where supported, fp16 with dynamic loss scale otherwise;
  refused with a warning on CPU, where it would run several times slower;
- dataset paths are checked before the Runner starts, with the expected layout in the error.
"""
from __future__ import annotations

import os
import os.path as osp
import warnings

import torch
import torch.distributed as dist
from mmengine.config import Config, ConfigDict

LAYOUTS = {
    'ImageNet': 'DATA_ROOT/train/<class>/*.JPEG and DATA_ROOT/val/<class>/*.JPEG '
                '(optionally DATA_ROOT/meta/train.txt, val.txt)',
    'CustomDataset': 'DATA_ROOT/<data_prefix>/<class>/<image>',
    'ADE20KDataset': 'DATA_ROOT/images/{training,validation}/*.jpg and '
                     'DATA_ROOT/annotations/{training,validation}/*.png',
    'CocoDataset': 'DATA_ROOT/annotations/instances_{train,val}2017.json and '
                   'DATA_ROOT/{train,val}2017/*.jpg',
}


def apply_cli(cfg: Config, work_dir: str | None, config_path: str, resume: str | None,
              amp: bool, launcher: str) -> Config:
    """Fold the launcher flags into the config (work dir, resume, amp, launcher)."""
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(config_path))[0])
    if resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif resume is not None:
        if not osp.isfile(resume):
            raise FileNotFoundError(f'--resume {resume}: no such checkpoint file')
        cfg.resume, cfg.load_from = True, resume
    if amp:
        if torch.cuda.is_available():
            ow = cfg.optim_wrapper
            ow.type = 'AmpOptimWrapper'
            if torch.cuda.is_bf16_supported():
                ow.dtype = 'bfloat16'
            else:
                ow.loss_scale = 'dynamic'
        else:
            warnings.warn('--amp ignored: mixed precision needs CUDA (bf16 on these CPUs is '
                          'several times slower than fp32)')
    cfg.launcher = launcher
    return cfg


def setup_cpu_distributed(cfg: Config) -> None:
    """Start a gloo group for torchrun on CPU and make DDP CPU-friendly (no-op on CUDA)."""
    if cfg.launcher == 'none' or torch.cuda.is_available():
        return
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    cfg.setdefault('env_cfg', ConfigDict())
    cfg.env_cfg.setdefault('dist_cfg', ConfigDict())
    cfg.env_cfg.dist_cfg.backend = 'gloo'
    wrapper = cfg.get('model_wrapper_cfg') or ConfigDict(type='MMDistributedDataParallel')
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters', cfg.get('find_unused_parameters', False))
    wrapper.device_ids = None
    cfg.model_wrapper_cfg = wrapper
    if cfg.get('sync_bn') is not None:  # SyncBN needs CUDA
        warnings.warn(f'sync_bn={cfg.sync_bn!r} ignored: SyncBatchNorm needs CUDA')
        cfg.sync_bn = None


def _dataset_cfgs(cfg: Config):
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader_cfg = cfg.get(loader)
        if not loader_cfg or not loader_cfg.get('dataset'):
            continue
        stack = [loader_cfg.dataset]
        while stack:
            ds = stack.pop()
            if not isinstance(ds, dict):
                continue
            yield loader, ds
            inner = ds.get('dataset')
            stack += inner if isinstance(inner, list) else [inner]
            stack += list(ds.get('datasets', []) or [])


def dataset_layout(dtype: str) -> str:
    """The expected folder layout of a dataset type, looked up along its class hierarchy, so
    subclasses (e.g. a checked CocoDataset) inherit their parent's description."""
    name = dtype.split('.')[-1]
    if name in LAYOUTS:
        return LAYOUTS[name]
    from mmengine.registry import DATASETS
    try:
        cls = DATASETS.get(dtype)
    except Exception:  # an unknown type is reported by the Runner itself
        cls = None
    for base in getattr(cls, '__mro__', ()):
        if base.__name__ in LAYOUTS:
            return LAYOUTS[base.__name__]
    return 'see the dataset class docs'


def check_pretrained_paths(cfg: Config) -> None:
    """Raise FileNotFoundError naming the config key of a missing init_cfg checkpoint, before
    any dataset or model is built."""
    def walk(node, key):
        if isinstance(node, dict):
            if node.get('type') == 'Pretrained':
                ckpt = node.get('checkpoint')
                if ckpt and '://' not in str(ckpt) and not osp.isfile(str(ckpt)):
                    # no "from scratch" for the tokenizer: PeCo refuses random targets
                    hint = (' (a trained tokenizer; MIM targets cannot come from random weights)'
                            if 'target_generator' in key else
                            f' (a PeCo, converted or published checkpoint), or {key}=None '
                            'to train from scratch')
                    raise FileNotFoundError(f'{key}.checkpoint={ckpt!r} not found: set '
                                            f'--cfg-options {key}.checkpoint=PATH{hint}')
                return
            for k, v in node.items():
                walk(v, f'{key}.{k}' if key else k)
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f'{key}.{i}')
    walk(cfg.get('model', {}), 'model')


def check_dataset_paths(cfg: Config, phases: tuple[str, ...] = ('train', 'val', 'test')) -> None:
    """Raise FileNotFoundError naming the first missing data_root / ann_file, with the layout."""
    for loader, ds in _dataset_cfgs(cfg):
        if loader.split('_')[0] not in phases:
            continue
        root = ds.get('data_root') or ''
        dtype = str(ds.get('type', ''))
        layout = dataset_layout(dtype)
        if root and not osp.isdir(root):
            raise FileNotFoundError(
                f'{loader}: dataset {dtype} data_root {root!r} does not exist. Expected layout: '
                f'{layout}. Set it with --cfg-options {loader}.dataset.data_root=PATH (or the '
                "config's data_root).")
        ann = ds.get('ann_file') or ''
        if ann:
            path = ann if osp.isabs(ann) else osp.join(root, ann)
            if not osp.exists(path):
                raise FileNotFoundError(
                    f'{loader}: dataset {dtype} ann_file {path!r} does not exist. Expected '
                    f'layout: {layout}.')


def is_main_process() -> bool:
    return int(os.environ.get('RANK', '0')) == 0
