"""The scratch rows' learning rate, chosen by the study itself (tools/study.py) before any
replicate trains: each lr of the profile's grid (`scratch_lr`, per task) trains the scratch
recipe once on a tuning world that no replicate uses (its own seed, `TUNING_SEED`, in
`<work dir>/tuning/`), is scored on that world's tuning half (`cls/val`, the segmentation
`validation` split; never a test half), and the best of each task is used by every
replicate's scratch rows (own recipe and compute-matched). The grid, the scores and the choice
are printed in the report's stage checks.
"""
from __future__ import annotations

from pathlib import Path

from peco_mm.tooling.study_runs import TUNING_SEED, tuning_runs  # noqa: F401 (re-exported)

METRIC = dict(cls='accuracy/top1', seg='mIoU')  # the tuning half's score of each task


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
