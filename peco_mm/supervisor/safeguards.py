"""What tools/train.py adds to every training config so that nothing is lost or silent.

`add_safeguards(cfg)` (called by the launcher before the runner is built):

- swaps mmengine's `CheckpointHook` for `AtomicCheckpointHook` (same arguments);
- adds `NonFiniteLossHook` (config: `nonfinite_loss = dict(max_skips=0)`) and puts the
  guarded subclass of each optimizer wrapper in `optim_wrapper` (`NonFiniteGuardOptimWrapper`
  for `OptimWrapper`, ...), which skips the step of a non-finite loss;
- wraps the training dataset in `BadSampleGuard` (config: `bad_samples = dict(policy='raise')`,
  the default, or `dict(policy='skip', max_skips=100)`);
- adds `ArchitectureMetaHook` (the model's arguments in every checkpoint as plain data);
- on `--resume` without a path, picks the newest checkpoint of the work dir that reads
  back; adds `ResumeCheckHook` to compare the
  checkpoint with this run before mmengine resumes;
- on resume, reads the frozen target generator from the resumed checkpoint when its own
  file is gone (the checkpoint holds its weights);
- with `load_from` (no resume), adds `LoadFromCheckHook`: the checkpoint's target generator
  must fit this model's;

It returns the lines to log (skipped checkpoints), as the launcher's other notes. All of it
is done to the config, before the runner is built, so the config the runner dumps into the
work dir shows what ran (and is left as it is when trained again).
"""
from __future__ import annotations

import os.path as osp

from mmengine.config import Config, ConfigDict

from ..engine.optimizers.nonfinite_guard import guard_optim_wrapper_cfg
from .resume import checkpoint_problem, find_resumable_checkpoint


def add_safeguards(cfg: Config) -> list[str]:
    notes = []
    hooks = cfg.setdefault('default_hooks', ConfigDict())
    ckpt_hook = hooks.get('checkpoint')
    if isinstance(ckpt_hook, dict) and str(ckpt_hook.get('type', 'CheckpointHook')).split(
            '.')[-1] == 'CheckpointHook':
        ckpt_hook.type = 'AtomicCheckpointHook'
    custom = [h for h in cfg.get('custom_hooks') or []  # a dumped config's stale one
              if not (isinstance(h, dict)
                      and h.get('type') in ('ResumeCheckHook', 'LoadFromCheckHook'))]
    types = {str(h.get('type')).split('.')[-1] for h in custom if isinstance(h, dict)}
    if 'NonFiniteLossHook' not in types:
        custom.append(dict(type='NonFiniteLossHook', **(cfg.get('nonfinite_loss') or {})))
    guard_optim_wrapper_cfg(cfg.get('optim_wrapper'))
    guard_train_data(cfg)
    if 'ArchitectureMetaHook' not in types:  # checkpoints rebuild models from plain data
        custom.append(dict(type='ArchitectureMetaHook'))
    if cfg.get('resume') and not cfg.get('load_from'):
        found, skipped = find_resumable_checkpoint(cfg.work_dir)
        notes += skipped
        if not found:  # mmengine would start from scratch without a word
            raise FileNotFoundError(
                f'--resume: no checkpoint of the work dir {cfg.work_dir} reads back'
                + (f" ({'; '.join(skipped)})" if skipped else '') + '; nothing was started. '
                'Give --work-dir of the run to continue or --resume CKPT, or leave out '
                '--resume to start from scratch')
        cfg.load_from = found
        passed_over = any(n.startswith('resume: skipped') for n in skipped)
        notes.append(f'resume: using {found}' + (', the newest checkpoint that reads back'
                                                 if passed_over else ''))
    elif cfg.get('resume') and cfg.get('load_from'):
        problem = checkpoint_problem(cfg.load_from)
        if problem:
            found, _ = find_resumable_checkpoint(cfg.work_dir)
            raise ValueError(f'--resume {cfg.load_from}: {problem}. '
                             + (f'The newest readable checkpoint of the work dir is {found} '
                                '(--resume without a path takes it).' if found else ''))
    if cfg.get('resume') and cfg.get('load_from'):
        custom.append(dict(type='ResumeCheckHook', checkpoint=cfg.load_from))
        notes += frozen_weights_from_resumed(cfg)
    elif cfg.get('load_from'):  # the frozen tokenizer must fit, as for a resume
        custom.append(dict(type='LoadFromCheckHook', checkpoint=cfg.load_from))
    cfg.custom_hooks = custom
    return notes


def frozen_weights_from_resumed(cfg: Config) -> list[str]:
    """On resume, a target generator whose weights file is gone reads them from the checkpoint
    being resumed, which holds them (`target_generator.*`); returns the lines to log."""
    tg = (cfg.get('model') or {}).get('target_generator')
    if not isinstance(tg, dict):
        return []
    notes = []

    def gone(path) -> bool:
        return bool(path) and '://' not in str(path) and not osp.isfile(str(path))

    def use_resumed(node: dict, key: str, name: str) -> None:
        if gone(node.get(key)):
            notes.append(f'resume: model.target_generator.{name}={node[key]!r} not found; the '
                         f'frozen tokenizer is read from {cfg.load_from}, which holds its '
                         'weights')
            node[key] = cfg.load_from
    for key in ('checkpoint', 'pretrained'):
        use_resumed(tg, key, key)
    inits = tg.get('init_cfg')
    for i, init in enumerate(inits if isinstance(inits, list) else [inits]):
        if isinstance(init, dict) and init.get('type') == 'Pretrained':
            use_resumed(init, 'checkpoint',
                        'init_cfg' + (f'.{i}' if isinstance(inits, list) else '') + '.checkpoint')
    return notes


def guard_train_data(cfg: Config) -> None:
    """Wrap the config's training dataset in BadSampleGuard with the config's `bad_samples`
    policy (once: a dumped config that has it is left alone)."""
    loader = cfg.get('train_dataloader')
    if not isinstance(loader, dict) or not isinstance(loader.get('dataset'), dict):
        return
    dataset = loader['dataset']
    if str(dataset.get('type', '')).split('.')[-1] == 'BadSampleGuard':
        return
    loader['dataset'] = ConfigDict(type='BadSampleGuard', dataset=dataset,
                                   **(cfg.get('bad_samples') or {}))


def check_train_batches(runner) -> None:
    """Raise ValueError naming the dataset size and the batch when the training loader gives
    no batch at all (a dataset smaller than one batch with `drop_last=True`, or an empty one):
    mmengine's iteration loop would end in a bare `StopIteration`, an epoch loop would train
    nothing."""
    loader = runner.train_dataloader  # built here (the runner would build it in train())
    try:
        if len(loader):
            return
        n = len(loader.dataset)
    except TypeError:  # an iterable dataset / sampler without a length
        return
    if n == 0:
        raise ValueError('train_dataloader gives no batch: the dataset is empty; check its '
                         'data_root, ann_file and data_prefix')
    batch = loader.batch_size or getattr(loader.batch_sampler, 'batch_size', None)
    per_rank = (f' ({n} samples over {runner.world_size} processes)' if runner.world_size > 1
                else '')
    raise ValueError(
        f'train_dataloader gives no batch: the dataset has {n} samples and batch_size={batch} '
        f'with drop_last=True{per_rank}. Lower train_dataloader.batch_size (at most '
        f'{max(n // max(runner.world_size, 1), 1)}), set train_dataloader.drop_last=False, or '
        'check the dataset (data_root, ann_file).')


def check_dataset_labels(runner, mode: str) -> None:
    """Raise ValueError naming the files of the samples whose label the model's head cannot
    learn (no label, or one outside its classes), or an empty validation / test set, before
    the first step (classification and video configs; `peco_mm.supervisor.label_checks`)."""
    from .label_checks import classifier_classes, describe_problems, label_problems
    classes = classifier_classes(runner.cfg)
    if classes is None:
        return
    for split in ('train', 'val') if mode == 'train' else ('test',):
        loop = built_loop(runner, split)
        if loop is None:
            continue
        dataset = loop.dataloader.dataset
        if len(dataset) == 0:
            raise empty_dataset_error(runner.cfg, split)
        problems = label_problems(dataset, classes[1], classes[0])
        if problems:
            raise ValueError(describe_problems(f'{split}_dataloader.dataset', problems))


def built_loop(runner, split: str):
    """The runner's `split` loop, built here as train() / test() would; an empty dataset
    (mmengine fails with numpy's `need at least one array to concatenate`) is named."""
    try:
        return getattr(runner, f'{split}_loop')
    except ValueError as e:
        if 'need at least one array to concatenate' not in str(e):
            raise
        raise empty_dataset_error(runner.cfg, split) from e


def empty_dataset_error(cfg, split: str) -> ValueError:
    dataset = (cfg.get(f'{split}_dataloader') or {}).get('dataset') or {}
    ann = dataset.get('ann_file') or 'its annotation file'
    return ValueError(f'{split}_dataloader.dataset is empty: {ann} lists no sample; check its '
                      'ann_file and data_prefix')
