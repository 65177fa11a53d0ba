"""Mixed precision through one path: without CUDA an AmpOptimWrapper config trains in bf16
autocast (`AutocastOptimWrapper`) on a CPU with native bf16 and in fp32 on one without. Every
stage (tokenizer, PeCo, PeCo_MAE, UperNet, Mask R-CNN) trains a few steps under CPU bf16
autocast, whatever this CPU has (bf16 is emulated where it is not native: slower, same
numbers), with the losses, log-softmax and the quantizer in fp32."""
import collections
import contextlib
import copy
import math

import pytest
import torch
from mmengine.optim import build_optim_wrapper
from torch.utils._python_dispatch import TorchDispatchMode

import peco_mm  # noqa: F401
from peco_mm.supervisor.launch import cpu_mixed_precision
from peco_mm.engine.optimizers import AutocastOptimWrapper
from peco_mm.layers.quantizer import EMAVectorQuantizer, nearest_codes
from peco_mm.tooling import benchmark as bm
from tests.conftest import ROOT
from tests.mim.conftest import TINY_TOKENIZER as TINY_PARTS

TINY_VIT = dict(arch=dict(embed_dims=64, num_layers=2, num_heads=4), img_size=64, patch_size=8)
# 8x down, K = 16: 64 px -> 8x8 codes (the demo ViT's grid), 32 px -> 4x4
TINY_TOKENIZER = dict(type='FrozenPeCoTokenizer', checkpoint='random', **TINY_PARTS)
# stage -> (config, --cfg-options making it tiny, relative tolerance of the first step's loss)
STAGES = {
    # the tokenizer config trains with a plain OptimWrapper; --amp makes it an AmpOptimWrapper
    'tokenizer': ('configs/demo/tokenizer_tiny_photos.py', {
        'model.perceptual': dict(checkpoint=None, allow_random=True, layers=(1, 2),
                                 vit_cfg=TINY_VIT),
        'optim_wrapper.type': 'AmpOptimWrapper', 'optim_wrapper.dtype': 'bfloat16'}, 0.01),
    'peco': ('configs/demo/pretrain_tiny_photos.py',
             {'model.target_generator': TINY_TOKENIZER}, 0.01),
    'peco_mae': ('configs/peco/pretrain_mae_vitb_in1k_800e.py', {
        'model.backbone.arch': dict(_delete_=True, **TINY_VIT['arch']),
        'model.backbone.img_size': 32, 'model.backbone.patch_size': 8,
        'model.neck': dict(type='PeCoMAEDecoder', grid=4, embed_dims=32, num_layers=1,
                           num_heads=4),
        'model.target_generator': TINY_TOKENIZER,
        'train_dataloader.dataset.pipeline.2.size': 32,  # after the flip
        'train_dataloader.dataset.pipeline.3.input_size': 4}, 0.01),
    'upernet': ('configs/demo/upernet_tiny_shapes.py', {}, 0.01),
    # fp16 in the config (mmdet's AMP) -> bf16 on the CPU; the RPN's bf16 scores can pick
    # other proposals to sample than fp32's, so the first step's loss differs more
    'mask_rcnn': ('configs/demo/mask_rcnn_tiny_shapes.py', {}, 0.05),
}
LATER_STEPS_TOL = 0.1  # trajectories drift apart step by step
# aten ops whose inputs must be fp32 under autocast: softmax / log-softmax and the losses
FP32_OPS = ('_softmax', '_safe_softmax', '_log_softmax', 'nll_loss', 'mse_loss', 'l1_loss',
            'smooth_l1_loss', 'binary_cross_entropy')


class DtypeRecorder(TorchDispatchMode):
    """Counts (aten op, dtype of its first tensor argument) of every op that runs."""

    def __init__(self):
        super().__init__()
        self.seen = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t = next((a for a in args if isinstance(a, torch.Tensor)), None)
        self.seen[(func.__name__.split('.')[0], t.dtype if t is not None else None)] += 1
        return func(*args, **(kwargs or {}))


def train_steps(stage: str, native_bf16: bool, steps: int = 2):
    """`steps` training steps of the stage's tiny model on one synthetic batch of 2, with the
    optimizer wrapper the launcher picks on a CPU with / without native bf16. Returns the
    per-step losses, the wrapper and (bf16 only) the dtypes the ops of the first step saw."""
    path, options, _ = STAGES[stage]
    cfg = bm.load_config(str(ROOT / path), options)
    note = cpu_mixed_precision(cfg, native_bf16=native_bf16)
    assert note and ('bf16 autocast' if native_bf16 else 'training in fp32') in note
    torch.manual_seed(0)
    model = bm.build_model(cfg, 'cpu', 2)
    ow = cfg.optim_wrapper.to_dict()
    ow.pop('accumulative_counts', None)
    with bm.quiet_logs():
        optim = build_optim_wrapper(model, ow)
    data = bm.synthetic_batch(cfg, 2)
    losses, recorder = [], DtypeRecorder()
    for i in range(steps):
        torch.manual_seed(i)  # the same proposals / masks / dropout in both precisions
        with recorder if i == 0 and native_bf16 else contextlib.nullcontext():
            log_vars = model.train_step(copy.deepcopy(data), optim)
        losses.append(log_vars)
    return losses, optim, recorder.seen


@pytest.mark.parametrize('stage', list(STAGES))
def test_every_stage_trains_under_cpu_bf16_autocast(stage):
    ref, ref_optim, _ = train_steps(stage, native_bf16=False)
    out, optim, seen = train_steps(stage, native_bf16=True)
    assert type(ref_optim).__name__ == 'OptimWrapper'
    assert isinstance(optim, AutocastOptimWrapper)
    assert all(p.dtype == torch.float32 for p in optim.param_groups[0]['params'])
    # autocast was on: matrix products ran in bf16 ...
    assert any(op in ('addmm', 'mm', 'bmm', 'convolution') and dt == torch.bfloat16
               for op, dt in seen), sorted(seen)
    # ... but softmax, log-softmax and every loss saw fp32 inputs
    low = {(op, dt) for op, dt in seen if dt != torch.float32 and dt is not None
           and any(op.startswith(f) for f in FP32_OPS)}
    assert not low, low
    assert any(op.startswith(FP32_OPS) for op, _ in seen)
    tol = STAGES[stage][2]
    for i, (a, b) in enumerate(zip(ref, out)):
        for key, value in b.items():
            if 'loss' not in key:
                continue
            assert value.dtype in (torch.float32, torch.float64), (key, value.dtype)
            assert math.isfinite(float(value.detach())), (stage, i, key)
        # the first step: same weights, same data; later ones: after different updates
        la, lb = float(a['loss'].detach()), float(b['loss'].detach())
        assert lb == pytest.approx(la, rel=tol if i == 0 else LATER_STEPS_TOL), (stage, i, la, lb)


# ---- the quantizer stays fp32 inside autocast -------------------------------------------------
def near_tie_data(n=512, k=64, d=32, seed=0):
    """Vectors each halfway between two codewords plus a tiny push: fp32 finds the nearer one,
    distances rounded to bf16 often cannot."""
    g = torch.Generator().manual_seed(seed)
    codebook = torch.randn(k, d, generator=g) * 4
    i, j = torch.randint(k, (n,), generator=g), torch.randint(k, (n,), generator=g)
    x = (codebook[i] + codebook[j]) / 2 + 1e-3 * torch.randn(n, d, generator=g)
    return x, codebook


def test_nearest_codes_ignore_autocast():
    x, codebook = near_tie_data()
    ref = nearest_codes(x, codebook)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        got = nearest_codes(x, codebook)
        # the same search with the addmm left to autocast flips codes: the data can tell
        dist_bf16 = torch.addmm((codebook * codebook).sum(1)[None], x, codebook.t(), alpha=-2.0)
    assert dist_bf16.dtype == torch.bfloat16
    assert (dist_bf16.argmin(1) != ref).sum() > 0
    assert torch.equal(got, ref)


def test_quantizer_ema_update_and_loss_are_fp32_under_autocast():
    x, codebook = near_tie_data(n=256)
    z = x.view(4, 8, 8, 32).permute(0, 3, 1, 2).contiguous()  # (B, D, h, w)

    def step(autocast: bool):
        vq = EMAVectorQuantizer(num_embeddings=64, embed_dims=32, init='random',
                                restart_threshold=0.0).train()
        with torch.no_grad():
            vq.embedding.copy_(codebook)
            vq.embed_sum.copy_(codebook)
        zz = z.clone().requires_grad_()
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast), \
                DtypeRecorder() as rec:
            q, codes, loss = vq(zz)
        return vq, codes, loss, rec.seen

    vq_ref, codes_ref, loss_ref, _ = step(False)
    vq, codes, loss, seen = step(True)
    assert torch.equal(codes, codes_ref)
    for name in ('embedding', 'embed_sum', 'cluster_size'):
        buf = getattr(vq, name)
        assert buf.dtype == torch.float32 and torch.equal(buf, getattr(vq_ref, name)), name
    assert loss.dtype == torch.float32 and torch.equal(loss, loss_ref)
    assert not any(dt == torch.bfloat16 for _, dt in seen), sorted(seen)


def test_autocast_wrapper_follows_the_model_device_and_refuses_fp16():
    model = torch.nn.Linear(4, 4)
    optim = AutocastOptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with optim.optim_context(model):
        out = model(torch.randn(2, 4))
        assert torch.is_autocast_enabled('cpu')
    assert out.dtype == torch.bfloat16 and model.weight.dtype == torch.float32
    with pytest.raises(ValueError, match="dtype='float16'.*AmpOptimWrapper"):
        AutocastOptimWrapper(dtype='float16',
                             optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def test_detection_is_the_oneDNN_answer(monkeypatch):
    from peco_mm.utils import precision
    monkeypatch.setattr(torch.ops.mkldnn, '_is_mkldnn_bf16_supported', lambda: True,
                        raising=False)
    assert precision.cpu_has_native_bf16() is True
    monkeypatch.setattr(torch.ops.mkldnn, '_is_mkldnn_bf16_supported', lambda: False,
                        raising=False)
    assert precision.cpu_has_native_bf16() is False


def test_mmcv_roi_align_takes_bf16_on_cpu():
    # torchvision's CPU RoIAlign has no bf16 kernel: the stand-in computes in fp32 and stores
    # in bf16, forward (inside autocast) and backward (bf16 gradients, outside it)
    from mmcv.ops import roi_align
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(2, 8, 16, 16, generator=g)
    rois = torch.tensor([[0, 1.0, 2.0, 9.0, 12.0], [1, 0.5, 0.5, 15.0, 7.5]])
    x32, x16 = feats.clone().requires_grad_(), feats.bfloat16().requires_grad_()
    ref = roi_align(x32, rois, (4, 4), 0.5, 2, 'avg', True)
    out = roi_align(x16, rois.bfloat16(), (4, 4), 0.5, 2, 'avg', True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    grad = torch.randn(ref.shape, generator=g)
    ref.backward(grad)
    out.backward(grad.bfloat16())
    assert x16.grad.dtype == torch.bfloat16
    torch.testing.assert_close(x16.grad.float(), x32.grad, rtol=2e-2, atol=2e-2)
