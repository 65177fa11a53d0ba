"""The tokenizer config end to end through tools/train.py and tools/test.py on images the test
writes: a tiny tokenizer (shipped config, tiny overrides) with a perceptual ViT checkpoint in
timm format; codebook health is logged; the test tool reports PSNR/SSIM/usage/probe."""
import re

import torch

from tests.conftest import ROOT, run_tool, scalars

TINY_CFG = """
_base_ = '{root}/configs/peco/tokenizer_vqvae_in1k.py'
cnn = dict(base_channels=8, channel_mult=(1, 2, 2), num_res_blocks=1)
model = dict(encoder=cnn, decoder=cnn,
             quantizer=dict(num_embeddings=64, embed_dims=16, decay=0.9,
                            restart_threshold={restart}),
             perceptual=dict(checkpoint='{percep}', layers=(1, 2), vit_cfg=dict(num_heads=4)))
train_pipeline = [dict(type='LoadImageFromFile'),
                  dict(type='RandomFlip', prob=0.5, direction='horizontal'),
                  dict(type='PackInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(batch_size=6, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root='{data}', data_prefix='train',
                 pipeline=train_pipeline))
test_dataloader = dict(batch_size=6, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root='{data}', data_prefix='val',
                 pipeline=test_pipeline))
test_evaluator = dict(num_embeddings=64, probe_epochs=100,
                      perceptual=dict(checkpoint='{percep}', layers=(1, 2),
                                      vit_cfg=dict(num_heads=4)))
optim_wrapper = dict(optimizer=dict(lr=3e-3))
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=5)]
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters={iters})
default_hooks = dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval={iters}),
                     logger=dict(type='LoggerHook', interval=5))
custom_hooks = [dict(type='CodebookHealthHook', interval=5, usage_threshold=0.99),
                dict(type='ReconstructionVisHook', interval={iters}, num_images=4)]
randomness = dict(seed=0)
log_processor = dict(by_epoch=False)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
"""


def write_percep_ckpt(path):
    from timm.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                            num_classes=0)
    torch.save(vit.state_dict(), path)
    return path


def write_cfg(tmp_path, data, percep, iters=30, restart=0.05):
    cfg = tmp_path / f'tiny_tok_{iters}_{restart}.py'
    cfg.write_text(TINY_CFG.format(root=ROOT, data=data, percep=percep, iters=iters,
                                   restart=restart))
    return cfg


def test_train_then_test_tool(tmp_path, image_folder):
    percep = write_percep_ckpt(tmp_path / 'vit_timm.pth')
    cfg = write_cfg(tmp_path, image_folder, percep)
    wd = tmp_path / 'wd'
    proc = run_tool(['tools/train.py', cfg, '--work-dir', wd])
    recs = scalars(wd)
    pix = [r['loss_pixel'] for r in recs if 'loss_pixel' in r]
    assert len(pix) >= 6 and pix[-1] < 0.8 * pix[0], pix
    assert all(r['loss_percep'] > 0 for r in recs if 'loss_pixel' in r)
    shares = [r['percep_grad_share'] for r in recs if 'percep_grad_share' in r]
    assert len(shares) >= 5 and all(0 < v < 1 for v in shares)  # logged with the losses
    usage = [r['codebook_usage'] for r in recs if 'codebook_usage' in r]
    assert len(usage) >= 6 and all(0 < u <= 1 for u in usage)
    assert any('codebook_perplexity' in r and r['codebook_perplexity'] > 1 for r in recs)
    assert 'codebook usage' in proc.stdout + proc.stderr  # warning below the 99 % threshold
    assert list(wd.glob('*/vis_data/vis_image/reconstruction_30.png'))
    ckpt = wd / 'iter_30.pth'
    out = run_tool(['tools/test.py', cfg, ckpt, '--work-dir', tmp_path / 't'])
    log = out.stdout + out.stderr
    got = {k: float(v) for k, v in re.findall(r'tokenizer/(\w+): ([\d.]+)', log)}
    assert {'psnr', 'ssim', 'perceptual', 'usage', 'perplexity',
            'codeword_probe_acc'} <= set(got), log[-2000:]
    assert 5 < got['psnr'] < 60 and -1 <= got['ssim'] <= 1 and 0 < got['usage'] <= 1
    # the same weights built as a lambda = 0 tokenizer (no perceptual network of its own) get
    # the same perceptual distance: the metric's one network measures every tokenizer
    out0 = run_tool(['tools/test.py', cfg, ckpt, '--work-dir', tmp_path / 't0',
                     '--cfg-options', 'model.perceptual_weight=0'])
    got0 = dict(re.findall(r'tokenizer/(\w+): ([\d.]+)', out0.stdout + out0.stderr))
    assert float(got0['perceptual']) == got['perceptual'] > 0
    # the trained checkpoint loads as a frozen target generator
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    gen = FrozenPeCoTokenizer(str(ckpt))
    assert gen.num_embeddings == 64 and gen.encode(torch.zeros(2, 3, 32, 32)).shape == (2, 8, 8)
    # ... and as the pretraining configs build it, from the file alone (the run stored its
    # config in the checkpoint: 3 stages of 8/16/16 channels, K = 64, D = 16)
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    frozen = FrozenPeCoTokenizer(str(ckpt))
    assert (frozen.num_embeddings, frozen.embed_dims, frozen.downsample) == (64, 16, 4)
    x0 = torch.rand(3, 3, 32, 32) * 2 - 1
    assert torch.equal(frozen.encode(x0), gen.encode(x0))
    # the tools on the same checkpoint: code file and reconstruction grid
    tokenize = _load_tool('tokenize_dataset')
    tokenize.main([str(ckpt), str(image_folder / 'val'), '--out', str(tmp_path / 'codes.npz'),
                   '--img-size', '32', '--batch-size', '5'])
    import numpy as np
    z = np.load(tmp_path / 'codes.npz')
    assert z['codes'].shape == (12, 8, 8) and len(z['files']) == 12
    x = torch.stack([_tool_image(image_folder / 'val' / f) for f in z['files'][:2]])
    assert np.array_equal(z['codes'][:2], gen.encode(x).numpy())
    # the measurement tools on the same checkpoint
    agree = _load_tool('measure_code_agreement').main(
        ['--checkpoint', str(ckpt), '--images', str(image_folder / 'val'), '--img-size', '32',
         '--num', '4'])
    assert agree['codes'] == 4 * 64 and 0.5 < agree['agreement'] <= 1
    shares = _load_tool('measure_grad_share').main(
        ['--perceptual-checkpoint', str(percep), '--layers', '1', '2', '--num-heads', '4',
         '--tokenizer', str(ckpt), '--images', str(image_folder / 'val'), '--img-size', '32',
         '--num', '4', '--lambdas', '1', '10'])
    for r in shares.values():  # a larger lambda, a larger share
        assert 0 < r[1.0] < r[10.0] < 1
    assert shares['sum'][1.0] > shares['mean'][1.0]  # summed over 32 channels, not averaged
    vis = _load_tool('visualize_reconstructions')
    vis.main([str(ckpt), str(image_folder / 'val'), '--out', str(tmp_path / 'grid.png'),
              '--num', '4', '--img-size', '32'])
    from PIL import Image
    assert Image.open(tmp_path / 'grid.png').size == (4 * 34 + 2, 2 * 32 + 6)


def test_missing_perceptual_checkpoint_fails_before_training(tmp_path, image_folder):
    cfg = write_cfg(tmp_path, image_folder, tmp_path / 'no_such_vit.pth', iters=2)
    proc = run_tool(['tools/train.py', cfg, '--work-dir', tmp_path / 'wd'], check=False)
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert 'no_such_vit.pth' in err and 'not found' in err
    assert 'Iter(train)' not in err


def _load_tool(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / 'tools' / f'{name}.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tool_image(path):
    from peco_mm.tooling.images import load_image
    return load_image(str(path), 32)
