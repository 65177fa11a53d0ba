"""The scratch rows' learning rate, chosen by the study itself (tools/study.py) before any
replicate trains: each lr of the profile's grid (`scratch_lr`, per task) trains the scratch
recipe once on a tuning world that no replicate uses (its own seed, `TUNING_SEED`, in
`<work dir>/tuning/`), is scored on that world's tuning half (`cls/val`, the segmentation
`validation` split; never a test half), and the best of each task is used by every
replicate's scratch rows (own recipe and compute-matched). The grid, the scores and the choice
are printed in the report's stage checks.

With `row_lr` (the label-free design) every downstream row gets its lr the same way: the
tuning world runs the whole chain once (its perceptual network, tokenizers and pretrainings,
seed `TUNING_SEED`), then each row fine-tunes at each lr of the grid, and the best score on the
tuning half is that row's lr in every replicate (`study.row_lr`).
"""
from __future__ import annotations

from pathlib import Path

from peco_mm.tooling.study_runs import TUNING_SEED, tuning_runs  # noqa: F401 (re-exported)

METRIC = dict(cls='accuracy/top1', seg='mIoU')
WORLD_SIZE = 32  # the shape world's images are 32 px squares (shape_world.make_world's size)  # the tuning half's score of each task


def tuning_score(res: dict) -> dict:
    """The run's last validation record: its score on the tuning half."""
    from peco_mm.tooling.logs import last_metrics, read_scalars
    return last_metrics(read_scalars(Path(res['ckpt']).parent))


def choose(scores: dict[float, float]) -> float:
    """The lr of the highest score (the first of the grid among equals)."""
    return max(scores, key=lambda lr: (scores[lr], -list(scores).index(lr)))


def stage_tuning(study) -> dict:
    """Train the grid on the tuning world: {task: dict(scores={lr: score}, chosen=lr)} ({}
    without a grid); also kept as `study.scratch_lr` for the replicates' scratch rows."""
    from peco_mm.tooling.study_stages import stage_world
    if study.p.get('row_lr'):
        study.row_lr = stage_row_tuning(study)
        return study.row_lr
    runs = tuning_runs(study)
    if not runs:
        study.scratch_lr = {}
        return {}
    # only the labelled splits of B are read: the other splits at their smallest
    stage_world(study, TUNING_SEED, n_pretrain=1, judge_per_class=1, n_pairs=1,
                n_train_pairs=0)
    out = {}
    for task in ('cls', 'seg'):
        scores = {}
        for lr in study.p['scratch_lr'][task]:
            res = study.run(f'tuning/{task}_scratch_lr{lr:g}',
                            options={'optim_wrapper.optimizer.lr': lr}, evaluate=tuning_score)
            scores[lr] = float(res['metrics'][METRIC[task]])
        out[task] = dict(scores=scores, chosen=choose(scores))
    study.scratch_lr = out
    return out


def stage_row_tuning(study) -> dict:
    """The tuning world's chain, then every row at every lr of `row_lr`:
    {task: {row: dict(scores={lr: score}, chosen=lr)}}."""
    from peco_mm.tooling.study_runs import TARGETS
    from peco_mm.tooling.study_stages import (stage_networks, stage_pretrain, stage_tokenizers,
                                              stage_world)
    r = TUNING_SEED
    stage_world(study, r)
    pre = stage_pretrain(study, r, stage_tokenizers(study, r, stage_networks(study, r)))
    if 'scratch_matched' in study.inits:
        study.matched_iters = matched_iterations(study, pre['peco']['ckpt'])
        study.plan = study.make_plan()  # the matched rows' iterations are known now
    out: dict = {}
    for task in ('cls', 'seg'):
        out[task] = {}
        for init in study.inits:
            scores = {}
            for lr in study.p['row_lr'][task]:
                opts = {'optim_wrapper.optimizer.lr': lr}
                if init in TARGETS:
                    opts['model.backbone.init_cfg.checkpoint'] = pre[init]['ckpt']
                res = study.run(f'tuning/{task}_{init}_lr{lr:g}', options=opts,
                                evaluate=tuning_score)
                scores[lr] = float(res['metrics'][METRIC[task]])
            out[task][init] = dict(scores=scores, chosen=choose(scores))
    return out


def matched_iterations(study, tokenizer_pretrain: str) -> dict[str, int]:
    """Compute-matched scratch's iterations per task: as many as make its training FLOPs
    equal PeCo's pretraining plus fine-tuning. A step's FLOPs are torch's FLOP counter's
    (multiply-add = 2; forward and backward; the frozen tokenizer's encoding of the targets
    included; the optimizer's update not) on one image of the config's training step with
    random weights, times the config's batch size. The tokenizer and perceptual network's own
    training is not counted (PeCo pays it once per tokenizer)."""
    from mmengine.registry import init_default_scope

    from peco_mm.tooling.benchmark import count_gflops
    from peco_mm.tooling.config_step import train_step
    from peco_mm.tooling.study_runs import TASK_CONFIGS
    from peco_mm.utils.quiet import quiet_logs

    def per_iteration(name: str, options: dict | None = None) -> float:
        cfg = study.config(name, TUNING_SEED, 1, options)
        init_default_scope(cfg.get('default_scope', 'mmpretrain'))
        with quiet_logs():
            step, _ = train_step(cfg, 1, 'cpu', amp='none', hw=(WORLD_SIZE, WORLD_SIZE))
            return count_gflops(step) * cfg.train_dataloader.batch_size
    it = study.p['iters']
    pretrain = it['pretrain'] * per_iteration(
        'pretrain_peco_world.py', {'model.target_generator.checkpoint': tokenizer_pretrain})
    out = {}
    for task, (pretrained, scratch) in TASK_CONFIGS.items():
        peco = pretrain + it[task] * per_iteration(pretrained)
        out[task] = max(1, round(peco / per_iteration(scratch)))
    return out


def row_tuning_line(tuning: dict) -> str:
    """The report's stage check of the rows' lr ('' without one)."""
    if not tuning:
        return ''
    words = dict(cls='few-label top-1', seg='mIoU')
    parts = [f'{words[task]}, {row}: ' + ', '.join(f'{lr:g}: {s:.1f} %'
                                                  for lr, s in t['scores'].items())
             + f' (chosen: {t["chosen"]:g})' for task, rows in tuning.items()
             for row, t in rows.items()]
    return (f'- Fine-tuning learning rates: every row at each lr of one grid on a tuning world '
            f'no replicate uses (seed {TUNING_SEED}, its whole chain trained once), scored on '
            f'its tuning half; the best is that row\'s lr in every replicate: '
            + '; '.join(parts) + '.')


def tuning_line(tuning: dict) -> str:
    """The report's stage check of the choice ('' without a grid)."""
    if not tuning:
        return ''
    words = dict(cls='few-label top-1', seg='mIoU')
    parts = [f'{words[task]} ' + ', '.join(f'{lr:g}: {s:.1f} %' for lr, s in t['scores'].items())
             + f' (chosen: {t["chosen"]:g})' for task, t in tuning.items()]
    return (f'- Scratch learning rate: each of a grid trained once with the scratch recipe on '
            f'a tuning world no replicate uses (seed {TUNING_SEED}), scored on its tuning half; '
            f'the best is every replicate\'s scratch lr: ' + '; '.join(parts) + '.')
