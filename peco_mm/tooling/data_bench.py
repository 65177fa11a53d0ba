"""The data loader's CPU work per sample, step by step, for tools/benchmark.py data: the config's
train pipeline from the file on (decoding included) on real-size JPEGs written for the run,
then the collate function over a batch; and the workers that keep up with a GPU step.

The JPEGs are ImageNet-sized (500x375, its most common size) crops of the photos scikit-image
ships, with a little sensor-like noise so that they compress (and decode) like camera photos
rather than like flat renders; the mean file size is reported with the table. Each step's
figure is its mean over the samples (the work a worker does on average: the random crop's
cost varies with the crop), in one process, OpenCV and torch on one thread each, as in a
data-loader worker.
"""
from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..datasets.wrapped import dataset_pipeline
from ..supervisor.workers import cores_per_gpu, default_workers  # noqa: F401 (the tool's names)

PHOTO_HW = (375, 500)  # ImageNet's most common image size
# the names the table gives the steps of the shipped pretraining pipelines
STEP_NAMES = {'LoadImageFromFile': 'decode (LoadImageFromFile)',
              'RandomResizedCropAndInterpolationWithTwoPic': 'RandomResizedCrop (bicubic)',
              'RandomResizedCrop': 'RandomResizedCrop', 'ColorJitter': 'colour jitter',
              'BlockwiseMaskGenerator': 'mask generation (block-wise)',
              'RandomMaskGenerator': 'mask generation (random)', 'RandomFlip': 'flip',
              'PackInputs': 'pack'}


def write_jpegs(root: str | Path, n: int, hw: tuple[int, int] = PHOTO_HW, seed: int = 0,
                quality: int = 95) -> list[Path]:
    """`n` JPEGs of `hw` pixels under root: crops of scikit-image's colour photos covering
    60-100 % of their short side, resized, with Gaussian noise of 5 grey levels (about
    100 KiB a file, near ImageNet's mean of some 110 KiB)."""
    from PIL import Image

    from .demo_data import TRAIN_PHOTOS, available_photos, load_photo, random_crop
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    photos = [load_photo(name) for name in available_photos(TRAIN_PHOTOS)]
    files = []
    for i in range(n):
        img = random_crop(rng, photos[i % len(photos)], hw, scale=(0.6, 1.0)).astype(np.float32)
        img = np.clip(img + rng.normal(0, 5, img.shape), 0, 255).astype(np.uint8)
        files.append(root / f'{i:05d}.JPEG')
        Image.fromarray(img).save(files[-1], quality=quality)
    return files


def time_steps_per_sample(pipeline: Sequence[dict], files: Sequence[Path], samples: int,
                          warmup: int) -> tuple[dict[str, float], list[dict]]:
    """Mean seconds per sample of each step of `pipeline` (built from its configs, the file
    loading included) over `samples` samples after `warmup` untimed ones, cycling `files`;
    and the packed samples (for the collate)."""
    from mmengine.registry import TRANSFORMS
    steps = [(STEP_NAMES.get(str(t['type']), str(t['type'])), TRANSFORMS.build(dict(t)))
             for t in pipeline]
    totals = dict.fromkeys((name for name, _ in steps), 0.0)
    packed = []
    for i in range(warmup + samples):
        res = dict(img_path=str(files[i % len(files)]), sample_idx=i)
        for name, step in steps:
            t = time.perf_counter()
            res = step(res)
            if i >= warmup:
                totals[name] += time.perf_counter() - t
        if i >= warmup:
            packed.append(res)
    return {k: v / samples for k, v in totals.items()}, packed


def time_collate(collate_cfg: dict | None, packed: list[dict], batch: int) -> float:
    """Seconds per sample of the config's collate function over batches of `batch` packed
    samples (cycled when fewer), the mean of three."""
    from functools import partial

    from mmengine.registry import FUNCTIONS
    cfg = dict(collate_cfg or dict(type='pseudo_collate'))
    kind = cfg.pop('type')
    collate = partial(FUNCTIONS.get(kind) if isinstance(kind, str) else kind, **cfg)
    data = [packed[i % len(packed)] for i in range(batch)]
    t = time.perf_counter()
    for _ in range(3):
        collate(data)
    return (time.perf_counter() - t) / 3 / batch


def bench_transforms(configs: Sequence[str], samples: int, warmup: int, batch: int,
                     workdir: str | Path, options: dict | None = None) -> list[dict]:
    """Rows (config, step, ms_per_sample) for each config's train pipeline step by step on
    real-size JPEGs written to `workdir`, then its collate at `batch`, then the total."""
    import cv2

    from .config_step import load_config
    files = write_jpegs(workdir, min(samples + warmup, 64))
    kib = sum(f.stat().st_size for f in files) / len(files) / 1024
    import torch
    threads = cv2.getNumThreads(), torch.get_num_threads()
    cv2.setNumThreads(0)
    torch.set_num_threads(1)  # as torch sets it in each DataLoader worker
    rows = []
    try:
        for path in configs:
            cfg = load_config(path, options)
            random.seed(0)
            np.random.seed(0)
            per_step, packed = time_steps_per_sample(
                dataset_pipeline(cfg), files, samples, warmup)
            per_step['collate'] = time_collate(cfg.train_dataloader.get('collate_fn'), packed,
                                               batch)
            per_step['total'] = sum(per_step.values())
            name = path.rsplit('/', 1)[-1]
            rows += [dict(config=name, step=step, what=f'{name}: {step}',
                          ms_per_sample=round(sec * 1000, 3), jpeg_kib=round(kib, 1),
                          batch=batch) for step, sec in per_step.items()]
    finally:
        cv2.setNumThreads(threads[0])
        torch.set_num_threads(threads[1])
    return rows


def workers_needed(ms_per_sample: float, batch: int, step_s: float) -> int:
    """Workers that together make a batch in no more than a step: each makes one sample per
    `ms_per_sample`, so a batch takes batch x ms_per_sample / workers."""
    return max(1, math.ceil(batch * ms_per_sample / 1000 / step_s))
