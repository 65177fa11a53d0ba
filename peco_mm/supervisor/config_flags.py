"""The config rewrites of the launcher's steps (`peco_mm.supervisor.config_steps.STEPS`): the
host flags folded in (`--work-dir`, `--resume`, `--amp`, `--launcher`, `--no-validate`,
`--auto-scale-lr`, `--out`, `--show-dir`, `--vis-backend`) and the settings that follow the
machine (mixed precision, SyncBN and the process group without CUDA). Each rewrites the config
in place; the step list records what changed.
"""
from __future__ import annotations

import datetime
import importlib.util
import itertools
import os.path as osp

from mmengine.config import Config, ConfigDict

# --vis-backend NAME -> (mmengine vis backend type, the package it needs)
VIS_BACKENDS = {
    'local': ('LocalVisBackend', None),
    'tensorboard': ('TensorboardVisBackend', 'tensorboard'),
    'wandb': ('WandbVisBackend', 'wandb'),
    'mlflow': ('MLflowVisBackend', 'mlflow'),
}
# the norm layers that need CUDA (mmcv's names, torch's class name)
SYNC_BN_TYPES = ('SyncBN', 'MMSyncBN', 'SyncBatchNorm')
_RUNS_IN_PROCESS = itertools.count()  # see run_names


# ---- the flags -------------------------------------------------------------------------------
def set_work_dir(cfg: Config, spec) -> None:
    if spec.work_dir is not None:
        cfg.work_dir = spec.work_dir
    elif cfg.get('work_dir') is None:
        if not spec.config_path:
            raise ValueError('work_dir is needed for a Config that has no file name')
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(spec.config_path))[0])


def set_resume(cfg: Config, spec) -> None:
    resume = spec.resume
    if resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif resume is not None:
        if '://' in resume:
            raise ValueError(f'--resume {resume}: resuming takes a local checkpoint file of a '
                             'run; download it first, or start from its weights with '
                             '--cfg-options load_from=URL (read weights-only)')
        if not osp.isfile(resume):
            raise FileNotFoundError(f'--resume {resume}: no such checkpoint file')
        cfg.resume, cfg.load_from = True, resume


def set_amp(cfg: Config, spec) -> None:
    """`--amp`: AmpOptimWrapper, bf16 where supported (and without CUDA, see
    cpu_mixed_precision), else fp16 with a dynamic loss scale."""
    if not spec.amp:
        return
    import torch
    ow = cfg.optim_wrapper
    ow.type = 'AmpOptimWrapper'
    if not spec.cuda or torch.cuda.is_bf16_supported():
        ow.dtype = 'bfloat16'
    else:
        ow.loss_scale = 'dynamic'


def amp_why(key: str, after, spec) -> str:
    return {'optim_wrapper.dtype': '--amp: bf16, which this machine supports (no loss scale)',
            'optim_wrapper.loss_scale': '--amp: fp16 with a dynamic loss scale (no bf16 on this '
                                        'GPU)'}.get(key, '--amp: mixed precision')


def set_launcher(cfg: Config, spec) -> None:
    if spec.launcher != cfg.get('launcher', 'none'):
        cfg.launcher = spec.launcher


def no_validate(cfg: Config, spec) -> None:
    """`--no-validate` drops the validation loop."""
    if spec.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None


def scale_lr(cfg: Config, spec) -> None:
    """`--auto-scale-lr`: mmengine's linear scaling, lr x (world size x batch per process) /
    auto_scale_lr.base_batch_size."""
    if not spec.auto_scale_lr:
        return
    if not (cfg.get('auto_scale_lr') or {}).get('base_batch_size'):
        raise KeyError('--auto-scale-lr needs auto_scale_lr.base_batch_size in the config '
                       '(the total batch its lr was set for); add it, e.g. --cfg-options '
                       'auto_scale_lr.base_batch_size=256')
    cfg.auto_scale_lr.enable = True


def test_checkpoint(cfg: Config, spec) -> None:
    cfg.load_from = spec.checkpoint


def apply_test_flags(cfg: Config, spec) -> None:
    """`--out FILE.pkl` adds mmengine's DumpResults (mmdet's DumpDetResults for mmdet
    configs) to the test evaluator; `--out FILE.json|yaml` is dumped by `run` after testing.
    `--show-dir DIR` switches the host's visualization hook on, as its own test.py does."""
    out, show_dir = spec.out, spec.show_dir
    if out:
        if out.endswith(('.pkl', '.pickle')):
            dump = ('mmdet.DumpDetResults' if cfg.get('default_scope') == 'mmdet'
                    else 'DumpResults')
            evs = cfg.test_evaluator
            evs = list(evs) if isinstance(evs, (list, tuple)) else [evs]
            cfg.test_evaluator = evs + [dict(type=dump, out_file_path=out)]
        elif not out.endswith(('.json', '.yaml', '.yml')):
            raise ValueError(f'--out {out}: expected a .pkl/.pickle file (predictions) or a '
                             '.json/.yaml file (metrics)')
    if show_dir:
        hook = (cfg.get('default_hooks') or {}).get('visualization')
        if not hook:
            raise KeyError("--show-dir needs default_hooks.visualization in the config (the "
                           "host's VisualizationHook); this config has none")
        scope = cfg.get('default_scope')
        if scope == 'mmpretrain':  # writes <show_dir>/<image name>_<step>.png
            hook.update(enable=True, out_dir=show_dir, interval=spec.show_interval)
        elif scope == 'mmdet':  # writes <work_dir>/<timestamp>/<show_dir>/<image name>
            hook.update(draw=True, test_out_dir=show_dir)
        else:  # mmseg: the visualizer's backend writes <show_dir>/vis_data/vis_image/
            hook.update(draw=True, interval=spec.show_interval)
            cfg.setdefault('visualizer', ConfigDict(type='Visualizer'))
            cfg.visualizer.save_dir = show_dir


def add_vis_backends(cfg: Config, names=()) -> Config:
    """Add visualizer backends by name (`--vis-backend tensorboard`) and check that every
    configured backend's package is installed, naming it when not."""
    for name in names:
        if name not in VIS_BACKENDS:
            raise ValueError(f'--vis-backend {name}: expected one of {sorted(VIS_BACKENDS)}')
    if names:
        cfg.setdefault('visualizer', ConfigDict(type='Visualizer'))
        backends = list(cfg.visualizer.get('vis_backends') or [dict(type='LocalVisBackend')])
        have = {str(b.get('type')).split('.')[-1] for b in backends}
        backends += [dict(type=VIS_BACKENDS[n][0]) for n in names
                     if VIS_BACKENDS[n][0] not in have]
        cfg.visualizer.vis_backends = backends
    needs = {t: pkg for t, pkg in VIS_BACKENDS.values() if pkg}
    for backend in (cfg.get('visualizer') or {}).get('vis_backends') or []:
        if not isinstance(backend, dict):
            raise TypeError(f'visualizer.vis_backends: expected dicts such as '
                            f"dict(type='TensorboardVisBackend'), got {backend!r}")
        pkg = needs.get(str(backend.get('type')).split('.')[-1])
        if pkg and importlib.util.find_spec(pkg) is None:
            raise ModuleNotFoundError(
                f"visualizer.vis_backends has {backend['type']}, which needs the '{pkg}' "
                f"package; it is not installed in this environment (pip install {pkg})")
    return cfg


# ---- the machine -----------------------------------------------------------------------------
def cpu_mixed_precision(cfg: Config, native_bf16: bool | None = None,
                        cuda: bool | None = None) -> str | None:
    """Without CUDA, run an AmpOptimWrapper config (which asserts an accelerator) in bf16
    autocast with `AutocastOptimWrapper` where the CPU computes bf16 natively, and in fp32 with
    a plain OptimWrapper where it does not (bf16 is emulated there: several times slower than
    fp32). A config's fp16 becomes bf16 on the CPU (no fp16 arithmetic there; bf16 needs no
    loss scale). Returns the one line to log (None when nothing changed). `native_bf16`:
    the detection's answer (default: `cpu_has_native_bf16()`)."""
    if cuda is None:
        import torch
        cuda = torch.cuda.is_available()
    ow = cfg.get('optim_wrapper')
    if cuda or not isinstance(ow, dict):
        return None
    if str(ow.get('type', 'OptimWrapper')).split('.')[-1] != 'AmpOptimWrapper':
        return None
    from ..utils import precision
    native = precision.cpu_has_native_bf16() if native_bf16 is None else native_bf16
    dtype = str(ow.get('dtype') or 'float16').replace('torch.', '')
    for key in ('dtype', 'loss_scale', 'use_fsdp'):
        ow.pop(key, None)
    if native:
        ow.update(type='AutocastOptimWrapper', dtype='bfloat16')
        return (f"No CUDA: this CPU has native bf16 (torch.ops.mkldnn._is_mkldnn_bf16_supported()"
                f"): training in bf16 autocast (AutocastOptimWrapper) for the config's "
                f'AmpOptimWrapper ({dtype}); weights, optimizer state and losses stay fp32.')
    ow.type = 'OptimWrapper'
    return (f"No CUDA and no native bf16 on this CPU (torch.ops.mkldnn._is_mkldnn_bf16_supported()"
            f" is False): training in fp32 instead of the config's AmpOptimWrapper ({dtype}); "
            'emulated bf16 would be several times slower.')


def sharded_clip_note(cfg: Config) -> str | None:
    """A warning when an FSDP strategy meets gradient clipping by norm: mmengine 0.10.7's
    OptimWrapper clips with torch.nn.utils.clip_grad_norm_, which sees only this rank's shard
    of the gradients (FSDP's own `clip_grad_norm_` would reduce the norm over ranks)."""
    strategy = cfg.get('strategy') or {}
    clip = (cfg.get('optim_wrapper') or {}).get('clip_grad') or {}
    if (cfg.get('runner_type') and 'FSDP' in str(strategy.get('type'))
            and clip and clip.get('type', 'norm') == 'norm'):
        return ('optim_wrapper.clip_grad with FSDPStrategy: each rank clips its own gradient '
                'shard by that shard\'s norm (mmengine 0.10.7), not by the global norm; set '
                'optim_wrapper.clip_grad=None or check the logged grad_norm.')
    return None


def sync_bn_without_cuda(cfg: Config, spec) -> None:
    """Without CUDA: every SyncBN norm layer of the model becomes BN (torch's DDP refuses
    SyncBatchNorm on CPU processes, 'SyncBatchNorm layers only work with GPU modules'), and
    mmengine's `sync_bn` conversion of a distributed run is turned off."""
    if spec.cuda:
        return
    stack = [cfg.get('model')]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get('type'), str) and (
                    node['type'].split('.')[-1] in SYNC_BN_TYPES):
                node['type'] = 'BN'
            stack += list(node.values())
        elif isinstance(node, (list, tuple)):
            stack += list(node)
    if spec.launcher != 'none':  # (one process: mmengine converts nothing)
        if cfg.get('sync_bn') is not None:
            cfg.sync_bn = None
        if (cfg.get('strategy') or {}).get('sync_bn') is not None:
            cfg.strategy.sync_bn = None


def sync_bn_why(key: str, after, spec) -> str:
    if spec.launcher == 'none':
        return 'no CUDA: SyncBN needs it; in one process BN computes the same'
    return ('no CUDA: SyncBN needs it (DDP refuses it on CPU processes); BN normalises over '
            "each process's own batch")


def cpu_distributed(cfg: Config, spec) -> None:
    """Without CUDA: the gloo backend, and (torchrun) a DDP / FSDP wrapper that works on CPU
    processes."""
    if spec.cuda:
        return
    dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg') or {}
    if dist_cfg.get('backend') not in (None, 'gloo'):
        cfg.env_cfg.dist_cfg.backend = 'gloo'  # NCCL needs GPUs
    if spec.launcher == 'none':
        return
    if spec.launcher != 'pytorch':
        raise ValueError(f'--launcher {spec.launcher} needs CUDA here; start CPU processes '
                         'with torchrun (tools/dist_train.sh, --launcher pytorch)')
    cfg.setdefault('env_cfg', ConfigDict())
    cfg.env_cfg.setdefault('dist_cfg', ConfigDict())
    cfg.env_cfg.dist_cfg.backend = 'gloo'
    if cfg.get('runner_type'):  # FlexibleRunner: the strategy wraps the model
        strategy = cfg.get('strategy') or ConfigDict(type='DDPStrategy')
        wrapper = strategy.get('model_wrapper') or ConfigDict()
        if 'FSDP' in str(strategy.get('type')):
            wrapper.device_id = 'cpu'  # else torch's FSDP asks for an accelerator
        else:
            wrapper.setdefault('type', 'MMDistributedDataParallel')
            wrapper.setdefault('broadcast_buffers', False)
            wrapper.device_ids = None
        strategy.model_wrapper = wrapper
        cfg.strategy = strategy
        return
    wrapper = cfg.get('model_wrapper_cfg') or ConfigDict(type='MMDistributedDataParallel')
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters', cfg.get('find_unused_parameters', False))
    wrapper.device_ids = None
    cfg.model_wrapper_cfg = wrapper


def start_cpu_process_group(cfg: Config, cuda: bool) -> None:
    """torchrun without CUDA: the gloo group, started here (mmengine 0.10.7's `init_dist`
    sets a CUDA device first), with `env_cfg.dist_cfg.timeout`."""
    import torch.distributed as dist
    if cuda or cfg.get('launcher', 'none') == 'none' or dist.is_initialized():
        return
    timeout = cfg.env_cfg.dist_cfg.get('timeout')
    kwargs = dict(timeout=datetime.timedelta(seconds=timeout)) if timeout else {}
    dist.init_process_group(backend='gloo', **kwargs)


def run_names(cfg: Config, spec) -> None:
    """mmengine keys a run's logger, message hub and visualizer by name (<experiment>_<time>,
    or the visualizer's own `name`, e.g. mmseg's and mmdet's 'visualizer') and hands back an
    existing instance of that name. A second run in this process (the demo, tests) would then
    write its scalars into the first run's work dir: from the second run on, every name gets
    this process's run number."""
    n = next(_RUNS_IN_PROCESS)
    if n:
        vis = cfg.get('visualizer')
        if vis and vis.get('name'):
            vis.name = f'{vis.name}_run{n}'
        stem = osp.splitext(osp.basename(cfg.filename or 'config'))[0]
        cfg.experiment_name = f"{cfg.get('experiment_name') or stem}_run{n}"
