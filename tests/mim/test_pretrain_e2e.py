"""PeCo and PeCo_MAE pretraining end to end through tools/train.py on tiny models, then the
checkpoint into a downstream PeCoViT (init_cfg and converter) and the visualisation tool."""
import os.path as osp
import sys

import numpy as np
import pytest
import torch

from conftest import (MAE_MASK_STEP, REPO, TINY_VIT, read_scalars, run_tool, to_tokenizer_input,
                      train, write_config)

from peco_mm.checkpoint import checkpoints_through_gate, read_checkpoint

pytestmark = pytest.mark.slow  # PeCo / PeCo_MAE trainings, one on two processes

MAE_NECK = "neck=dict(grid=4, embed_dims=32, num_layers=1, num_heads=4)"


def majority_rate(tok, imgs) -> float:
    codes = tok.encode(to_tokenizer_input(imgs))
    return torch.bincount(codes.flatten()).max().item() / codes.numel()


def check_learning(work_dir: str, chance: float) -> None:
    s = [r for r in read_scalars(work_dir) if 'loss' in r]
    assert len(s) >= 25
    loss = [r['loss'] for r in s]
    acc = [r['mim_acc'] for r in s]
    assert np.mean(loss[:5]) - np.mean(loss[-5:]) > 0.3, loss
    assert np.mean(acc[-10:]) > chance + 0.08, (acc, chance)


@pytest.fixture(scope='module')
def peco_run(images, tokenizer_ckpt, tmp_path_factory):
    tmp = tmp_path_factory.mktemp('peco')
    cfg = write_config(tmp / 'cfg.py', 'pretrain_vitb_in1k_300e.py', tokenizer_ckpt[0],
                       images[0])
    train(cfg, str(tmp / 'work'))
    return cfg, str(tmp / 'work'), str(tmp / 'work' / 'iter_30.pth')


def test_peco_loss_falls_and_masked_accuracy_beats_chance(peco_run, images, tokenizer_ckpt):
    check_learning(peco_run[1], majority_rate(tokenizer_ckpt[1], images[1]))


def test_tokenizer_never_trains(peco_run, tokenizer_ckpt):
    state = read_checkpoint(peco_run[2], map_location='cpu')['state_dict']
    tok_state = tokenizer_ckpt[1].state_dict()
    keys = [k for k in state if k.startswith('target_generator.')]
    assert keys and not any('decoder.' in k for k in keys)  # built without the decoder
    for k in keys:  # weights and EMA buffers alike
        assert torch.equal(state[k], tok_state[k[len('target_generator.'):]]), k


def build_pretrained(cfg_path: str, ckpt: str):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS
    cfg = Config.fromfile(cfg_path)
    init_default_scope('mmpretrain')
    model = MODELS.build(cfg.model)
    with checkpoints_through_gate():  # as PeCo's tools load a run's checkpoint
        load_checkpoint(model, ckpt, map_location='cpu', strict=True, logger='silent')
    return model.eval()


def test_checkpoint_initialises_downstream_vit(peco_run):
    from peco_mm.models import PeCoViT
    from peco_mm.checkpoint import convert_state_dict
    pre = build_pretrained(peco_run[0], peco_run[2])
    # the fine-tuning config's backbone: per-block tables copied from the shared one
    opts = dict(arch=TINY_VIT, img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=True,
                rel_pos_bias='per_block', layer_scale_init_value=0.1, out_type='avg_featmap')
    down = PeCoViT(**opts, init_cfg=dict(type='Pretrained', checkpoint=peco_run[2],
                                         prefix='backbone.'))
    down.init_weights()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = pre.backbone.forward_features(x)
        torch.testing.assert_close(down.eval().forward_features(x), ref)
        # and through the converter (tools/convert_checkpoint.py's function)
        sd, _ = convert_state_dict(read_checkpoint(peco_run[2], map_location='cpu'),
                                   per_block_rel_pos=True)
        conv = PeCoViT(**opts)
        missing, unexpected = conv.load_state_dict(sd, strict=False)
        assert set(unexpected) <= {'mask_token'}  # kept for MIM users; unused downstream
        assert set(missing) <= {'fc_norm.weight', 'fc_norm.bias'}
        torch.testing.assert_close(conv.eval().forward_features(x), ref)
    # a real difference is detected: the pretraining tables are not all zero
    assert pre.backbone.rel_pos_bias.relative_position_bias_table.abs().sum() > 0


def test_visualize_mim_writes_original_masked_reconstruction(peco_run, images, tokenizer_ckpt,
                                                             tmp_path):
    from PIL import Image
    sys.path.insert(0, osp.join(REPO, 'tools'))
    import visualize_mim
    paths = [osp.join(images[0], f'{i:03d}.png') for i in (0, 1)]
    visualize_mim.main([peco_run[0], peco_run[2], *paths, '--out', str(tmp_path),
                        '--device', 'cpu', '--tokenizer', tokenizer_ckpt[0]])
    grid = np.asarray(Image.open(tmp_path / 'grid.png'))
    # 2 rows x (original | masked | reconstruction), 32 px cells, 2 px white gutters
    assert grid.shape == (2 * 34 + 2, 3 * 34 + 2, 3)
    assert (grid[:2] == 255).all() and (grid[:, 34:36] == 255).all()

    def cell(i, j):
        return grid[2 + 34 * i:34 + 34 * i, 2 + 34 * j:34 + 34 * j]

    np.testing.assert_array_equal(cell(0, 0), images[1][0])
    masked = (cell(0, 1) == 127).all(-1)  # 8x8 grey patches
    assert masked.sum() == 6 * 64
    recon = cell(0, 2).astype(float)
    tok = tokenizer_ckpt[1]
    with torch.no_grad():
        own = tok.decode(tok.encode(to_tokenizer_input(images[1][:1])))[0]
    own = ((own + 1) * 127.5).permute(1, 2, 0).numpy()
    # visible patches keep the tokenizer's own codes: their decoding agrees there
    vis = ~masked
    assert np.abs(recon[vis] - own[vis]).mean() < 40


def test_peco_mae_trains(images, tokenizer_ckpt, tmp_path):
    cfg = write_config(tmp_path / 'cfg.py', 'pretrain_mae_vitb_in1k_800e.py', tokenizer_ckpt[0],
                       images[0], mask=MAE_MASK_STEP, model_extra=MAE_NECK)
    train(cfg, str(tmp_path / 'work'))
    check_learning(str(tmp_path / 'work'), majority_rate(tokenizer_ckpt[1], images[1]))
    state = read_checkpoint(tmp_path / 'work' / 'iter_30.pth', map_location='cpu')['state_dict']
    assert 'backbone.pos_embed' in state and 'neck.mask_token' in state


@pytest.mark.parametrize('base, extra', [
    ('pretrain_vitb_in1k_300e.py', {}),
    ('pretrain_mae_vitb_in1k_800e.py', dict(mask=MAE_MASK_STEP, model_extra=MAE_NECK)),
], ids=['peco', 'peco_mae'])
def test_two_process_cpu_training(images, tokenizer_ckpt, tmp_path, base, extra):
    cfg = write_config(tmp_path / 'cfg.py', base, tokenizer_ckpt[0], images[0], iters=2,
                       **extra)
    res = run_tool(['bash', 'tools/dist_train.sh', cfg, '2', '--work-dir',
                    str(tmp_path / 'work')])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert osp.isfile(tmp_path / 'work' / 'iter_2.pth')
