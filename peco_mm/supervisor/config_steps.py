"""Everything the launcher does to a config before mmengine builds anything, in one list.

`STEPS` is the order `tools/train.py` and `tools/test.py` (`peco_mm.supervisor.launch.run`)
apply them in: the flags folded in, the checks (pre-flight, unknown keys), the settings that
follow the model or the machine, the training safeguards, the CPU process group. Each step is
a function `(cfg, spec) -> notes` that rewrites or checks the config in place; `apply_steps`
compares the config before and after each one and records every key it changed as a
`Change` (key, before, after, why), which the run's log lists in one block and
`--show-config` prints on the console. The notes are the steps' other lines to log (a resume
that skipped a broken checkpoint, the work dir lock taken over).

Steps marked `effect` act on the machine or the work dir (the allocator, the lock, unfinished
writes, the process group): `dry_run=True` (`tools/train.py --preflight-only`) leaves them
out and runs every other step, checks included, on a copy.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from mmengine.config import Config

from . import changes as changes_
from .changes import Change
from .config_flags import (add_vis_backends, amp_why, apply_test_flags, cpu_distributed,
                           cpu_mixed_precision, no_validate, run_names, scale_lr, set_amp,
                           set_launcher, set_resume, set_work_dir, sharded_clip_note,
                           start_cpu_process_group, sync_bn_why, sync_bn_without_cuda,
                           test_checkpoint)

MODES = ('train', 'test')


@dataclass
class RunSpec:
    """What the command line asks of a run (see `launch.run` for each field)."""
    mode: str = 'train'
    work_dir: str | None = None
    config_path: str = ''
    resume: str | None = None
    amp: bool = False
    launcher: str = 'none'
    no_validate: bool = False
    auto_scale_lr: bool = False
    checkpoint: str | None = None
    out: str | None = None
    show_dir: str | None = None
    show_interval: int = 1
    vis_backends: tuple[str, ...] = ()
    cuda: bool | None = None  # None: torch.cuda.is_available()
    notes: list[tuple[int, str, bool]] = field(default_factory=list)  # (level, line, once)

    def __post_init__(self) -> None:
        if self.cuda is None:
            import torch
            self.cuda = torch.cuda.is_available()


class Step(NamedTuple):
    name: str
    apply: Callable[[Config, RunSpec], object]  # returns a note, a list of notes or None
    why: str | Callable[[str, object, RunSpec], str]  # (key, value after, spec) -> why
    modes: tuple[str, ...] = MODES
    effect: bool = False  # acts on the machine or the work dir: left out of a dry run


# ---- the steps that wrap other modules -------------------------------------------------------
def workers(cfg: Config, spec: RunSpec):
    from .workers import resolve_workers
    resolve_workers(cfg)


def preflight_files(cfg: Config, spec: RunSpec):
    from . import preflight
    preflight.check(cfg, spec.mode, resume=spec.resume, checkpoint=spec.checkpoint,
                    config=spec.config_path)


def vis_backends(cfg: Config, spec: RunSpec):
    add_vis_backends(cfg, spec.vis_backends)


def known_keys(cfg: Config, spec: RunSpec):
    from .config_keys import check_config_keys, check_run_keys
    check_config_keys(cfg)
    check_run_keys(cfg)


def label_classes(cfg: Config, spec: RunSpec):
    from .seg_classes import set_label_check_classes
    set_label_check_classes(cfg)


def mixed_precision(cfg: Config, spec: RunSpec):
    note = cpu_mixed_precision(cfg, cuda=spec.cuda)
    if note:
        spec.notes.append((logging.WARNING, note, True))


def cpu_malloc(cfg: Config, spec: RunSpec):
    from .malloc import apply_cpu_malloc
    note = apply_cpu_malloc((cfg.get('env_cfg') or {}).get('cpu_malloc', 'auto'), spec.cuda)
    if note:
        spec.notes.append((logging.INFO, note, True))


def lock(cfg: Config, spec: RunSpec):
    from .work_dir_lock import lock_work_dir
    return lock_work_dir(cfg.work_dir)


def safeguards(cfg: Config, spec: RunSpec):
    from .safeguards import add_safeguards
    return add_safeguards(cfg)


def unfinished_writes(cfg: Config, spec: RunSpec):
    from .resume import remove_unfinished_writes
    return remove_unfinished_writes(cfg.work_dir) if cfg.get('resume') else None


def process_group(cfg: Config, spec: RunSpec):
    start_cpu_process_group(cfg, spec.cuda)


SAFEGUARD_WHY = {  # by the changed key, or by the hook type a custom_hooks item adds
    'default_hooks.checkpoint': 'each checkpoint is written to a .part file, then renamed: a '
                                'kill leaves no half-written checkpoint',
    'optim_wrapper': 'a step whose loss is NaN/inf is skipped (config: nonfinite_loss)',
    'train_dataloader.dataset': 'a sample that cannot be read stops the run naming its file '
                                "(config: bad_samples=dict(policy='skip') skips it)",
    'load_from': "--resume: the work dir's newest checkpoint that reads back",
    'model.target_generator': 'resume: the frozen tokenizer is read from the resumed '
                              'checkpoint (its own file is gone)',
    'NonFiniteLossHook': 'a NaN/inf loss stops the run (or is skipped) with its loss terms',
    'ArchitectureMetaHook': "the model's arguments go into every checkpoint as plain data",
    'ResumeCheckHook': 'the resumed checkpoint is compared with this run before mmengine '
                       'loads it',
    'LoadFromCheckHook': "load_from's frozen tokenizer must fit this model",
}


def safeguard_why(key: str, after, spec) -> str:
    hook = str(after.get('type')) if isinstance(after, dict) else ''
    return SAFEGUARD_WHY.get(hook) or next(
        (why for k, why in SAFEGUARD_WHY.items() if key.startswith(k)), 'a training safeguard')


STEPS: tuple[Step, ...] = (
    Step('work dir', set_work_dir, "--work-dir, else the config's work_dir, else "
         'work_dirs/<config name>'),
    Step('resume', set_resume, '--resume: continue the run from its checkpoint', ('train',)),
    Step('amp', set_amp, amp_why, ('train',)),
    Step('launcher', set_launcher, '--launcher (tools/dist_train.sh and slurm_train.sh set it)'),
    Step('workers', workers, "num_workers='auto': the CPU cores per GPU of this machine, but "
         'one'),
    Step('no validation', no_validate, '--no-validate: no validation loop', ('train',)),
    Step('lr scaling', scale_lr, "--auto-scale-lr: mmengine scales the lr by the total batch "
         'over auto_scale_lr.base_batch_size', ('train',)),
    Step('checkpoint to test', test_checkpoint, 'the CHECKPOINT argument of tools/test.py',
         ('test',)),
    Step('test outputs', apply_test_flags, '--out / --show-dir', ('test',)),
    Step('pre-flight', preflight_files, ''),
    Step('vis backends', vis_backends, '--vis-backend'),
    Step('known keys', known_keys, ''),
    Step('label check classes', label_classes, "CheckSegLabels checks the labels against the "
         "model's model.decode_head.num_classes"),
    Step('sharded clip', lambda cfg, spec: sharded_clip_note(cfg), ''),
    Step('mixed precision on CPU', mixed_precision, lambda key, after, spec: (
        'no CUDA: AmpOptimWrapper needs an accelerator; ' + (
            'bf16 autocast, the CPU computes bf16 natively' if 'Autocast' in str(after) else
            'fp32, this CPU has no native bf16')), ('train',)),
    Step('SyncBN without CUDA', sync_bn_without_cuda, sync_bn_why),
    Step('CPU allocator', cpu_malloc, '', effect=True),
    Step('work dir lock', lock, '', ('train',), effect=True),
    Step('unfinished writes', unfinished_writes, '', ('train',), effect=True),
    Step('safeguards', safeguards, safeguard_why, ('train',)),
    Step('CPU processes', cpu_distributed, 'no CUDA: the processes talk over gloo, and DDP '
         'wraps the model without device ids'),
    Step('process group', process_group, '', effect=True),
    Step('run names', run_names, "a second run in this process: mmengine would hand back the "
         "first run's logger and visualizer of the same name", effect=True),
)


def apply_steps(cfg: Config, spec: RunSpec, dry_run: bool = False,
                skip: tuple[str, ...] = ()) -> list[Change]:
    """Apply `STEPS` of `spec.mode` to `cfg` in place, in order; every key they changed,
    with why. `dry_run`: leave out the steps with an effect; `skip`: steps by name (e.g. the
    pre-flight, already run)."""
    if spec.mode not in MODES:
        raise ValueError(f'mode={spec.mode!r}: expected one of {MODES}')
    out: list[Change] = []
    for step in STEPS:
        if spec.mode not in step.modes or step.name in skip or (dry_run and step.effect):
            continue
        before = changes_.snapshot(cfg._cfg_dict)
        notes = step.apply(cfg, spec)
        for note in [notes] if isinstance(notes, str) else (notes or []):
            spec.notes.append((logging.WARNING, note, False))
        for key, old, new in changes_.diff(before, changes_.snapshot(cfg._cfg_dict)):
            why = step.why(key, new, spec) if callable(step.why) else step.why
            out.append(Change(key, old, new, why or step.name))
    return out
