"""PeCoTimeSformer: at initialisation it is the image PeCoViT applied to each frame; it loads
an image checkpoint through PeCoViT's path; layer decay sees its temporal parts; it drops into
mmaction2's own TimeSformer config; and a tiny model trains on videos the test writes and is
scored by mmaction2's AccMetric through tools/train.py."""
import textwrap

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from tests.conftest import ROOT, run_tool, scalars

from peco_mm.engine.optimizers.layer_decay import layer_decay_param_groups
from peco_mm.models import PeCoTimeSformer, PeCoViT

# BEiT-style: q/v bias, per-block relative-position bias, layer scale (PeCo's downstream ViT)
TINY = dict(arch='test', img_size=32, patch_size=16, qkv_bias='qv', use_abs_pos_emb=False,
            rel_pos_bias='per_block', layer_scale_init_value=0.1)
STOCK = 'mmaction::recognition/timesformer/timesformer_divST_8xb8-8x32x1-15e_kinetics400-rgb.py'


def image_twin(video: PeCoTimeSformer, **kwargs) -> PeCoViT:
    """The image PeCoViT holding the video model's image weights."""
    image = PeCoViT(**{**TINY, **kwargs}).eval()
    missing, unexpected = image.load_state_dict(video.state_dict(), strict=False)
    assert not missing
    assert unexpected and all(k.startswith(('temporal_blocks.', 'time_embed'))
                              for k in unexpected)
    return image


def per_frame(image: PeCoViT, clips: torch.Tensor) -> torch.Tensor:
    """The image model on each frame of (B, C, T, H, W), averaged over frames: (B, C). With
    pooled patch tokens, the pooling runs over the clip's patches before fc_norm."""
    frames = [clips[:, :, t] for t in range(clips.shape[2])]
    if image.out_type == 'cls_token':
        return torch.stack([image(f)[0] for f in frames]).mean(0)
    pooled = torch.stack([image.forward_features(f)[:, 1:].mean(1) for f in frames]).mean(0)
    return image.fc_norm(pooled)


@pytest.mark.parametrize('out_type,final_norm', [('cls_token', True), ('avg_featmap', False)])
def test_equals_image_model_per_frame_at_init(out_type, final_norm):
    torch.manual_seed(0)
    video = PeCoTimeSformer(num_frames=2, out_type=out_type, final_norm=final_norm, **TINY)
    video.init_weights()
    video.eval()
    # move the image weights off their init, so the comparison is not between near-zeros
    with torch.no_grad():
        for name, p in video.named_parameters():
            if not name.startswith(('temporal_blocks.', 'time_embed')):
                p.add_(0.05 * torch.randn_like(p))
    image = image_twin(video, out_type=out_type, final_norm=final_norm)
    clips = torch.randn(2, 3, 2, 32, 32)
    with torch.no_grad():
        got, want = video(clips), per_frame(image, clips)
        tokens = video.forward_features(clips)  # (B, T, 1+N, C)
        for t in range(2):  # every token of every frame, cls included
            assert (tokens[:, t] - image.forward_features(clips[:, :, t])).abs().max() < 1e-5
    assert got.shape == (2, 64)
    assert (got - want).abs().max() < 1e-5
    assert want.std() > 0.1
    # the frames differ, so per-frame outputs differ: the average is not one frame's output
    assert (image(clips[:, :, 0])[0] - want).abs().max() > 1e-2
    # the temporal branch is live: a non-zero temporal projection changes the output, and so
    # does a temporal position embedding
    with torch.no_grad():
        video.temporal_blocks[0].temporal_fc.weight.normal_(0, 0.1)
        assert (video(clips) - want).abs().max() > 1e-3
        video.temporal_blocks[0].temporal_fc.weight.zero_()
        video.time_embed.normal_(0, 0.1)
        assert (video(clips) - want).abs().max() > 1e-3


def test_loads_a_pretraining_checkpoint_through_init_cfg(tmp_path, monkeypatch):
    # a PeCo pretraining checkpoint: one shared relative-position table, keys under 'backbone.'
    torch.manual_seed(1)
    pre = PeCoViT(**{**TINY, 'rel_pos_bias': 'shared'})
    pre.init_weights()
    path = tmp_path / 'pretrain.pth'
    torch.save(dict(state_dict={f'backbone.{k}': v for k, v in pre.state_dict().items()}), path)
    init_cfg = dict(type='Pretrained', prefix='backbone.', checkpoint=str(path))
    video = PeCoTimeSformer(num_frames=2, init_cfg=init_cfg, **TINY)
    logged = []
    monkeypatch.setattr('mmengine.logging.print_log',
                        lambda msg, logger=None, level=20: logged.append((level, msg)))
    video.init_weights()
    fresh = [msg for level, msg in logged if 'start fresh' in msg]  # said once, not a warning
    n_temporal = len(video.temporal_blocks.state_dict()) + 1
    assert len(fresh) == 1 and all(level == 20 for level, _ in logged), logged
    assert f'temporal_blocks, time_embed ({n_temporal} tensors) start fresh' in fresh[0]
    assert 'starts as the image model on each frame' in fresh[0]
    video.eval()
    table = pre.rel_pos_bias.relative_position_bias_table
    for blk in video.blocks:  # the shared table copied into every block, as BEiT fine-tunes
        assert torch.equal(blk.rel_pos_bias.relative_position_bias_table, table)
    assert torch.equal(video.blocks[1].attn.qkv.weight, pre.blocks[1].attn.qkv.weight)
    assert torch.equal(video.blocks[1].gamma_2, pre.blocks[1].gamma_2)
    assert not video.time_embed.any() and not video.temporal_blocks[1].temporal_fc.weight.any()
    image = PeCoViT(**TINY, init_cfg=init_cfg)
    image.init_weights()
    image.eval()
    clips = torch.randn(1, 3, 3, 32, 32)  # 3 frames: the 2-frame time_embed is resized
    with torch.no_grad():
        assert (video(clips) - per_frame(image, clips)).abs().max() < 1e-5


def build_recognizer(cfg):
    import mmaction.registry
    with DefaultScope.overwrite_default_scope('mmaction'):
        return mmaction.registry.MODELS.build(cfg)


def tiny_stock_model():
    """mmaction2's own TimeSformer config, only the backbone swapped (and shrunk)."""
    cfg = Config.fromstring(f'_base_ = {STOCK!r}', '.py').model
    cfg.backbone = dict(type='PeCoTimeSformer', num_frames=2, **TINY)
    cfg.cls_head.update(in_channels=64, num_classes=5)
    return cfg


def test_layer_decay_groups_cover_the_temporal_parts():
    model = build_recognizer(tiny_stock_model())
    groups = layer_decay_param_groups(model, base_lr=1.0, weight_decay=0.05,
                                      layer_decay_rate=0.5)
    where = {n: g for g in groups for n in g['param_names']}
    assert set(where) == {n for n, p in model.named_parameters() if p.requires_grad}
    L = 2  # blocks; depths 0 .. L + 1, lr scale 0.5 ** (L + 1 - depth)
    for i in range(L):
        temporal = where[f'backbone.temporal_blocks.{i}.attn.qkv.weight']
        spatial = where[f'backbone.blocks.{i}.attn.qkv.weight']
        assert temporal is spatial and temporal['lr_scale'] == 0.5 ** (L - i)
        assert where[f'backbone.temporal_blocks.{i}.temporal_fc.weight']['weight_decay'] == 0.05
        assert where[f'backbone.temporal_blocks.{i}.temporal_fc.bias']['weight_decay'] == 0.0
    time_embed = where['backbone.time_embed']
    assert time_embed['lr_scale'] == 0.5 ** (L + 1) and time_embed['weight_decay'] == 0.0
    assert where['backbone.patch_embed.proj.weight']['lr_scale'] == 0.5 ** (L + 1)
    assert where['cls_head.fc_cls.weight']['lr_scale'] == 1.0


def test_stock_mmaction_timesformer_config_with_backbone_swapped():
    from mmaction.structures import ActionDataSample
    torch.manual_seed(0)
    model = build_recognizer(tiny_stock_model())
    model.init_weights()
    clips = torch.randint(0, 256, (2, 1, 3, 2, 32, 32), dtype=torch.uint8)  # (B, crops, CTHW)
    samples = [ActionDataSample().set_gt_label(i) for i in (1, 3)]
    data = model.data_preprocessor(dict(inputs=list(clips), data_samples=samples), True)
    losses = model(**data, mode='loss')
    # a freshly initialised 5-way head: cross-entropy near ln 5
    assert abs(losses['loss_cls'].item() - np.log(5)) < 0.5
    losses['loss_cls'].backward()
    assert model.backbone.temporal_blocks[0].temporal_fc.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        preds = model(**model.data_preprocessor(dict(inputs=list(clips), data_samples=samples)),
                      mode='predict')
    scores = torch.stack([p.pred_score for p in preds])
    assert scores.shape == (2, 5) and torch.allclose(scores.sum(1), torch.ones(2))


def write_videos(root, per_class, seed):
    """Colour clips: class 0 reddish, class 1 bluish, noise on top; 'file label' lists."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for label, colour in enumerate([(40, 40, 200), (200, 40, 40)]):  # BGR
        for k in range(per_class):
            name = f'c{label}_{k}.mp4'
            writer = cv2.VideoWriter(str(root / name), cv2.VideoWriter_fourcc(*'mp4v'), 8,
                                     (40, 40))
            assert writer.isOpened()
            for _ in range(6):
                noise = rng.integers(-30, 30, (40, 40, 3))
                writer.write(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8))
            writer.release()
            lines.append(f'{name} {label}')
    (root / 'list.txt').write_text('\n'.join(lines) + '\n')
    return root / 'list.txt'


TINY_VIDEO_CFG = '''
_base_ = [{base!r}]
model = dict(backbone=dict(arch='test', img_size=32, num_frames=2, drop_path_rate=0.0,
                           init_cfg=None),
             cls_head=dict(in_channels=64, num_classes=2))
pipeline = [dict(type='DecordInit'),
            dict(type='SampleFrames', clip_len=2, frame_interval=2, num_clips=1,
                 test_mode={test_mode}),
            dict(type='DecordDecode'), dict(type='Resize', scale=(32, 32), keep_ratio=False),
            dict(type='FormatShape', input_format='NCTHW'), dict(type='PackActionInputs')]
loader = dict(batch_size=4, num_workers=0, persistent_workers=False)
train_dataloader = dict(loader, dataset=dict(ann_file={train!r}, data_prefix=dict(
    video={train_root!r}), pipeline=pipeline))
val_dataloader = dict(loader, dataset=dict(ann_file={val!r}, data_prefix=dict(
    video={val_root!r}), pipeline=pipeline))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr=2e-3))
param_scheduler = None
train_cfg = dict(max_epochs=3, val_interval=3)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=3))
'''


def test_tiny_video_model_trains_and_is_scored_by_mmaction_metric(tmp_path):
    train = write_videos(tmp_path / 'train', per_class=4, seed=0)
    val = write_videos(tmp_path / 'val', per_class=2, seed=1)
    cfg = tmp_path / 'timesformer_tiny.py'
    cfg.write_text(textwrap.dedent(TINY_VIDEO_CFG.format(
        base=str(ROOT / 'configs/peco/timesformer_vitb_k400.py'), test_mode='True',
        train=str(train), train_root=str(train.parent), val=str(val),
        val_root=str(val.parent))))
    wd = tmp_path / 'wd'
    run_tool(['tools/train.py', cfg, '--work-dir', wd, '--cfg-options', 'randomness.seed=0'])
    recs = scalars(wd)
    losses = [r['loss'] for r in recs if 'loss' in r]
    assert len(losses) == 6  # 3 epochs x 2 steps of 4 clips
    val_rec = [r for r in recs if 'acc/top1' in r][-1]
    # two colours, 6 steps: the AccMetric of mmaction2 sees both val classes right
    assert val_rec['acc/top1'] == 1.0, (val_rec, losses)
    assert losses[-1] < losses[0]
    assert (wd / 'epoch_3.pth').exists()


def test_fp32_head_lets_mmaction_score_bf16_autocast():
    """Under bf16 autocast mmaction2's TimeSformerHead fails in its numpy accuracy; the
    shipped configs' TimeSformerHeadFP32 (same weights) gives fp32 scores and the same loss."""
    from mmaction.structures import ActionDataSample
    head_cfg = dict(in_channels=16, num_classes=3)
    stock = build_recognizer(dict(type='TimeSformerHead', **head_cfg))
    ours = build_recognizer(dict(type='TimeSformerHeadFP32', **head_cfg))
    ours.load_state_dict(stock.state_dict())
    x = torch.randn(4, 16)
    samples = [ActionDataSample().set_gt_label(i % 3) for i in range(4)]
    with torch.autocast('cpu', dtype=torch.bfloat16):
        with pytest.raises(TypeError, match='BFloat16'):
            stock.loss(x, samples)
        scores = ours(x)
        losses = ours.loss(x, samples)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(losses['loss_cls'], stock.loss(x, samples)['loss_cls'],
                               atol=2e-2, rtol=0)  # bf16 logits against fp32 ones
