"""tools/benchmark.py chain: the documented chain (tokenizer, PeCo pretraining, UperNet, Mask
R-CNN) run for a few iterations each through tools/train.py on synthetic data written in the
hosts' layouts, and what the paper's schedule of each stage would cost.

Each stage trains its shipped config (docs/getting_started.md) with `--no-validate` and these
`--cfg-options`: the data root of the synthetic set; an epoch of exactly `iters` iterations
(the set has iters x batch images: an epoch-based loop runs one epoch) or `max_iters=iters`;
a log line and a checkpoint at the end; and the previous stage's checkpoint where the next
reads one (the tokenizer's as the pretraining target, the pretraining's as the dense
backbones'). The tokenizer's perceptual network has random weights (its MoCo v3 file is not
at hand; the cost is the same). `smoke` runs the demo's toy configs of the same chain on tiny
images at batch 2 instead, on the CPU in seconds.

From the run's log (mmengine's scalars.json, one record per iteration): the median seconds
per iteration after the first `skip` (cuDNN tuning, the target encoder's compile), the data
wait's share of it, and the peak GPU memory mmengine logs (CUDA only). The projection: the
paper's iterations on `gpus` GPUs at the shipped per-GPU batch (an epoch-based schedule's
epochs x images / (batch x gpus); an iteration-based one's iterations scaled from the 8 GPUs
it was set for), times the measured s/iteration: per-GPU speed is assumed to hold under DDP.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

# images per epoch of the paper's training sets
IMAGENET_TRAIN, COCO_TRAIN, ADE_TRAIN = 1_281_167, 117_266, 20_210
PAPER_GPUS = 8  # every shipped schedule's total batch is 8 GPUs x the per-GPU batch


@dataclass(frozen=True)
class Stage:
    name: str
    config: str  # the shipped config
    smoke: str  # the demo's toy config of the same stage
    data: str  # 'imagenet', 'ade' or 'coco': the layout written
    images: int  # the paper's images per epoch
    reads: str | None = None  # the config key that takes the previous stage's checkpoint


STAGES = (
    Stage('tokenizer', 'configs/peco/tokenizer_vqvae_in1k.py',
          'configs/demo/tokenizer_tiny_photos.py', 'imagenet', IMAGENET_TRAIN),
    Stage('pretrain', 'configs/peco/pretrain_vitb_in1k_800e.py',
          'configs/demo/pretrain_tiny_photos.py', 'imagenet', IMAGENET_TRAIN,
          'model.target_generator.checkpoint'),
    Stage('upernet', 'configs/peco/upernet_vitb_ade20k.py',
          'configs/demo/upernet_tiny_shapes.py', 'ade', ADE_TRAIN,
          'model.backbone.init_cfg.checkpoint'),
    Stage('mask_rcnn', 'configs/peco/mask_rcnn_vitb_coco.py',
          'configs/demo/mask_rcnn_tiny_shapes.py', 'coco', COCO_TRAIN,
          'model.backbone.init_cfg.checkpoint'),
)
# image sizes (h, w) written per layout: the datasets' typical sizes, or tiny ones for smoke
SIZES = dict(imagenet=(375, 500), ade=(512, 683), coco=(480, 640))
SMOKE_SIZES = dict(imagenet=(64, 64), ade=(64, 96), coco=(96, 128))


def write_imagenet(root: Path, n: int, hw: tuple[int, int], classes: int = 4) -> Path:
    """ImageNet's layout: root/train/<class>/*.JPEG and root/meta/train.txt ('path label')."""
    from .data_bench import write_jpegs
    lines = []
    for c in range(classes):
        files = write_jpegs(root / 'train' / f'n{c:08d}', -(-n // classes), hw, seed=c)
        lines += [f'n{c:08d}/{f.name} {c}' for f in files]
    (root / 'meta').mkdir(parents=True, exist_ok=True)
    (root / 'meta' / 'train.txt').write_text('\n'.join(lines[:n]) + '\n')
    return root


def write_data(kind: str, root: Path, n: int, smoke: bool) -> str:
    """`n` training images (and one validation image) in the layout `kind`; its data root."""
    from .demo_data import make_ade, make_coco
    hw = (SMOKE_SIZES if smoke else SIZES)[kind]
    if kind == 'imagenet':
        return str(write_imagenet(root / 'imagenet', n, hw))
    if kind == 'ade':
        return str(make_ade(root / 'ade' / 'ADEChallengeData2016', n, 1, hw))
    return str(make_coco(root / 'coco', n, 1, hw)) + '/'


def stage_options(cfg, iters: int, data_root: str, previous: str | None, stage: Stage
                  ) -> tuple[list[str], str]:
    """tools/train.py's --cfg-options for a short run of `cfg`, and the checkpoint it leaves."""
    epochs = 'max_epochs' in cfg.train_cfg
    opts = [f'train_dataloader.dataset.data_root={data_root}', 'default_hooks.logger.interval=1',
            'log_processor.window_size=1']
    if epochs:
        opts += ['train_cfg.max_epochs=1', 'default_hooks.checkpoint.interval=1']
        ckpt = 'epoch_1.pth'
    else:
        opts += [f'train_cfg.max_iters={iters}', f'default_hooks.checkpoint.interval={iters}']
        ckpt = f'iter_{iters}.pth'
    if previous and stage.reads:
        opts.append(f'{stage.reads}={previous}')
    if (cfg.model.get('perceptual') or {}).get('checkpoint'):
        opts += ['model.perceptual.checkpoint=None', 'model.perceptual.allow_random=True']
    return opts, ckpt


def schedule_iters(cfg, stage: Stage, gpus: int) -> int:
    """The paper schedule's iterations on `gpus` GPUs at the config's per-GPU batch."""
    batch = int(cfg.train_dataloader.batch_size)
    if 'max_epochs' in cfg.train_cfg:
        return int(cfg.train_cfg.max_epochs) * math.ceil(stage.images / (batch * gpus))
    return math.ceil(int(cfg.train_cfg.max_iters) * PAPER_GPUS / gpus)


def measure(work_dir: Path, skip: int) -> dict:
    """s/iteration, data share and peak memory from the run's scalars (first `skip` left)."""
    from .logs import read_scalars
    recs = [r for r in read_scalars(work_dir) if 'time' in r and 'data_time' in r]
    timed = recs[skip:] or recs[-1:]
    sec = statistics.median(r['time'] for r in timed)
    data = statistics.median(r['data_time'] for r in timed)
    mem = [r['memory'] for r in recs if 'memory' in r]
    return dict(iterations=len(recs), timed=len(timed), s_per_iter=round(sec, 4),
                data_s=round(data, 4), data_share=round(data / sec, 3) if sec else 0.0,
                peak_gib=round(max(mem) / 1024, 2) if mem else None)


def run_chain(root: str | Path, iters: int, skip: int, gpus: int, smoke: bool,
              log=print) -> list[dict]:
    """Each stage in order, the previous checkpoint feeding the next; one row per stage with
    the measures and the projection on `gpus` GPUs."""
    from .config_step import load_config
    from .tool_runs import TOOLS, call_tool
    root, rows, previous = Path(root), [], None
    for stage in STAGES:
        config = str(TOOLS.parent / (stage.smoke if smoke else stage.config))
        cfg = load_config(config)
        batch = 2 if smoke else int(cfg.train_dataloader.batch_size)
        log(f'{stage.name}: writing {iters * batch} {stage.data} images')
        data_root = write_data(stage.data, root / 'data' / stage.name, iters * batch, smoke)
        opts, ckpt = stage_options(cfg, iters, data_root, previous, stage)
        opts += [f'train_dataloader.batch_size={batch}'] if smoke else []
        work_dir = root / stage.name
        log(f'{stage.name}: tools/train.py {config} for {iters} iterations')
        call_tool('train', [config, '--work-dir', work_dir, '--no-validate',
                            '--cfg-options', *opts])
        previous = str(work_dir / ckpt)
        row = dict(stage=stage.name, config=Path(config).name, batch=batch, **measure(
            work_dir, skip))
        total = schedule_iters(load_config(str(TOOLS.parent / stage.config)), stage, gpus)
        rows.append(dict(row, schedule_iters=total, gpus=gpus,
                         projected_h=round(total * row['s_per_iter'] / 3600, 1)))
    return rows


def md_chain(rows: list[dict], smoke: bool) -> list[str]:
    gpus = rows[0]['gpus'] if rows else 0
    out = ['| stage (per-GPU batch) | s / iteration | data wait (share) | peak memory | '
           f"paper schedule on {gpus} GPUs | projected |", '|---|---:|---:|---:|---:|---:|']
    for r in rows:
        mem = f"{r['peak_gib']} GiB" if r['peak_gib'] is not None else '- (no CUDA)'
        out.append(f"| {r['stage']} `{r['config']}` ({r['batch']}) | {r['s_per_iter']} | "
                   f"{r['data_s']} ({r['data_share']:.0%}) | {mem} | "
                   f"{r['schedule_iters']} it | {r['projected_h']} h |")
    total = sum(r['projected_h'] for r in rows)
    out += ['', f'The whole chain: {total:.1f} h on {gpus} GPUs' +
            (' (smoke: toy configs, the projection is not meaningful)' if smoke else '') + '.']
    return out
