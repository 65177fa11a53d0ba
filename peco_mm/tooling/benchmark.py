"""What tools/benchmark.py measures: tokenizer encode throughput, MIM pretraining steps of PeCo
against mmpretrain's BEiT and MAE, training steps of any config (the dense configs), and the
peak memory of a config's training step over batch size.

Weights are random everywhere (speed and memory do not depend on them) and inputs are
synthetic, made on the host: a config's step runs the config's own train pipeline (minus the
file loading) on a random 640x480 photo with random labels, collates it like the config's
dataloader, and calls the model's `train_step` with the config's optimizer wrapper, so the
data preprocessor, the loss and the optimizer update (layer decay included) are all measured.
"""
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

from ..layers.quantizer import CODEBOOK_SIZE
from ..utils.quiet import quiet_logs
from .memory import PeakMemory, StepMemory, model_state_tensors

SYNTH_HW = (480, 640)  # a 4:3 photo, as most COCO / ImageNet images
GiB = 2**30


# ---- timing ----------------------------------------------------------------------------------
def time_steps(step: Callable[[], object], steps: int, warmup: int, device: str) -> list[float]:
    """Seconds of each of `steps` calls of `step` after `warmup` untimed ones."""
    cuda = device.startswith('cuda')
    times = []
    for i in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return times


def autocast(device: str, amp: str):
    """torch.autocast for 'bf16' / 'fp16', a null context for 'none'."""
    dtype = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(amp)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def gemm_gflops(device: str, dtype: torch.dtype = torch.float32, n: int = 2048) -> float:
    """This machine's fp32 (or `dtype`) matrix-multiply rate in GFLOP/s: the median of 5
    n x n products after one untimed, at the current thread count. It is the practical ceiling
    for the convolutions and linear layers that make up the models' FLOPs."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b, out = torch.randn_like(a), torch.empty_like(a)
    sec = statistics.median(time_steps(lambda: torch.mm(a, b, out=out), 5, 1, device))
    return 2 * n**3 / sec / 1e9


# ---- 1. tokenizer encode ---------------------------------------------------------------------
class DalleCodes(torch.nn.Module):
    """mmpretrain's DALL-E encoder (BEiT's tokenizer) with `encode(img) -> (B, h, w) codes`."""

    def __init__(self, **kwargs) -> None:
        super().__init__()
        from mmpretrain.models.selfsup.cae import DALLEEncoder
        self.encoder = DALLEEncoder(**kwargs).eval()

    @torch.inference_mode()
    def encode(self, x: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bool(bf16)):
            return self.encoder(x).argmax(1)


def tokenizer_models(dalle: bool = True, smoke: bool = False) -> list[tuple[str, int, object]]:
    """(name, input size, module with .encode) rows. Smoke: a quarter of the channels at 64 px."""
    from ..tokenizer import PeCoTokenizer, cnn_parts
    common = dict(with_decoder=False, frozen=True, perceptual_weight=0.0)
    base, lite = (16, 8) if smoke else (64, 32)
    size = 64 if smoke else 224
    rows = [('PeCo (default, 37.5M)', size, PeCoTokenizer(**cnn_parts(base), **common)),
            ('PeCo lite (25.7M)', size,
             PeCoTokenizer(**cnn_parts(lite, (1, 2, 4, 8, 16)), **common)),
            ('PeCo default, no channels-last', size,
             PeCoTokenizer(**cnn_parts(base), channels_last=False, **common))]
    if dalle:  # 8x down: half the input size for the same code grid, as BEiT feeds it
        rows.append(('DALL-E encoder (BEiT, mmpretrain)', size // 2,
                     DalleCodes(n_hid=64 if smoke else 256)))
    return rows


def count_gflops(fn: Callable[[], object]) -> float:
    """GFLOPs (multiply-add = 2) of one call of `fn`, forward and any backward it runs, from
    torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9


def bench_tokenizers(batch: int, steps: int, warmup: int, device: str, dalle: bool = True,
                     smoke: bool = False, bf16: bool | None = None) -> list[dict]:
    """Encode throughput; `bf16`: the encoders in bf16 autocast (True), fp32 (False), or each
    tokenizer's default (None: PeCo's `encode_bf16`, off unless set)."""
    rows = []
    for name, size, module in tokenizer_models(dalle, smoke):
        module.to(device)
        x = torch.rand(batch, 3, size, size, device=device) * 2 - 1
        sec = statistics.median(time_steps(lambda: module.encode(x, bf16=bf16), steps, warmup,
                                           device))
        gflops = count_gflops(lambda: module.encode(x[:1]))  # per image
        rows.append(dict(model=name, img_size=size, batch=batch, gflops=round(gflops, 4),
                         ms_per_batch=round(1000 * sec, 2), img_per_s=round(batch / sec, 2),
                         gflop_per_s=round(gflops * batch / sec, 1)))
    return rows


# ---- 2. pretraining step: PeCo, BEiT, MAE, PeCo_MAE --------------------------------------------
PRETRAIN_MODELS = ('peco', 'beit', 'mae', 'peco_mae')


def pretrain_sizes(smoke: bool) -> dict:
    from ..tokenizer import cnn_parts
    if smoke:
        return dict(img=32, patch=8, k=16, masked=6, min_block=2,
                    vit=dict(embed_dims=64, num_layers=2, num_heads=4), ffn=256,
                    dec=dict(embed_dims=32, num_layers=1, num_heads=4),
                    tokenizer=cnn_parts(16, (1, 2, 2, 4), embed_dims=16, num_embeddings=16),
                    dalle=dict(n_hid=16, vocab_size=16))
    return dict(img=224, patch=16, k=CODEBOOK_SIZE, masked=75, min_block=16, vit='base',
                ffn=3072,
                dec=dict(embed_dims=512, num_layers=8, num_heads=16), tokenizer=dict(),
                dalle=dict())


def build_pretrain_model(name: str, s: dict) -> torch.nn.Module:
    """PeCo / PeCo_MAE (this package) and BEiT / MAE (mmpretrain) at the same ViT size."""
    from mmpretrain.registry import MODELS
    arch = s['vit'] if isinstance(s['vit'], str) else dict(s['vit'], feedforward_channels=s['ffn'])
    width = 768 if isinstance(s['vit'], str) else s['vit']['embed_dims']
    grid = s['img'] // s['patch']
    tokenizer = dict(type='PeCoTokenizer', with_decoder=False, frozen=True, **s['tokenizer'])
    peco_vit = dict(type='PeCoViT', arch=s['vit'], img_size=s['img'], patch_size=s['patch'])
    d = s['dec']
    cfgs = dict(
        peco=dict(type='PeCo', require_target_checkpoint=False,
                  backbone=dict(peco_vit, qkv_bias='qv', use_abs_pos_emb=False,
                                rel_pos_bias='shared', layer_scale_init_value=0.1,
                                drop_path_rate=0.1, use_mask_token=True),
                  head=dict(type='PeCoMIMHead'), target_generator=tokenizer),
        peco_mae=dict(type='PeCoMAE', require_target_checkpoint=False, backbone=peco_vit,
                      neck=dict(type='PeCoMAEDecoder', grid=grid, **d),
                      head=dict(type='PeCoMIMHead'), target_generator=tokenizer),
        beit=dict(type='BEiT',
                  backbone=dict(type='BEiTPretrainViT', arch=arch, img_size=s['img'],
                                patch_size=s['patch'], drop_path_rate=0.1,
                                layer_scale_init_value=0.1),
                  head=dict(type='BEiTV1Head', embed_dims=width, num_embed=s['k'],
                            loss=dict(type='CrossEntropyLoss')),
                  target_generator=dict(type='DALL-E', **s['dalle'])),
        mae=dict(type='MAE',
                 backbone=dict(type='MAEViT', arch=arch, img_size=s['img'],
                               patch_size=s['patch'], mask_ratio=0.75),
                 neck=dict(type='MAEPretrainDecoder', num_patches=grid * grid,
                           patch_size=s['patch'], embed_dim=width,
                           decoder_embed_dim=d['embed_dims'], decoder_depth=d['num_layers'],
                           decoder_num_heads=d['num_heads']),
                 head=dict(type='MAEPretrainHead', norm_pix=True, patch_size=s['patch'],
                           loss=dict(type='PixelReconstructionLoss', criterion='L2'))))
    if name not in cfgs:
        raise ValueError(f'pretraining model {name!r}; allowed: {PRETRAIN_MODELS}')
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):  # whatever scope a caller left
        model = MODELS.build(cfgs[name])
    model.init_weights()
    return model


def pretrain_inputs(name: str, s: dict, batch: int, device: str):
    """(inputs, data samples) as each model's `loss` takes them: two views and the masks of
    the model's generator (block-wise for PeCo and BEiT, a 112 px view for DALL-E's 8x grid;
    MAE's random 75 % for PeCo_MAE), one view (MAE, which masks inside its backbone)."""
    from mmpretrain.structures import DataSample

    from ..registry import TRANSFORMS
    img = torch.randn(batch, 3, s['img'], s['img'], device=device)
    grid = s['img'] // s['patch']
    side = grid * 8 if name == 'beit' else s['img']
    target = torch.rand(batch, 3, side, side, device=device) * 2 - 1
    masker = TRANSFORMS.build(
        dict(type='RandomMaskGenerator', input_size=grid, mask_ratio=0.75)
        if name == 'peco_mae' else
        dict(type='BlockwiseMaskGenerator', input_size=grid, num_masking_patches=s['masked'],
             min_num_patches=s['min_block']))
    samples = [DataSample().set_mask(torch.from_numpy(masker.generate()).to(device))
               for _ in range(batch)]
    return (img if name == 'mae' else [img, target]), samples


def bench_pretrain(models: Sequence[str], batch: int, steps: int, warmup: int, device: str,
                   amp: str = 'none', smoke: bool = False, target_bf16: bool = False,
                   target_channels_last: bool = True, compile_target: bool = False
                   ) -> list[dict]:
    """One step = forward, backward and AdamW update; median ms over `steps`. For PeCo's frozen
    target encoder (BEiT's DALL-E encoder follows the step's autocast anyway):
    `target_bf16`: bf16 autocast (`encode(img, bf16=True)`) instead of its default (fp32 on a
    CPU); `target_channels_last`: its memory format (the tokenizer's default: channels-last);
    `compile_target`: the encoder through `torch.compile` (compiled in the warm-up steps)."""
    s = pretrain_sizes(smoke)
    return [time_pretrain_step(name, s, batch, steps, warmup, device, amp, target_bf16,
                               target_channels_last, compile_target)
            for name in models]


def time_pretrain_step(name: str, s: dict, batch: int, steps: int, warmup: int, device: str,
                       amp: str, target_bf16: bool = False, target_channels_last: bool = True,
                       compile_target: bool = False) -> dict:
    torch.manual_seed(0)
    # the tokenizer is built in the memory format asked for (its `channels_last` argument)
    s = dict(s, tokenizer=dict(s['tokenizer'], channels_last=target_channels_last))
    model = build_pretrain_model(name, s).to(device).train()
    target = getattr(model, 'target_generator', None)
    peco_target = name in ('peco', 'peco_mae')  # PeCo's tokenizer as target: fp32 unless asked
    tags = ''
    if peco_target:
        target.encode = partial(target.encode, bf16=target_bf16)
        if compile_target:
            target.encoder = torch.compile(target.encoder)
        tags = ''.join(f' ({t} target)' for t, on in (
            ('bf16', target_bf16), ('contiguous', not target_channels_last),
            ('compiled', compile_target)) if on)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    inputs, samples = pretrain_inputs(name, s, batch, device)
    scaler = torch.amp.GradScaler('cuda') if amp == 'fp16' else None

    def step(inputs=inputs, samples=samples):
        opt.zero_grad(set_to_none=True)
        with autocast(device, amp):
            losses = model.loss(inputs, samples)
            loss = sum(v for k, v in losses.items() if 'loss' in k)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    if device.startswith('cuda'):
        torch.cuda.reset_peak_memory_stats()
    ms = statistics.median(time_steps(step, steps, warmup, device)) * 1000
    # counted on one image and scaled: a step's FLOPs are linear in the batch (tested)
    gflops = count_gflops(lambda: step(*pretrain_inputs(name, s, 1, device))) * batch
    row = dict(model=name + tags,
               ms_per_step=round(ms, 2),
               img_per_s=round(batch / ms * 1000, 2),
               gflops_per_step=round(gflops, 3), gflop_per_s=round(gflops / ms * 1000, 1),
               trainable_m=round(sum(p.numel() for p in params) / 1e6, 2),
               target_generator_m=round(sum(p.numel() for p in target.parameters()) / 1e6, 2)
               if target is not None else 0.0)
    if device.startswith('cuda'):
        row['peak_mem_gib'] = round(torch.cuda.max_memory_allocated() / GiB, 2)
    return row


# ---- 3. a config's training step -------------------------------------------------------------
def load_config(path: str, options: dict | None = None):
    """The config with `options` merged (as --cfg-options) and the host scope initialised."""
    from mmengine.registry import init_default_scope

    from ..engine.launch import load_config as read_config
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
    tag = hashlib.sha1(repr(sorted(arch.items())).encode()).hexdigest()[:10]
    path = osp.join(tempfile.gettempdir(), f'peco_mm_random_tokenizer_{tag}.pth')
    if not osp.isfile(path):
        quantizer = dict(arch.get('quantizer') or dict(type='EMAVectorQuantizer'), init='random')
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
                      with_annotations: bool, frames: int = 0) -> dict:
    """What the config's loading steps would return for one random 640x480 photo: the image,
    and for mmseg a random label map, for mmdet three boxes with masks. For mmaction
    (`frames` > 0): the decoded frames of one random clip of a 300-frame video and its label."""
    h, w = SYNTH_HW
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


def train_transform(cfg) -> tuple[Callable, Callable]:
    """The config's train pipeline without its loading steps, and `make(rng)` -> what those
    steps would return for one random photo or clip (`synthetic_results`)."""
    from mmengine.dataset import Compose
    pipeline = cfg.train_dataloader.dataset.get('pipeline')
    if pipeline is None:
        raise ValueError('train_dataloader.dataset.pipeline: the config has none; the synthetic '
                         'batch runs the train pipeline')
    steps = [t for t in pipeline if not is_loading_step(t)]
    with_ann = any(t['type'] == 'LoadAnnotations' for t in pipeline)
    # a video's sampler (SampleFrames, UniformSample) says how many frames a clip has
    frames = sum(t['clip_len'] * t.get('num_clips', 1) for t in pipeline if 'clip_len' in t)
    make = partial(synthetic_results, cfg.get('default_scope', 'mmpretrain'),
                   num_classes=num_classes_of(cfg.model), with_annotations=with_ann,
                   frames=frames)
    return Compose(steps), make


def synthetic_batch(cfg, batch: int, seed: int = 0) -> dict:
    """`batch` samples through the config's train pipeline (its Load* steps replaced by
    `synthetic_results`), collated by the config's collate function."""
    from mmengine.registry import FUNCTIONS
    transform, make = train_transform(cfg)
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


def train_step(cfg, batch: int, device: str, amp: str = 'auto'):
    """(step function, model) for one training step of the config at `batch`: data
    preprocessor, forward, loss, backward, optimizer update. `amp`: 'auto' (what the config's
    optimizer wrapper asks for), 'none', 'bf16' or 'fp16'."""
    model = build_model(cfg, device, batch)
    optim = build_optim_wrapper(cfg, model, device)
    amp = config_amp(cfg) if amp == 'auto' else amp
    data = synthetic_batch(cfg, batch)
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


# ---- 4. memory -------------------------------------------------------------------------------
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
