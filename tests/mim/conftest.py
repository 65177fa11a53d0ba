"""Shared pieces of the MIM tests: 32 px images split into two halves of palette colours, and
a tiny tokenizer checkpoint whose 16 codewords are k-means centres of its encoder's outputs on
those images, so codes depend on colour and layout: a masked patch's code is predictable from
the visible patches and its position, the MIM task in miniature."""
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import run_tool as shared_run_tool
from tests.conftest import scalars

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY_VIT = 'test'  # PeCoViT's tiny preset: 64 wide, 2 blocks, 4 heads
# 32 px -> 4x4 codes (8x down), K = 16
TINY_CNN = dict(base_channels=16, channel_mult=(1, 2, 2, 4), num_res_blocks=1)
TINY_TOKENIZER = dict(encoder=dict(type='CNNEncoder', **TINY_CNN),
                      decoder=dict(type='CNNDecoder', **TINY_CNN),
                      quantizer=dict(type='EMAVectorQuantizer', embed_dims=16, num_embeddings=16))
PALETTE = np.array([[230, 25, 75], [60, 180, 75], [0, 130, 200], [245, 240, 240]], np.uint8)


def halves_images(n: int, seed: int = 0) -> np.ndarray:
    """(n, 32, 32, 3) uint8 RGB: two halves (top/bottom or left/right) of palette colours."""
    rng = np.random.default_rng(seed)
    imgs = np.empty((n, 32, 32, 3), np.uint8)
    for img in imgs:
        a, b = PALETTE[rng.integers(0, len(PALETTE), 2)]
        img[:16], img[16:] = a, b
        if rng.random() < 0.5:
            img[...] = img.transpose(1, 0, 2).copy()
    return imgs


def to_tokenizer_input(imgs: np.ndarray) -> torch.Tensor:
    """(N, H, W, 3) uint8 RGB -> (N, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 127.5 - 1


@pytest.fixture(autouse=True)
def mmpretrain_scope():
    """PeCo lives in the mmpretrain scope; don't inherit whatever scope another test left."""
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield


@pytest.fixture(scope='session')
def images(tmp_path_factory):
    from PIL import Image
    root = tmp_path_factory.mktemp('images')
    imgs = halves_images(64)
    for i, img in enumerate(imgs):
        Image.fromarray(img).save(root / f'{i:03d}.png')
    return str(root), imgs


def with_quantizer(**quantizer) -> dict:
    """`TINY_TOKENIZER` with other quantizer arguments."""
    return {**TINY_TOKENIZER, 'quantizer': dict(TINY_TOKENIZER['quantizer'], **quantizer)}


def fitted_tokenizer(imgs: np.ndarray):
    """A tiny PeCoTokenizer (with decoder), codebook = k-means of its encoder outputs."""
    from peco_mm.tokenizer.tokenizer import PeCoTokenizer
    torch.manual_seed(0)
    tok = PeCoTokenizer(**with_quantizer(init='kmeans'), perceptual_weight=0.0,
                        channels_last=False)
    tok.init_weights()
    with torch.no_grad():
        z = tok.encoder(to_tokenizer_input(imgs))  # (N, D, 4, 4)
        tok.quantizer.initialise_codebook(z.permute(0, 2, 3, 1).reshape(-1, z.shape[1]))
    return tok.eval()


def save_tokenizer(tok, path: str) -> str:
    """As tools/train.py saves it: the state dict and the config text in meta.cfg."""
    from mmengine.config import Config
    cfg = Config(dict(model=dict(type='PeCoTokenizer', **TINY_TOKENIZER)))
    torch.save({'state_dict': tok.state_dict(), 'meta': {'cfg': cfg.pretty_text}}, path)
    return path


@pytest.fixture(scope='session')
def tokenizer_ckpt(images, tmp_path_factory):
    """(path, tokenizer): saved like a tools/train.py checkpoint."""
    tok = fitted_tokenizer(images[1])
    path = save_tokenizer(tok, str(tmp_path_factory.mktemp('tok') / 'tokenizer.pth'))
    return path, tok


MASK_STEP = ("dict(type='BlockwiseMaskGenerator', input_size=4, num_masking_patches=6, "
             "min_num_patches=2),")
MAE_MASK_STEP = "dict(type='RandomMaskGenerator', input_size=4, mask_ratio=0.75),"


def write_config(path, base: str, tokenizer_ckpt: str, data_root: str, iters: int = 30,
                 mask: str = MASK_STEP, model_extra: str = '') -> str:
    """A tiny config on top of a shipped one: 32 px, patch 8, 6 of 16 patches masked."""
    text = f'''
_base_ = {osp.join(REPO, 'configs', 'peco', base)!r}
model = dict(
    backbone=dict(arch={TINY_VIT!r}, img_size=32, patch_size=8,
                  drop_path_rate=0.0, use_abs_pos_emb=True),
    target_generator=dict(checkpoint={tokenizer_ckpt!r}, channels_last=False),
    {model_extra})
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=32, second_size=32,
         interpolation='bicubic', second_interpolation='bicubic', scale=(1.0, 1.0),
         ratio=(1.0, 1.0)),
    {mask}
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=16, num_workers=0, persistent_workers=False,
                        pin_memory=False,
                        dataset=dict(_delete_=True, type='CustomDataset', data_root={data_root!r},
                                     with_label=False, pipeline=train_pipeline))
optim_wrapper = dict(optimizer=dict(lr=3e-3))
param_scheduler = []
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters={iters})
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval={iters}, max_keep_ckpts=1))
randomness = dict(seed=0)
'''
    with open(path, 'w') as f:
        f.write(text)
    return str(path)


def run_tool(args: list, timeout: int = 300) -> subprocess.CompletedProcess:
    """The shared runner, returning the result whatever the exit code."""
    return shared_run_tool(args, timeout=timeout, env=dict(PYTHONWARNINGS='ignore'),
                           check=False)


def train(cfg: str, work_dir: str, extra_args=()) -> subprocess.CompletedProcess:
    res = run_tool([sys.executable, 'tools/train.py', cfg, '--work-dir', work_dir,
                    *extra_args])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def read_scalars(work_dir: str) -> list[dict]:
    return scalars(work_dir)
