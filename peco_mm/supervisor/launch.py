"""What `tools/train.py` and `tools/test.py` do with a config before mmengine runs it.

`run(config, work_dir, options, mode)` is the one entry point: the two tools, the demo and the
tests all call it. It

- takes the registry scope from the config (`default_scope`), so one launcher serves
  mmpretrain, mmdet and mmseg configs alike;
- builds the runner the config names: `runner_type='FlexibleRunner'` with a `strategy`
  (FSDP, DeepSpeed) as the hosts' launchers do, mmengine's `Runner` otherwise;
- folds the host flags into the config: `--resume`, `--amp`, `--auto-scale-lr`,
  `--no-validate`, `--out`, `--show-dir`, `--vis-backend`;
- runs an `AmpOptimWrapper` config without CUDA in bf16 autocast (`AutocastOptimWrapper`)
  on a CPU with native bf16, in fp32 on one without, and says which and why in one log line;
- trains on several CPU processes: mmengine 0.10.7's `init_dist` calls `torch.cuda.set_device`
  and wraps the model with `device_ids=[local_rank]`, so on CPU we start the gloo group
  ourselves (with `env_cfg.dist_cfg.timeout`) and wrap with `device_ids=None`;
- checks every checkpoint and dataset path the config reads before anything is built, and
  reports all missing ones at once, each with its config key, the expected layout and where
  to get it (`peco_mm.supervisor.preflight`);
- reads every checkpoint mmengine loads for the run (`load_from`, `resume`, `init_cfg`)
  through peco_mm's weights-only gate (`peco_mm.checkpoint.checkpoints_through_gate`);
- adds the training safeguards of `peco_mm.supervisor.safeguards` (atomic checkpoints,
  resume fallback and check, non-finite loss guard, bad-sample policy);
- on a machine without CUDA, keeps freed CPU memory for the next step instead of returning it
  to the system (`env_cfg.cpu_malloc`, see `peco_mm.supervisor.malloc`): 6 % (PeCo) to
  19 % (PeCo_MAE) off a ViT-B pretraining step on 2 CPU cores.
"""
from __future__ import annotations

import copy
import datetime
import itertools
import importlib.util
import os.path as osp
import warnings
from typing import NamedTuple

import torch
import torch.distributed as dist
from mmengine.config import Config, ConfigDict
from mmengine.dist import is_main_process

from ..checkpoint.mmengine_loaders import checkpoints_through_gate
from .malloc import apply_cpu_malloc
from .process_tree import tie_forked_children
from . import console, preflight
from .preflight import LAYOUTS, PreflightError, dataset_layout  # noqa: F401 (public names)
from .workers import resolve_workers

# --vis-backend NAME -> (mmengine vis backend type, the package it needs)
VIS_BACKENDS = {
    'local': ('LocalVisBackend', None),
    'tensorboard': ('TensorboardVisBackend', 'tensorboard'),
    'wandb': ('WandbVisBackend', 'wandb'),
    'mlflow': ('MLflowVisBackend', 'mlflow'),
}
_RUNS_IN_PROCESS = itertools.count()  # see build_runner
MODES = ('train', 'test')


class RunResult(NamedTuple):
    """What `run` returns: the runner (e.g. to test after training) and the test metrics
    (mode='test'; None after training)."""
    runner: object
    metrics: dict | None


def run(config: str | Config, work_dir: str | None = None, options: dict | None = None,
        mode: str = 'train', *, checkpoint: str | None = None, resume: str | None = None,
        amp: bool = False, launcher: str = 'none', no_validate: bool = False,
        auto_scale_lr: bool = False, out: str | None = None, show_dir: str | None = None,
        show_interval: int = 1, vis_backends: tuple[str, ...] = (),
        show_config: bool = False) -> RunResult:
    """Train or test `config` the way `tools/train.py` and `tools/test.py` do.

    Args:
        config: a config file path or a loaded Config (copied, never modified).
        work_dir: logs and checkpoints; default `cfg.work_dir`, else work_dirs/<config name>.
        options: `--cfg-options` as a dict, e.g. {'train_dataloader.batch_size': 8}.
        mode: 'train' or 'test'.
        checkpoint: (test) the weights to evaluate; required for mode='test'.
        resume: (train) a checkpoint path, or 'auto' for the work dir's last checkpoint.
        amp: (train) mixed precision on CUDA (bf16 where supported, else fp16).
        launcher: 'none', 'pytorch' (torchrun), 'slurm' or 'mpi'.
        no_validate: (train) run no validation loop.
        auto_scale_lr: (train) scale lr by the total batch / `auto_scale_lr.base_batch_size`.
        out: (test) `.pkl`/`.pickle` dumps the predictions, `.json`/`.yaml` the metrics.
        show_dir: (test) where the host's visualization hook writes painted predictions.
        show_interval: (test) paint every n-th image (mmpretrain and mmseg; mmdet paints all).
        vis_backends: extra visualizer backends by name (see VIS_BACKENDS).
        show_config: print the config and the hook table on the console too (they always go
            to the run's log file; see `peco_mm.supervisor.console`).
    """
    if mode not in MODES:
        raise ValueError(f'mode={mode!r}: expected one of {MODES}')
    if mode == 'test' and not checkpoint:
        raise ValueError("mode='test' needs checkpoint=PATH (the weights to evaluate)")
    tie_forked_children()  # data loader workers die with this process (an OOM kill too)
    cfg = load_config(config, options)
    config_path = config if isinstance(config, str) else (cfg.filename or '')
    cfg = apply_cli(cfg, work_dir, config_path, resume, amp, launcher)
    resolve_workers(cfg)  # num_workers='auto': the cores per GPU but one
    if mode == 'train':
        apply_train_flags(cfg, no_validate=no_validate, auto_scale_lr=auto_scale_lr)
    else:
        cfg.load_from = checkpoint
        apply_test_flags(cfg, out=out, show_dir=show_dir, show_interval=show_interval)
    # every missing checkpoint and dataset at once, before anything is built (PreflightError)
    preflight.check(cfg, mode, resume=resume, checkpoint=checkpoint, config=config_path)
    add_vis_backends(cfg, vis_backends)
    sync_with_model(cfg)
    # load_from, resume and every init_cfg Pretrained read weights-only through the gate
    with checkpoints_through_gate():
        runner = prepare_runner(cfg, mode, show_config)
        if mode == 'train':
            from .work_dir_lock import unlock_work_dir
            runner.train()
            unlock_work_dir(cfg.work_dir)
            return RunResult(runner, None)
        metrics = runner.test()
    if out and out.endswith(('.json', '.yaml', '.yml')) and is_main_process():
        import mmengine
        mmengine.dump(metrics, out)
    return RunResult(runner, metrics)


def prepare_runner(cfg: Config, mode: str, show_config: bool = False):
    """The runner of a checked config: the machine's settings (CPU bf16, allocator, CPU
    process group), for training the work-dir lock, safeguard hooks and the training data's
    checks; every note it made, in the run's log (the machine's once per process on the
    console)."""
    from .safeguards import check_dataset_labels
    notes = [sharded_clip_note(cfg)]
    cpu_note = cpu_mixed_precision(cfg)  # about the machine: once per process on the console
    malloc_note = apply_cpu_malloc((cfg.get('env_cfg') or {}).get('cpu_malloc', 'auto'),
                                   torch.cuda.is_available())
    if mode == 'train':  # one run per work dir; atomic checkpoints, NaN guard, resume checks
        from .safeguards import add_safeguards, check_train_batches
        from .work_dir_lock import lock_work_dir
        notes.append(lock_work_dir(cfg.work_dir))
        notes += add_safeguards(cfg)
    setup_cpu_distributed(cfg)
    runner = build_runner(cfg, show_config)
    check_dataset_labels(runner, mode)  # labels outside the head's classes, by file
    if mode == 'train':  # a training set that gives no batch, named before training
        check_train_batches(runner)
    if not show_config:
        runner.logger.info(f'Config and hook order: in {runner.log_dir}/{runner.timestamp}.log '
                           '(--show-config prints them here)')
    for note in filter(None, notes):
        runner.logger.warning(note)
    console.log_once_per_process(runner.logger, cpu_note)
    console.log_once_per_process(runner.logger, malloc_note, level=20)
    return runner


def load_config(config: str | Config, options: dict | None = None) -> Config:
    """A config file (checked to exist) or a copy of a Config, with `options` merged in."""
    if isinstance(config, Config):
        cfg = copy.deepcopy(config)
    else:
        if not osp.isfile(config):
            raise FileNotFoundError(f'config file {config!r} not found')
        cfg = Config.fromfile(config)
    if options:
        cfg.merge_from_dict(options)
    return cfg


def apply_cli(cfg: Config, work_dir: str | None, config_path: str, resume: str | None,
              amp: bool, launcher: str) -> Config:
    """Fold the launcher flags into the config (work dir, resume, amp, launcher)."""
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        if not config_path:
            raise ValueError('work_dir is needed for a Config that has no file name')
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(config_path))[0])
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
    if amp:
        ow = cfg.optim_wrapper
        ow.type = 'AmpOptimWrapper'
        if not torch.cuda.is_available() or torch.cuda.is_bf16_supported():
            ow.dtype = 'bfloat16'  # (on CPU: see cpu_mixed_precision)
        else:
            ow.loss_scale = 'dynamic'
    cfg.launcher = launcher
    return cfg


def cpu_mixed_precision(cfg: Config, native_bf16: bool | None = None) -> str | None:
    """Without CUDA, run an AmpOptimWrapper config (which asserts an accelerator) in bf16
    autocast with `AutocastOptimWrapper` where the CPU computes bf16 natively, and in fp32 with
    a plain OptimWrapper where it does not (bf16 is emulated there: several times slower than
    fp32). A config's fp16 becomes bf16 on the CPU (no fp16 arithmetic there; bf16 needs no
    loss scale). Returns the one line to log (None when nothing changed). `native_bf16`:
    the detection's answer (default: `cpu_has_native_bf16()`)."""
    ow = cfg.get('optim_wrapper')
    if torch.cuda.is_available() or not isinstance(ow, dict):
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


def apply_train_flags(cfg: Config, no_validate: bool = False,
                      auto_scale_lr: bool = False) -> Config:
    """`--no-validate` drops the validation loop; `--auto-scale-lr` turns on mmengine's linear
    scaling: lr x (world size x batch per process) / auto_scale_lr.base_batch_size."""
    if no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if auto_scale_lr:
        base = (cfg.get('auto_scale_lr') or {}).get('base_batch_size')
        if not base:
            raise KeyError('--auto-scale-lr needs auto_scale_lr.base_batch_size in the config '
                           '(the total batch its lr was set for); add it, e.g. --cfg-options '
                           'auto_scale_lr.base_batch_size=256')
        cfg.auto_scale_lr.enable = True
    return cfg


def apply_test_flags(cfg: Config, out: str | None = None, show_dir: str | None = None,
                     show_interval: int = 1) -> Config:
    """`--out FILE.pkl` adds mmengine's DumpResults (mmdet's DumpDetResults for mmdet
    configs) to the test evaluator; `--out FILE.json|yaml` is dumped by `run` after testing.
    `--show-dir DIR` switches the host's visualization hook on, as its own test.py does."""
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
            hook.update(enable=True, out_dir=show_dir, interval=show_interval)
        elif scope == 'mmdet':  # writes <work_dir>/<timestamp>/<show_dir>/<image name>
            hook.update(draw=True, test_out_dir=show_dir)
        else:  # mmseg: the visualizer's backend writes <show_dir>/vis_data/vis_image/
            hook.update(draw=True, interval=show_interval)
            cfg.setdefault('visualizer', ConfigDict(type='Visualizer'))
            cfg.visualizer.save_dir = show_dir
    return cfg


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


def setup_cpu_distributed(cfg: Config) -> None:
    """Start a gloo group for torchrun on CPU and make DDP/FSDP CPU-friendly (no-op on CUDA)."""
    if cfg.launcher == 'none' or torch.cuda.is_available():
        return
    if cfg.launcher != 'pytorch':
        raise ValueError(f'--launcher {cfg.launcher} needs CUDA here; start CPU processes '
                         'with torchrun (tools/dist_train.sh, --launcher pytorch)')
    cfg.setdefault('env_cfg', ConfigDict())
    cfg.env_cfg.setdefault('dist_cfg', ConfigDict())
    cfg.env_cfg.dist_cfg.backend = 'gloo'
    if not dist.is_initialized():
        timeout = cfg.env_cfg.dist_cfg.get('timeout')
        kwargs = dict(timeout=datetime.timedelta(seconds=timeout)) if timeout else {}
        dist.init_process_group(backend='gloo', **kwargs)
    if cfg.get('sync_bn') is not None:  # SyncBN needs CUDA
        warnings.warn(f'sync_bn={cfg.sync_bn!r} ignored: SyncBatchNorm needs CUDA')
        cfg.sync_bn = None
    if cfg.get('runner_type'):  # FlexibleRunner: the strategy wraps the model
        strategy = cfg.get('strategy') or ConfigDict(type='DDPStrategy')
        wrapper = strategy.get('model_wrapper') or ConfigDict()
        if 'FSDP' in str(strategy.get('type')):
            wrapper.device_id = 'cpu'  # else torch's FSDP asks for an accelerator
        else:
            wrapper.setdefault('type', 'MMDistributedDataParallel')
            wrapper.setdefault('broadcast_buffers', False)
            wrapper.device_ids = None
        if strategy.get('sync_bn') is not None:
            warnings.warn(f'strategy.sync_bn={strategy.sync_bn!r} ignored: SyncBatchNorm needs '
                          'CUDA')
            strategy.sync_bn = None
        strategy.model_wrapper = wrapper
        cfg.strategy = strategy
        return
    wrapper = cfg.get('model_wrapper_cfg') or ConfigDict(type='MMDistributedDataParallel')
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters', cfg.get('find_unused_parameters', False))
    wrapper.device_ids = None
    cfg.model_wrapper_cfg = wrapper


def build_runner(cfg: Config, show_config: bool = False):
    """mmengine's Runner, or the runner `runner_type` names (e.g. FlexibleRunner), as the
    hosts' tools/train.py do, with the console filters on its logger
    (`console.quiet_runner_class`; `show_config`: keep the config on the console)."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    # mmengine keys a run's logger, message hub and visualizer by name (<experiment>_<timestamp>,
    # or the visualizer's own `name`, e.g. mmseg's and mmdet's 'visualizer') and hands back an
    # existing instance of that name. A second run in this process (the demo, tests) would then
    # write its scalars into the first run's work dir: from the second run on, every name gets
    # this process's run number.
    n = next(_RUNS_IN_PROCESS)
    if n:
        vis = cfg.get('visualizer')
        if vis and vis.get('name'):
            vis.name = f'{vis.name}_run{n}'
        stem = osp.splitext(osp.basename(cfg.filename or 'config'))[0]
        cfg.experiment_name = f"{cfg.get('experiment_name') or stem}_run{n}"
    if cfg.get('runner_type'):
        strategy = str((cfg.get('strategy') or {}).get('type', ''))
        if cfg.launcher == 'none' and ('FSDP' in strategy or 'DeepSpeed' in strategy):
            raise ValueError(f'strategy {strategy} needs a distributed launch: '
                             'tools/dist_train.sh CONFIG NUM_PROCS (or --launcher pytorch '
                             'under torchrun)')
        runner_cls = cfg.runner_type  # a name, or a class (as mmengine's RUNNERS.build)
        if isinstance(runner_cls, str):
            with RUNNERS.switch_scope_and_registry(cfg.get('_scope_')) as registry:
                runner_cls = registry.get(cfg.runner_type)
        if runner_cls is None:
            raise KeyError(f'runner_type={cfg.runner_type!r} is not in the RUNNERS registry')
        return console.quiet_runner_class(runner_cls, show_config).from_cfg(cfg)
    return console.quiet_runner_class(Runner, show_config).from_cfg(cfg)


def check_pretrained_paths(cfg: Config) -> None:
    """Raise PreflightError (a FileNotFoundError) naming the config key of every missing
    checkpoint the model reads (see `peco_mm.supervisor.preflight`)."""
    problems = preflight.checkpoint_problems(cfg)
    if problems:
        raise PreflightError(problems)


def check_dataset_paths(cfg: Config, phases: tuple[str, ...] = ('train', 'val', 'test')) -> None:
    """Raise PreflightError (a FileNotFoundError) naming every missing data_root, ann_file and
    image folder of the loaders of `phases`, with the expected layout."""
    problems = preflight.merge(preflight.dataset_problems(cfg, phases))
    if problems:
        raise PreflightError(problems)


def sync_with_model(cfg: Config) -> None:
    """Refuse unknown hook / model keys (naming the nearest valid one); fill in the settings
    that follow the model: the label check's number of classes (seg configs)."""
    from .seg_classes import set_label_check_classes
    from .config_keys import check_config_keys, check_run_keys
    check_config_keys(cfg)
    check_run_keys(cfg)
    set_label_check_classes(cfg)
