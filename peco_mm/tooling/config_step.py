"""A config's training step on synthetic inputs, for tools/benchmark.py: the config's own train
pipeline (minus the file loading) on a random 640x480 photo with random labels, collated like
the config's dataloader, then the model's `train_step` with the config's optimizer wrapper, so
the data preprocessor, the loss and the optimizer update (layer decay included) are measured;
the pipeline's cost per sample; and the peak memory of the step over batch size. Weights are
random (a frozen target's or a perceptual network's checkpoint that is not at hand is replaced
by a random one of the configured architecture)."""
from __future__ import annotations

import contextlib
import inspect
import os
import os.path as osp
import random
import statistics
import time
from functools import partial
from typing import Callable, Sequence

import numpy as np
import torch

from ..datasets.wrapped import dataset_pipeline
from ..utils.quiet import quiet_logs
from .memory import PeakMemory, StepMemory, model_state_tensors
from .timing import autocast, time_steps

SYNTH_HW = (480, 640)  # a 4:3 photo, as most COCO / ImageNet images


def parse_options(pairs: list[str]) -> dict:
    """KEY=VALUE pairs as --cfg-options reads them (Python literals, else strings)."""
    import ast
    options = {}
    for kv in pairs:
        if '=' not in kv:
            raise SystemExit(f'benchmark.py: --cfg-options {kv!r}: expected KEY=VALUE')
        key, value = kv.split('=', 1)
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options


def load_config(path: str, options: dict | None = None):
    """The config with `options` merged (as --cfg-options) and the host scope initialised."""
    from mmengine.registry import init_default_scope

    from ..supervisor.launch import load_config as read_config
    cfg = read_config(path, options)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    return cfg


def random_weights(model_cfg: dict):
    """The model config without pretrained files: every `init_cfg` of type Pretrained dropped,
    `require_target_checkpoint=False` where the model takes it (PeCo, PeCo_MAE), a random
    tokenizer file for a frozen target that is not there, and a random perceptual network
    for a tokenizer whose perceptual checkpoint is not there."""
    from mmengine.registry import MODELS

    def strip(node):
        if isinstance(node, dict):
            init = node.get('init_cfg')
            out = {k: strip(v) for k, v in node.items() if k != 'init_cfg'}
            if init is not None and not (isinstance(init, dict)
                                         and init.get('type') == 'Pretrained'):
                out['init_cfg'] = init
            return out
        if isinstance(node, (list, tuple)):
            return type(node)(strip(v) for v in node)
        return node

    from mmengine.config import ConfigDict

    from ..registry import real_class
    cfg = strip(model_cfg.to_dict() if hasattr(model_cfg, 'to_dict') else dict(model_cfg))
    cls = real_class(MODELS, cfg['type']) if cfg['type'] in MODELS else None
    if cls is not None and 'require_target_checkpoint' in inspect.signature(cls).parameters:
        cfg['require_target_checkpoint'] = False
    tg = cfg.get('target_generator')
    if isinstance(tg, dict) and tg.get('type') == 'FrozenPeCoTokenizer' and \
            not osp.isfile(str(tg.get('checkpoint'))):
        frozen_only = ('type', 'checkpoint', 'with_decoder', 'channels_last', 'encode_bf16',
                       'config_key')
        tg['checkpoint'] = random_tokenizer_checkpoint(
            {k: v for k, v in tg.items() if k not in frozen_only})
    percep = cfg.get('perceptual')
    if isinstance(percep, dict) and percep.get('checkpoint') is not None and \
            not osp.isfile(str(percep['checkpoint'])):
        percep.update(checkpoint=None, allow_random=True)
    return ConfigDict(cfg)  # hosts read nested keys as attributes (train_cfg.rpn)


def random_tokenizer_checkpoint(arch: dict) -> str:
    """A tokenizer file with random weights (the paper's architecture unless `arch` says
    otherwise), for a frozen target whose trained checkpoint is not at hand: speed and memory
    do not depend on the weights. Written once per architecture to the temporary folder."""
    import hashlib
    import tempfile

    from ..checkpoint import as_plain_data
    from ..tokenizer import PeCoTokenizer
    from ..tokenizer.encoding import DEFAULT_PARTS
    tag = hashlib.sha1(repr(sorted(arch.items())).encode()).hexdigest()[:10]
    path = osp.join(tempfile.gettempdir(), f'peco_mm_random_tokenizer_{tag}.pth')
    if not osp.isfile(path):
        # the default quantizer updated by the config's, as FrozenPeCoTokenizer overrides it
        quantizer = {**DEFAULT_PARTS['quantizer'], **(arch.get('quantizer') or {}),
                     'init': 'random'}
        tok = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False,
                            **{**arch, 'quantizer': quantizer})
        part = f'{path}.{os.getpid()}.part'
        torch.save({'state_dict': tok.state_dict(),
                    'meta': {'tokenizer_parts': as_plain_data(tok.arch_parts)}}, part)
        os.replace(part, path)
    return path


def build_model(cfg, device: str, batch: int) -> torch.nn.Module:
    """The config's model with random weights, in train mode, on `device` (SyncBN -> BN; at
    batch 1 BN layers keep their running statistics: one image has no batch statistics for
    UperNet's 1x1 pooling branch)."""
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS
    model_cfg = random_weights(cfg.model)
    if cfg.get('data_preprocessor') is not None:  # as mmengine's Runner does
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    with quiet_logs():  # not a line per initialised parameter
        model = revert_sync_batchnorm(MODELS.build(model_cfg))
        model.init_weights()
    model.to(device).train()
    if batch == 1:
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.eval()
    return model


def synthetic_results(scope: str, rng: np.random.Generator, num_classes: int,
                      with_annotations: bool, frames: int = 0,
                      hw: tuple[int, int] = SYNTH_HW) -> dict:
    """What the config's loading steps would return for one random 640x480 photo: the image,
    and for mmseg a random label map, for mmdet three boxes with masks. For mmaction
    (`frames` > 0): the decoded frames of one random clip of a 300-frame video and its label."""
    h, w = hw
    label = int(rng.integers(0, max(num_classes, 1)))
    if scope == 'mmaction':
        imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(frames)]
        return dict(imgs=imgs, img_shape=(h, w), original_shape=(h, w), label=label,
                    total_frames=300, start_index=0, modality='RGB', filename='synthetic.mp4')
    res = dict(img=rng.integers(0, 256, (h, w, 3), dtype=np.uint8), img_shape=(h, w),
               ori_shape=(h, w), gt_label=label, img_id=0, img_path='synthetic.jpg')
    if not with_annotations:
        return res
    if scope == 'mmseg':
        res.update(gt_seg_map=rng.integers(0, num_classes, (h, w), dtype=np.uint8),
                   seg_fields=['gt_seg_map'], reduce_zero_label=False)
    elif scope == 'mmdet':
        from mmdet.structures.bbox import HorizontalBoxes
        from mmdet.structures.mask import BitmapMasks
        boxes = np.array([[0.04, 0.08, 0.4, 0.6], [0.5, 0.1, 0.9, 0.85], [0.2, 0.6, 0.35, 0.95]],
                         np.float32) * [w, h, w, h]
        masks = np.zeros((len(boxes), h, w), np.uint8)
        for m, (x0, y0, x1, y1) in zip(masks, boxes.astype(int)):
            m[y0:y1, x0:x1] = 1
        res.update(gt_bboxes=HorizontalBoxes(boxes),
                   gt_bboxes_labels=rng.integers(0, num_classes, len(boxes)).astype(np.int64),
                   gt_ignore_flags=np.zeros(len(boxes), bool),
                   gt_masks=BitmapMasks(masks, h, w))
    return res


def num_classes_of(model_cfg) -> int:
    """The class count a config's heads declare (decode_head, roi_head.bbox_head, head)."""
    for path in (('decode_head', ), ('roi_head', 'bbox_head'), ('head', ), ('cls_head', )):
        node = model_cfg
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, list):
            node = node[-1]
        if isinstance(node, dict) and node.get('num_classes'):
            return int(node['num_classes'])
    return 2


def is_loading_step(step: dict) -> bool:
    """A step that reads a file: Load* (images, annotations), and a video's reader
    (DecordInit / DecordDecode, PyAV*, OpenCV*, RawFrameDecode)."""
    name = str(step['type'])
    return name.startswith('Load') or name.endswith(('Init', 'Decode'))


def train_transform(cfg, hw: tuple[int, int] = SYNTH_HW) -> tuple[Callable, Callable]:
    """The config's train pipeline without its loading steps, and `make(rng)` -> what those
    steps would return for one random photo or clip of `hw` pixels (`synthetic_results`)."""
    from mmengine.dataset import Compose
    pipeline = dataset_pipeline(cfg)  # through dataset wrappers (BadSampleGuard, ...)
    steps = [t for t in pipeline if not is_loading_step(t)]
    with_ann = any(t['type'] == 'LoadAnnotations' for t in pipeline)
    # a video's sampler (SampleFrames, UniformSample) says how many frames a clip has
    frames = sum(t['clip_len'] * t.get('num_clips', 1) for t in pipeline if 'clip_len' in t)
    make = partial(synthetic_results, cfg.get('default_scope', 'mmpretrain'),
                   num_classes=num_classes_of(cfg.model), with_annotations=with_ann,
                   frames=frames, hw=hw)
    return Compose(steps), make


def synthetic_batch(cfg, batch: int, seed: int = 0, hw: tuple[int, int] = SYNTH_HW) -> dict:
    """`batch` samples through the config's train pipeline (its Load* steps replaced by
    `synthetic_results`), collated by the config's collate function."""
    from mmengine.registry import FUNCTIONS
    transform, make = train_transform(cfg, hw)
    random.seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    samples = [transform(make(rng)) for _ in range(batch)]
    collate_cfg = dict(cfg.train_dataloader.get('collate_fn') or dict(type='pseudo_collate'))
    collate = collate_cfg.pop('type')
    collate = FUNCTIONS.get(collate) if isinstance(collate, str) else collate
    return partial(collate, **collate_cfg)(samples)


def bench_pipelines(configs: Sequence[str], samples: int, warmup: int,
                    options: dict | None = None) -> list[dict]:
    """Milliseconds per sample of each config's train pipeline (the work of a data-loader
    worker, minus reading and decoding the file) on random 640x480 photos, OpenCV on one thread
    as in mmengine's workers, and the bytes per sample that go to the device."""
    import cv2
    threads = cv2.getNumThreads()
    cv2.setNumThreads(0)
    rows = []
    try:
        for path in configs:
            transform, make = train_transform(load_config(path, options))
            random.seed(0)
            np.random.seed(0)
            rng = np.random.default_rng(0)
            photos = [make(rng) for _ in range(warmup + samples)]  # made outside the timing
            times = []
            for i, res in enumerate(photos):
                t = time.perf_counter()
                out = transform(res)
                if i >= warmup:
                    times.append(time.perf_counter() - t)
            inputs = out['inputs'] if isinstance(out['inputs'], list) else [out['inputs']]
            rows.append(dict(config=path.rsplit('/', 1)[-1], samples=samples,
                             ms_per_sample=round(statistics.median(times) * 1000, 3),
                             views=len(inputs),
                             input_kib=round(sum(x.nbytes for x in inputs) / 1024, 2)))
    finally:
        cv2.setNumThreads(threads)
    return rows


def config_amp(cfg) -> str:
    """'bf16' / 'fp16' for a config trained with mmengine's AmpOptimWrapper, else 'none'."""
    ow = cfg.optim_wrapper
    if ow.get('type') != 'AmpOptimWrapper':
        return 'none'
    return 'bf16' if str(ow.get('dtype')) in ('bfloat16', 'torch.bfloat16') else 'fp16'


def build_optim_wrapper(cfg, model: torch.nn.Module, device: str):
    """The config's optimizer wrapper (its constructor, e.g. layer decay, included), updating
    at every step (gradient accumulation off: a step costs the same either way). AMP wrappers
    need CUDA: elsewhere a plain OptimWrapper (the step then runs under torch.autocast with
    `config_amp(cfg)`)."""
    from mmengine.optim import build_optim_wrapper as build
    ow = cfg.optim_wrapper.to_dict() if hasattr(cfg.optim_wrapper, 'to_dict') else dict(
        cfg.optim_wrapper)
    if ow.get('type') == 'AmpOptimWrapper' and not device.startswith('cuda'):
        ow = {k: v for k, v in ow.items() if k not in ('dtype', 'loss_scale')}
        ow['type'] = 'OptimWrapper'
    ow.pop('accumulative_counts', None)  # every step here updates (same memory, same work)
    with quiet_logs():
        return build(model, ow)


def train_step(cfg, batch: int, device: str, amp: str = 'auto',
               hw: tuple[int, int] = SYNTH_HW):
    """(step function, model) for one training step of the config at `batch` on synthetic
    images of `hw` pixels: data preprocessor, forward, loss, backward, optimizer update.
    `amp`: 'auto' (what the config's optimizer wrapper asks for), 'none', 'bf16' or 'fp16'."""
    model = build_model(cfg, device, batch)
    optim = build_optim_wrapper(cfg, model, device)
    amp = config_amp(cfg) if amp == 'auto' else amp
    data = synthetic_batch(cfg, batch, hw=hw)
    from mmengine.optim import AmpOptimWrapper
    native = isinstance(optim, AmpOptimWrapper)  # autocast comes with the wrapper

    def step():
        with contextlib.nullcontext() if native else autocast(device, amp):
            return model.train_step(data, optim)

    step.optim_wrapper = optim
    return step, model


def bench_config_steps(configs: Sequence[str], batch: int, steps: int, warmup: int,
                       device: str) -> list[dict]:
    """Median seconds of a training step of each config at `batch` (random weights), in the
    precision tools/train.py trains it: the config's AMP on CUDA, fp32 without CUDA."""
    rows = []
    amp = 'auto' if device.startswith('cuda') else 'none'
    for path in configs:
        cfg = load_config(path)
        step, model = train_step(cfg, batch, device, amp)
        sec = statistics.median(time_steps(step, steps, warmup, device))
        rows.append(dict(config=path.rsplit('/', 1)[-1], batch=batch,
                         params_m=round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
                         s_per_step=round(sec, 3), img_per_s=round(batch / sec, 2)))
    return rows


# ---- memory -------------------------------------------------------------------------------
def peak_step_memory(cfg, batch: int, device: str, amp: str = 'auto',
                     steps: int = 2) -> dict[str, float]:
    """Peak bytes of tensors in each phase of `steps` training steps (the second step has the
    optimizer state the first creates): {'forward', 'backward', 'optimizer'}. The allocator's
    counter on CUDA, `PeakMemory` elsewhere."""
    step, model = train_step(cfg, batch, device, amp)
    optim = step.optim_wrapper
    if device.startswith('cuda'):
        phases = {}

        def mark(name):
            torch.cuda.synchronize()
            phases[name] = max(phases.get(name, 0), torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        tracker = contextlib.nullcontext()
    else:
        tracker = PeakMemory()
        tracker.track(model_state_tensors(model))
        phases, mark = tracker.phases, tracker.mark
    # the phase boundaries of a step: the forward pass returns the losses (mmengine models
    # compute them inside forward), backward ends where the optimizer step begins
    hooks = [model.register_forward_hook(lambda *_: mark('forward')),
             optim.optimizer.register_step_pre_hook(lambda *_: mark('backward')),
             optim.optimizer.register_step_post_hook(lambda *_: mark('optimizer'))]
    try:
        with tracker:
            for _ in range(steps):
                step()
                mark('rest')
    finally:
        for h in hooks:
            h.remove()
    return {k: float(phases[k]) for k in ('forward', 'backward', 'optimizer')}


def plan_memory(cfg, targets: Sequence[int], device: str, measure: Sequence[int] = (2, 4, 8),
                amp: str = 'auto') -> dict:
    """Peak training-step memory at each target batch: measured on CUDA; elsewhere measured at
    the small `measure` batches and extrapolated (`StepMemory`, marked `estimated`)."""
    amp = config_amp(cfg) if amp == 'auto' else amp
    if device.startswith('cuda'):
        return dict(estimated=False, device=device, amp=amp,
                    peak={b: max(peak_step_memory(cfg, b, device, amp).values())
                          for b in targets})
    model = StepMemory.fit({b: peak_step_memory(cfg, b, device, amp) for b in measure})
    return dict(estimated=True, device=device, amp=amp, model=model,
                peak={b: model(b) for b in targets})
