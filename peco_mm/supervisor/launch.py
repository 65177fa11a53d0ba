"""What `tools/train.py` and `tools/test.py` do with a config before mmengine runs it.

`run(config, work_dir, options, mode)` is the one entry point: the two tools, the demo and the
tests all call it. What it does to the config before mmengine builds anything is one ordered
list, `peco_mm.supervisor.config_steps.STEPS`; every key those steps change is listed (key,
before, after, why) in one block of the run's log, and on the console with `show_config`
(`plan` gives the list without running: `tools/train.py --preflight-only`). It

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
- without CUDA, turns the model's SyncBN layers into BN (torch's DDP refuses SyncBatchNorm on
  CPU processes) and NCCL into gloo;
- on a machine without CUDA, keeps freed CPU memory for the next step instead of returning it
  to the system (`env_cfg.cpu_malloc`, see `peco_mm.supervisor.malloc`): 6 % (PeCo) to
  19 % (PeCo_MAE) off a ViT-B pretraining step on 2 CPU cores.
"""
from __future__ import annotations

import copy
import os.path as osp
from typing import NamedTuple

from mmengine.config import Config
from mmengine.dist import is_main_process

from ..checkpoint.mmengine_loaders import checkpoints_through_gate
from . import console, preflight
from .changes import Change, block
from .config_flags import (VIS_BACKENDS, add_vis_backends, apply_test_flags,  # noqa: F401
                           cpu_mixed_precision, sharded_clip_note)
from .config_steps import MODES, RunSpec, apply_steps
from .preflight import LAYOUTS, PreflightError, dataset_layout  # noqa: F401 (public names)
from .process_tree import tie_forked_children


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
        show_config: print the config, the hook table and the keys the launcher changed on
            the console too (they always go to the run's log file; see
            `peco_mm.supervisor.console`).
    """
    if mode not in MODES:
        raise ValueError(f'mode={mode!r}: expected one of {MODES}')
    if mode == 'test' and not checkpoint:
        raise ValueError("mode='test' needs checkpoint=PATH (the weights to evaluate)")
    tie_forked_children()  # data loader workers die with this process (an OOM kill too)
    cfg = load_config(config, options)
    spec = RunSpec(mode, work_dir, config if isinstance(config, str) else (cfg.filename or ''),
                   resume, amp, launcher, no_validate, auto_scale_lr, checkpoint, out,
                   show_dir, show_interval, tuple(vis_backends))
    console.quiet_ranks(launcher)  # warnings from rank 0 only
    changes = apply_steps(cfg, spec)  # every rewrite and check of config_steps.STEPS, in order
    # load_from, resume and every init_cfg Pretrained read weights-only through the gate
    with checkpoints_through_gate(), console.quiet_stdout():
        runner = prepare_runner(cfg, mode, show_config, changes, spec.notes)
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


def plan(config: str | Config, work_dir: str | None = None, options: dict | None = None,
         mode: str = 'train', skip: tuple[str, ...] = (), **flags) -> tuple[Config, list[Change]]:
    """What `run` would do to the config, without running it: the steps of
    `config_steps.STEPS` but those that act on the machine or the work dir, every check
    included (`skip`: steps by name). Returns the prepared config and every key changed;
    raises as `run` would (a misspelt key, a missing input, a flag the config cannot take).
    `flags`: `run`'s keyword arguments (resume=, amp=, ...)."""
    cfg = load_config(config, options)
    path = config if isinstance(config, str) else (cfg.filename or '')
    spec = RunSpec(mode, work_dir, path, **flags)
    return cfg, apply_steps(cfg, spec, dry_run=True, skip=skip)


def prepare_runner(cfg: Config, mode: str, show_config: bool = False,
                   changes: list[Change] = (), notes=()):
    """The runner of a config the steps prepared; the checks that need the built datasets
    (labels, a training set that gives a batch); in the run's log: the keys the launcher
    changed (one block; on the console with `show_config`) and the steps' notes (the
    machine's once per process on the console)."""
    from .safeguards import check_dataset_labels
    runner = build_runner(cfg, show_config)
    check_dataset_labels(runner, mode)  # labels outside the head's classes, by file
    if mode == 'train':  # a training set that gives no batch, named before training
        from .safeguards import check_train_batches
        check_train_batches(runner)
    runner.logger.info(block(list(changes)), extra={'console': show_config})
    if not show_config:
        n = len(changes)
        runner.logger.info(f'Config, hook order and the {n} key{"s" if n != 1 else ""} the '
                           f'launcher changed: in {runner.log_dir}/{runner.timestamp}.log '
                           '(--show-config prints them here)')
    for level, note, once in notes:
        if once:
            console.log_once_per_process(runner.logger, note, level)
        else:
            runner.logger.log(level, note)
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


def build_runner(cfg: Config, show_config: bool = False):
    """mmengine's Runner, or the runner `runner_type` names (e.g. FlexibleRunner), as the
    hosts' tools/train.py do, with the console filters on its logger
    (`console.quiet_runner_class`; `show_config`: keep the config on the console)."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    if cfg.get('runner_type'):
        strategy = str((cfg.get('strategy') or {}).get('type', ''))
        if cfg.get('launcher', 'none') == 'none' and ('FSDP' in strategy
                                                      or 'DeepSpeed' in strategy):
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


def apply_cli(cfg: Config, work_dir: str | None, config_path: str, resume: str | None,
              amp: bool, launcher: str) -> Config:
    """The launcher flags folded into the config (the steps 'work dir' to 'launcher' of
    `config_steps.STEPS`)."""
    from .config_flags import set_amp, set_launcher, set_resume, set_work_dir
    spec = RunSpec('train', work_dir, config_path, resume, amp, launcher)
    for step in (set_work_dir, set_resume, set_amp, set_launcher):
        step(cfg, spec)
    return cfg


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
