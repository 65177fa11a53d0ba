"""Errors that used to be bare: a batch larger than the training set with drop_last gives a
sentence with both numbers (not `StopIteration`), and tools/tokenize_dataset.py takes the
architecture that its message asks for (--arch)."""
import numpy as np
import pytest
import torch

from tests.conftest import load_tool
from tests.reliability.conftest import write_cls


def test_batch_larger_than_the_dataset(tmp_path, cls_data, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=2)  # 3 classes x 4 = 12 images
    opts = {'train_dataloader.batch_size': 16, 'train_dataloader.drop_last': True}
    with pytest.raises(ValueError) as err:
        run(str(cfg), str(tmp_path / 'work'), opts)
    assert str(err.value).startswith('train_dataloader gives no batch: the dataset has 12 '
                                     'samples and batch_size=16 with drop_last=True. Lower '
                                     'train_dataloader.batch_size (at most 12)')


def test_tokenize_dataset_takes_the_architecture(tmp_path, capsys):
    from PIL import Image

    from peco_mm.tokenizer import PeCoTokenizer
    vit = dict(arch='test', img_size=32, patch_size=8)
    torch.manual_seed(0)
    tok = PeCoTokenizer(encoder=dict(type='ViTEncoder', **vit),
                        decoder=dict(type='ViTDecoder', **vit),
                        quantizer=dict(type='EMAVectorQuantizer', num_embeddings=32,
                                       embed_dims=16), perceptual_weight=0.0)
    ckpt = tmp_path / 'vit_tok.pth'
    torch.save(tok.state_dict(), ckpt)  # a bare state dict: no config, no CNN encoder
    (tmp_path / 'img').mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
            tmp_path / 'img' / f'{i}.png')
    tool = load_tool('tokenize_dataset')
    common = [str(ckpt), str(tmp_path / 'img'), '--img-size', '32', '--workers', '0',
              '--device', 'cpu']
    with pytest.raises(SystemExit) as err:
        tool.main(common + ['--out', str(tmp_path / 'a.npz')])
    assert 'the architecture is unknown' in str(err.value)
    assert 'Give it with --arch PART=CONFIG' in str(err.value)
    tool.main(common + ['--out', str(tmp_path / 'codes.npz'), '--arch',
                        "encoder={'type': 'ViTEncoder', 'arch': 'test', 'img_size': 32, "
                        "'patch_size': 8}", "quantizer={'type': 'EMAVectorQuantizer', "
                        "'num_embeddings': 32, 'embed_dims': 16}"])
    out = np.load(tmp_path / 'codes.npz')
    assert out['codes'].shape == (3, 4, 4)
    from peco_mm.tooling.images import load_images
    files = [str(tmp_path / 'img' / f) for f in out['files']]
    with torch.no_grad():  # the tokenizer's own codes of each image
        np.testing.assert_array_equal(out['codes'], tok.eval().encode(load_images(files, 32)))
    with pytest.raises(SystemExit, match=r'--arch encoders: not a tokenizer part; allowed: '
                                         r'encoder, decoder, quantizer'):
        tool.main(common + ['--out', str(tmp_path / 'b.npz'), '--arch', 'encoders={}'])
    # the old flat arguments of the same architecture give the same codes
    tool.main(common + ['--out', str(tmp_path / 'flat.npz'), '--arch', 'encoder_type=vit',
                        'embed_dims=16', 'num_embeddings=32',
                        "vit_cfg={'arch': 'test', 'img_size': 32, 'patch_size': 8}"])
    np.testing.assert_array_equal(np.load(tmp_path / 'flat.npz')['codes'], out['codes'])
