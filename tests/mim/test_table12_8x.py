"""Table 12's 8x row end to end at toy size, through tools/train.py: the shipped 8x tokenizer
config (112 px) trains a tiny tokenizer, whose checkpoint the shipped 8x pretraining config
(224 px ViT, 112 px tokenizer view) then pretrains a tiny ViT on. The shipped pipelines run
unchanged; only the model widths, the data and the loop length are toy-sized."""
import math
import os.path as osp

from mmengine.config import Config

from tests.conftest import run_tool, scalars
from tests.mim.conftest import REPO

LOADER = ("dict(batch_size=4, num_workers=0, persistent_workers=False, pin_memory=False, "
          "dataset=dict(_delete_=True, type='CustomDataset', data_root={root!r}, "
          "with_label=False, pipeline=_base_.train_pipeline))")
LOOP = ("train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters={iters})\n"
        "param_scheduler = []\n"
        "default_hooks = dict(logger=dict(interval=1), checkpoint=dict(by_epoch=False, "
        "interval={iters}))\n"
        "custom_hooks = []\n"
        "log_processor = dict(by_epoch=False)\n"
        "randomness = dict(seed=0)\n")
TOKENIZER = """_base_ = {base!r}
cnn = dict(base_channels=8, channel_mult=(1, 2, 2, 4), num_res_blocks=1)
model = dict(encoder=cnn, decoder=cnn, quantizer=dict(num_embeddings=16, embed_dims=16),
             perceptual_weight=0.0)
train_dataloader = {loader}
"""
PRETRAIN = """_base_ = {base!r}
model = dict(backbone=dict(arch='test', drop_path_rate=0.0),
             target_generator=dict(checkpoint={tokenizer!r}, channels_last=False))
train_dataloader = {loader}
"""


def write(path, text, iters):
    path.write_text(text + LOOP.format(iters=iters))
    return path


def test_8x_tokenizer_then_pretraining_on_its_codes(tmp_path, images):
    root = images[0]
    loader = LOADER.format(root=root)
    tok_cfg = write(tmp_path / 'tok8x.py', TOKENIZER.format(
        base=osp.join(REPO, 'configs/peco/tokenizer_vqvae_8x_in1k.py'), loader=loader), 3)
    run_tool(['tools/train.py', tok_cfg, '--work-dir', tmp_path / 'tok'])
    tokenizer = tmp_path / 'tok' / 'iter_3.pth'
    assert tokenizer.exists()

    pre_cfg = write(tmp_path / 'pre8x.py', PRETRAIN.format(
        base=osp.join(REPO, 'configs/peco/pretrain_8x_vitb_in1k_300e.py'),
        tokenizer=str(tokenizer), loader=loader), 2)
    run_tool(['tools/train.py', pre_cfg, '--work-dir', tmp_path / 'pre'])
    losses = [r['loss'] for r in scalars(tmp_path / 'pre') if 'loss' in r]
    # cross-entropy over the tokenizer's K = 16 codes, near ln 16 at the start
    assert len(losses) == 2 and all(abs(v - math.log(16)) < 1.5 for v in losses), losses
    assert (tmp_path / 'pre' / 'iter_2.pth').exists()

    # what made it fit: the shipped config's 112 px tokenizer view of the 224 px crop (with
    # the 16x config's single view the grids differ, 28 x 28 against 14 x 14: test_mim_units)
    crop = [t for t in Config.fromfile(osp.join(
        REPO, 'configs/peco/pretrain_8x_vitb_in1k_300e.py')).train_dataloader.dataset.pipeline
        if t['type'] == 'RandomResizedCropAndInterpolationWithTwoPic']
    assert len(crop) == 1 and (crop[0]['size'], crop[0]['second_size']) == (224, 112)
