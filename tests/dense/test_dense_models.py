"""In-process checks of the dense models: the 4-scale pyramid, layer-decay groups of the shipped
UperNet and Mask R-CNN configs, non-square inputs, stock mmdet / mmseg configs with only the
backbone swapped, SyncBN switching, and the paper settings in the shipped configs."""
import math

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config, DictAction
from mmengine.model import convert_sync_batchnorm, revert_sync_batchnorm
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope
from mmengine.runner.checkpoint import load_state_dict

import peco_mm  # noqa: F401
from peco_mm.supervisor.launch import cpu_mixed_precision
from peco_mm.models import PeCoViT, ViTPyramidAdapter, default_pyramid_indices
from tests.conftest import ROOT

CFG = ROOT / 'configs' / 'peco'
TINY_ARCH = dict(embed_dims=64, num_layers=4, num_heads=2)


def tiny(cfg_name: str) -> Config:
    """A shipped config with the ViT shrunk to width 64 / depth 4 and no pretrained file."""
    cfg = Config.fromfile(CFG / cfg_name)
    bb = cfg.model.backbone
    bb.arch, bb.init_cfg, bb.drop_path_rate = dict(TINY_ARCH), None, 0.0
    if cfg.model.type == 'EncoderDecoder':
        bb.img_size = 64
        cfg.model.data_preprocessor.size = (64, 64)  # pads training crops up to this
        cfg.model.decode_head.in_channels = [64] * 4
        cfg.model.decode_head.channels = 32
        cfg.model.auxiliary_head.in_channels = 64
        cfg.model.test_cfg.crop_size, cfg.model.test_cfg.stride = (64, 64), (48, 48)
    else:
        cfg.model.neck.in_channels = [64] * 4
    cpu_mixed_precision(cfg, native_bf16=False)  # fp32, as tools/train.py on a CPU without bf16
    return cfg


def build(cfg: Config):
    init_default_scope(cfg.default_scope)
    from mmengine.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


# ---- the pyramid -------------------------------------------------------------------------
@pytest.mark.parametrize('hw', [(64, 96), (50, 70)])  # non-square; not a multiple of 16
def test_pyramid_strides_channels_and_values(hw):
    torch.manual_seed(0)
    vit = PeCoViT(arch=TINY_ARCH, img_size=64, qkv_bias='qv', rel_pos_bias='per_block',
                  use_abs_pos_emb=False, out_type='featmap', final_norm=False,
                  pyramid=dict(norm_cfg=dict(type='BN'))).eval()
    assert vit.out_indices == [0, 1, 2, 3]
    x = torch.randn(2, 3, *hw)
    outs = vit(x)
    h, w = math.ceil(hw[0] / 16), math.ceil(hw[1] / 16)  # padded to the patch size
    assert [tuple(o.shape) for o in outs] == [
        (2, 64, 4 * h, 4 * w), (2, 64, 2 * h, 2 * w), (2, 64, h, w), (2, 64, h // 2, w // 2)]
    # stride 16 is block 3's map itself, stride 32 its 2x max-pool of block 4's map
    raw = vit.forward_intermediates(x)  # (B, C, h, w) of blocks 1-4
    torch.testing.assert_close(outs[2], raw[2])
    torch.testing.assert_close(outs[3], F.max_pool2d(raw[3], 2))
    # 2x up is one transposed conv: output pixel (2i+a, 2j+b) = W[:, :, a, b]^T x(i, j) + bias
    up = vit.pyramid.upsample_2x[0]
    ref = torch.einsum('bchw,cd->bdhw', raw[1], up.weight[:, :, 1, 0]) + up.bias[:, None, None]
    torch.testing.assert_close(outs[1][:, :, 1::2, 0::2], ref)


def test_default_pyramid_blocks_follow_depth():
    assert default_pyramid_indices(12) == (3, 5, 7, 11)  # blocks 4/6/8/12 (ViT-B)
    assert default_pyramid_indices(24) == (7, 11, 15, 23)  # ViT-L
    assert default_pyramid_indices(32) == (10, 15, 20, 31)  # ViT-H: 32 x 1/3, 1/2, 2/3, 1


@pytest.mark.parametrize('norm', [dict(type='BN'), dict(type='GN', num_groups=8)])
def test_standalone_adapter_norms(norm):
    neck = ViTPyramidAdapter(in_channels=[64] * 4, norm_cfg=norm)
    feats = [torch.randn(2, 64, 3, 5) for _ in range(4)]
    shapes = [tuple(o.shape[2:]) for o in neck(feats)]
    assert shapes == [(12, 20), (6, 10), (3, 5), (1, 2)]


def _feature2pyramid(width: int, norm: dict):
    """mmseg's Feature2Pyramid built on its own, with every weight and BN statistic random."""
    from mmseg.models.necks import Feature2Pyramid
    torch.manual_seed(1)
    ref = Feature2Pyramid(width, rescales=[4, 2, 1, 0.5], norm_cfg=norm).eval()
    for name, t in ref.state_dict().items():
        if t.is_floating_point():
            t.copy_(torch.rand_like(t) + 0.5 if 'running_var' in name else torch.randn_like(t))
    return ref


@pytest.mark.parametrize('norm', [dict(type='BN'), dict(type='GN', num_groups=8)])
def test_adapter_is_mmseg_feature2pyramid(norm):
    """The adapter takes Feature2Pyramid's weights under its names and gives its outputs."""
    from mmseg.models.necks import Feature2Pyramid
    ref = _feature2pyramid(64, norm)
    neck = ViTPyramidAdapter(in_channels=[64] * 4, norm_cfg=norm).eval()
    assert isinstance(neck, Feature2Pyramid)
    neck.load_state_dict(ref.state_dict())  # strict: the same names
    feats = [torch.randn(2, 64, 3, 5) for _ in range(4)]
    for got, want in zip(neck(feats), ref(feats)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_files_with_the_old_adapter_names_load():
    """Weights saved under the adapter's former names (`branches.0.*` the 4x stack,
    `branches.1.*` the 2x conv) load, alone (torch's loader) and inside PeCoViT (mmengine's),
    and give Feature2Pyramid's outputs for those weights."""
    ref = _feature2pyramid(64, dict(type='BN'))
    old = {k.replace('upsample_4x.', 'branches.0.').replace('upsample_2x.0.', 'branches.1.'): v
           for k, v in ref.state_dict().items()}
    assert sorted(old) == sorted(
        ['branches.0.0.weight', 'branches.0.0.bias', 'branches.0.1.weight',
         'branches.0.1.bias', 'branches.0.1.running_mean', 'branches.0.1.running_var',
         'branches.0.1.num_batches_tracked', 'branches.0.3.weight', 'branches.0.3.bias',
         'branches.1.weight', 'branches.1.bias'])
    feats = [torch.randn(2, 64, 3, 5) for _ in range(4)]
    neck = ViTPyramidAdapter(in_channels=64).eval()
    neck.load_state_dict(old)
    for got, want in zip(neck(feats), ref(feats)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    vit = PeCoViT(arch=TINY_ARCH, img_size=64, out_type='featmap', final_norm=False,
                  pyramid=dict(norm_cfg=dict(type='BN'))).eval()
    sd = {k: v for k, v in vit.state_dict().items() if not k.startswith('pyramid.')}
    # mmengine's loader (load_from, resume, init_cfg), strict: nothing missing or left over
    load_state_dict(vit, {**sd, **{f'pyramid.{k}': v for k, v in old.items()}}, strict=True)
    torch.testing.assert_close(vit.pyramid.upsample_2x[0].weight, ref.upsample_2x[0].weight)
    torch.testing.assert_close(vit.pyramid.upsample_4x[1].running_var,
                               ref.upsample_4x[1].running_var)


@pytest.mark.parametrize('kwargs,match', [
    (dict(scales=(4, 2, 1)), r'scales=\(4, 2, 1\); allowed: \(4, 2, 1, 0.5\)'),
    (dict(norm_cfg=dict(type='LN')), "norm_cfg type='LN'; allowed"),
    (dict(in_channels=[64, 32, 64, 64]), 'a ViT gives equal widths')])
def test_adapter_refuses_what_feature2pyramid_cannot_do(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ViTPyramidAdapter(**{'in_channels': 64, **kwargs})


# ---- layer decay for both tasks ------------------------------------------------------------
@pytest.mark.parametrize('cfg_name,rate,lr', [('upernet_vitb_ade20k.py', 0.65, 3e-4),
                                              ('mask_rcnn_vitb_coco.py', 0.75, 4e-4)])
def test_layer_decay_groups_closed_form(cfg_name, rate, lr):
    cfg = tiny(cfg_name)
    model = build(cfg)
    optim = build_optim_wrapper(model, cfg.optim_wrapper).optimizer
    group_of = {id(p): g for g in optim.param_groups for p in g['params']}
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert len(group_of) == len(params)  # every trainable parameter exactly once
    L = 4
    for name, p in params.items():
        g = group_of[id(p)]
        if name.startswith(('backbone.patch_embed', 'backbone.cls_token')):
            scale = rate ** (L + 1)
        elif name.startswith('backbone.blocks.'):
            scale = rate ** (L - int(name.split('.')[2]))
        else:  # pyramid, neck, heads: full lr
            scale = 1.0
        assert g['lr'] == pytest.approx(lr * scale, rel=1e-9), name
        # BEiT's rule: 1-d parameters and the cls token; relative-position tables decay
        no_wd = p.ndim <= 1 or name.endswith('cls_token')
        assert g['weight_decay'] == (0.0 if no_wd else 0.05), name
    # the heads, necks and adapter are all at full lr
    head_names = [n for n in params if not n.startswith('backbone.') or '.pyramid.' in n]
    assert head_names and all(group_of[id(params[n])]['lr'] == pytest.approx(lr)
                              for n in head_names)


# ---- non-square inputs through the shipped models -------------------------------------------
def seg_batch(model, hw=(64, 96), n=2, num_classes=150):
    from mmseg.structures import SegDataSample
    from mmengine.structures import PixelData
    torch.manual_seed(1)
    samples = []
    for _ in range(n):
        s = SegDataSample(metainfo=dict(img_shape=hw, ori_shape=hw, pad_shape=hw))
        s.gt_sem_seg = PixelData(data=torch.randint(0, num_classes, (1, *hw)))
        samples.append(s)
    imgs = [torch.randint(0, 255, (3, *hw), dtype=torch.uint8) for _ in range(n)]
    return model.data_preprocessor(dict(inputs=imgs, data_samples=samples), True)


def det_batch(model, hw=(96, 128), n=2):
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    torch.manual_seed(1)
    samples = []
    for _ in range(n):
        s = DetDataSample(metainfo=dict(img_shape=hw, ori_shape=hw, scale_factor=(1.0, 1.0),
                                        pad_shape=hw, batch_input_shape=hw))
        inst = InstanceData()
        inst.bboxes = torch.tensor([[10., 12., 60., 80.], [70., 20., 120., 90.]])
        inst.labels = torch.tensor([0, 2])
        masks = torch.zeros(2, *hw, dtype=torch.uint8)
        masks[0, 12:80, 10:60] = 1
        masks[1, 20:90, 70:120] = 1
        inst.masks = BitmapMasks(masks.numpy(), *hw)
        s.gt_instances = inst
        samples.append(s)
    imgs = [torch.randint(0, 255, (3, *hw), dtype=torch.uint8) for _ in range(n)]
    return model.data_preprocessor(dict(inputs=imgs, data_samples=samples), True)


def loss_and_grads(model, data):
    model.train()
    losses = model.loss(data['inputs'], data['data_samples'])
    total, _ = model.parse_losses(losses)  # mmengine's sum over every `loss*` entry
    total.backward()
    assert torch.isfinite(total)
    g = model.backbone.blocks[0].attn.qkv.weight.grad
    assert g is not None and g.abs().sum() > 0  # the heads' loss reaches the first block
    return losses


def test_upernet_non_square_train_and_predict():
    model = revert_sync_batchnorm(build(tiny('upernet_vitb_ade20k.py')))
    data = seg_batch(model, hw=(64, 96))
    loss_and_grads(model, data)
    model.eval()
    with torch.no_grad():
        out = model.predict(data['inputs'], data['data_samples'])
    # two 64x64 windows (stride 48) cover 64x96; the overlap is averaged
    assert model.test_cfg.mode == 'slide'
    assert out[0].seg_logits.data.shape == (150, 64, 96)


def test_mask_rcnn_non_square_train_and_predict():
    model = build(tiny('mask_rcnn_vitb_coco.py'))
    losses = loss_and_grads(model, det_batch(model, hw=(96, 128)))
    assert {'loss_rpn_cls', 'loss_cls', 'loss_bbox', 'loss_mask'} <= set(losses)
    model.eval()
    with torch.no_grad():
        data = det_batch(model, hw=(96, 128))
        out = model.predict(data['inputs'], data['data_samples'])
    assert out[0].pred_instances.masks.shape[1:] == (96, 128)


# ---- stock host configs, only the backbone swapped ------------------------------------------
STOCK_DET = """
_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
model = dict(
    backbone=dict(_delete_=True, type='PeCoViT', arch=dict(embed_dims=64, num_layers=4,
                  num_heads=2), img_size=64, out_type='featmap',
                  pyramid=dict(norm_cfg=dict(type='GN', num_groups=8))),
    neck=dict(in_channels=[64] * 4))
"""
STOCK_SEG = """
_base_ = 'mmseg::_base_/models/upernet_r50.py'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
default_scope = 'mmseg'
model = dict(
    pretrained=None,
    data_preprocessor=dict(size=(64, 64)),  # the crop size every mmseg leaf config sets
    backbone=dict(_delete_=True, type='PeCoViT', arch=dict(embed_dims=64, num_layers=4,
                  num_heads=2), img_size=64, out_type='featmap', out_indices=[0, 1, 2, 3]),
    neck=dict(type='ViTPyramidAdapter', in_channels=64),  # the adapter as a standalone neck
    decode_head=dict(in_channels=[64] * 4, channels=32),
    auxiliary_head=dict(in_channels=64, channels=16))
"""


def test_stock_mmdet_config_with_backbone_swapped(tmp_path):
    (tmp_path / 'stock_det.py').write_text(STOCK_DET)
    model = build(Config.fromfile(tmp_path / 'stock_det.py'))
    losses = loss_and_grads(model, det_batch(model, hw=(96, 128)))
    assert {'loss_cls', 'loss_bbox'} <= set(losses)
    assert model.neck.in_channels == [64] * 4


def test_stock_mmseg_config_with_backbone_swapped(tmp_path):
    (tmp_path / 'stock_seg.py').write_text(STOCK_SEG)
    model = revert_sync_batchnorm(build(Config.fromfile(tmp_path / 'stock_seg.py')))
    assert isinstance(model.neck, ViTPyramidAdapter)
    loss_and_grads(model, seg_batch(model, hw=(64, 96), num_classes=19))


# ---- SyncBN switching ----------------------------------------------------------------------
def test_sync_bn_one_key():
    cfg = tiny('upernet_vitb_ade20k.py')
    assert cfg.sync_bn == 'torch'
    # the model itself has plain BN (adapter + heads): single-process / CPU runs need nothing
    model = build(cfg)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and not any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    # what Runner.wrap_model does when distributed with sync_bn='torch': every BN -> SyncBN
    synced = convert_sync_batchnorm(model, cfg.sync_bn)
    assert sum(isinstance(m, torch.nn.SyncBatchNorm) for m in synced.modules()) == len(bns)
    assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in synced.backbone.pyramid.modules())
    # the override: `--cfg-options sync_bn=None` parses to None
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument('--cfg-options', nargs='+', action=DictAction)
    cfg.merge_from_dict(p.parse_args(['--cfg-options', 'sync_bn=None']).cfg_options)
    assert cfg.sync_bn is None


# ---- the paper's settings in the shipped configs --------------------------------------------
def test_upernet_configs_hold_paper_settings():
    cfg = Config.fromfile(CFG / 'upernet_vitb_ade20k.py')
    assert cfg.default_scope == 'mmseg' and cfg.custom_imports.imports == ['peco_mm']
    bb = cfg.model.backbone
    assert (bb.type, bb.arch, bb.img_size, bb.drop_path_rate) == ('PeCoViT', 'base', (512, 512),
                                                                  0.2)
    opt = cfg.optim_wrapper
    assert (opt.optimizer.type, opt.optimizer.lr, opt.optimizer.weight_decay) == ('AdamW', 3e-4,
                                                                                  0.05)
    assert 'momentum' not in opt.optimizer
    assert opt.constructor == 'LayerDecayOptimWrapperConstructor'
    assert opt.paramwise_cfg.layer_decay_rate == 0.65
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size * 8 == 16
    warm, decay = cfg.param_scheduler
    assert (warm.type, warm.end, decay.type, decay.power, decay.begin, decay.end) == (
        'LinearLR', 1500, 'PolyLR', 1.0, 1500, 160000)
    types = [t.type for t in cfg.train_dataloader.dataset.pipeline]
    assert types[:3] == ['LoadImageFromFile', 'LoadAnnotations', 'CheckSegLabels']
    assert {'RandomFlip', 'PhotoMetricDistortion'} <= set(types)
    rr = cfg.train_dataloader.dataset.pipeline[3]
    assert rr.type == 'RandomResize' and rr.ratio_range == (0.5, 2.0)
    assert cfg.model.decode_head.type == 'UPerHead' and cfg.model.auxiliary_head.type == 'FCNHead'
    assert cfg.val_evaluator.iou_metrics == ['mIoU']
    assert 'SyncBN' not in cfg.pretty_text  # BN everywhere; SyncBN only through sync_bn
    large = Config.fromfile(CFG / 'upernet_vitl_ade20k.py')
    assert large.model.backbone.arch == 'large'
    assert large.model.decode_head.in_channels == [1024] * 4
    assert large.model.auxiliary_head.in_channels == 1024
    fpn = Config.fromfile(CFG / 'fpn_vitb_ade20k.py')
    assert fpn.model.neck.type == 'FPN' and fpn.model.neck.in_channels == [768] * 4


def test_detection_configs_hold_paper_settings():
    cfg = Config.fromfile(CFG / 'mask_rcnn_vitb_coco.py')
    assert cfg.default_scope == 'mmdet' and cfg.model.type == 'MaskRCNN'
    bb = cfg.model.backbone
    assert (bb.type, bb.arch, bb.drop_path_rate) == ('PeCoViT', 'base', 0.1)
    assert cfg.model.neck.type == 'FPN' and cfg.model.neck.in_channels == [768] * 4
    opt = cfg.optim_wrapper
    assert (opt.optimizer.type, opt.optimizer.lr, opt.optimizer.weight_decay) == ('AdamW', 4e-4,
                                                                                  0.05)
    assert opt.paramwise_cfg.layer_decay_rate == 0.75
    assert cfg.train_cfg.max_epochs == 12 and cfg.train_dataloader.batch_size * 8 == 16
    assert cfg.param_scheduler[1].milestones == [8, 11]
    resize = [t for t in cfg.train_dataloader.dataset.pipeline if t.type == 'Resize'][0]
    assert resize.scale == (1333, 800) and resize.keep_ratio
    assert cfg.val_evaluator.type == 'CocoMetric' and cfg.val_evaluator.metric == ['bbox', 'segm']
    assert cfg.train_dataloader.dataset.type == 'CheckedCocoDataset'
    large = Config.fromfile(CFG / 'mask_rcnn_vitl_coco.py')
    assert large.model.backbone.arch == 'large' and large.model.neck.in_channels == [1024] * 4
    cascade = Config.fromfile(CFG / 'cascade_mask_rcnn_vitb_coco.py')
    assert cascade.model.type == 'CascadeRCNN' and cascade.model.backbone.type == 'PeCoViT'
    assert cascade.optim_wrapper == cfg.optim_wrapper
