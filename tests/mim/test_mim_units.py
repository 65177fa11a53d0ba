"""MIM parts on tiny models: masks, head, static-shape gathering, frozen targets, bad input."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import ndimage

from conftest import REPO, TINY_VIT

from peco_mm.datasets.mim_transforms import (BlockwiseMaskGenerator, RandomMaskGenerator,
                                             mask_step_of)
from peco_mm.registry import TRANSFORMS


def tiny_peco(tokenizer, num_classes=None, **kw):
    from mmpretrain.registry import MODELS
    head = dict(type='PeCoMIMHead')
    if num_classes is not None:
        head['num_classes'] = num_classes
    torch.manual_seed(0)
    m = MODELS.build(dict(
        type='PeCo', require_target_checkpoint=False, head=head, target_generator=tokenizer,
        backbone=dict(type='PeCoViT', arch=TINY_VIT, img_size=32, patch_size=8, qkv_bias='qv',
                      use_abs_pos_emb=False, rel_pos_bias='shared', layer_scale_init_value=0.1,
                      use_mask_token=True), **kw))
    m.init_weights()
    return m


def samples(masks):
    from mmpretrain.structures import DataSample
    return [DataSample().set_mask(torch.as_tensor(m)) for m in masks]


# ---- masks -----------------------------------------------------------------------------------
def test_block_masks_exact_count_block_shaped_and_cover_the_whole_grid():
    np.random.seed(0)
    g = BlockwiseMaskGenerator(input_size=14, num_masking_patches=75, min_num_patches=16)
    masks = np.stack([g.generate() for _ in range(300)])
    assert masks.dtype == bool and masks.shape == (300, 14, 14)
    assert (masks.sum((1, 2)) == 75).all()
    # blocks: few 4-connected pieces (a random 75-of-196 mask has ~25)
    pieces = [ndimage.label(m)[1] for m in masks]
    rand = [ndimage.label(np.random.permutation(196).reshape(14, 14) < 75)[1]
            for _ in range(50)]
    assert np.mean(pieces) < 4 < 15 < np.mean(rand)
    # every row and column is masked sometimes: mmpretrain's BEiTMaskGenerator never masks
    # the last row / column (exclusive randint upper bound)
    cover = masks.mean(0)
    assert cover[-1].min() > 0.02 and cover[:, -1].min() > 0.02
    # symmetric coverage (no corner bias)
    assert abs(cover[0].sum() - cover[-1].sum()) < 0.25 * cover[0].sum()


def test_block_mask_counts_and_bad_arguments():
    np.random.seed(1)
    for n, lo in [(1, 1), (6, 2), (98, 16), (196, 16)]:
        g = BlockwiseMaskGenerator(input_size=(14, 14) if n != 98 else 16,
                                   num_masking_patches=n, min_num_patches=lo)
        assert all(g.generate().sum() == n for _ in range(20))
    out = BlockwiseMaskGenerator(4, 6, 2).transform({})
    assert out['mask'].shape == (4, 4) and out['mask'].sum() == 6
    with pytest.raises(ValueError, match='num_masking_patches=200'):
        BlockwiseMaskGenerator(14, 200)
    with pytest.raises(ValueError, match='min_num_patches=20'):
        BlockwiseMaskGenerator(14, 10, min_num_patches=20)
    with pytest.raises(ValueError, match='min_aspect'):
        BlockwiseMaskGenerator(14, 75, min_aspect=0)


# ---- head and loss ---------------------------------------------------------------------------
def test_head_loss_is_cross_entropy_and_accuracy_on_given_positions():
    from peco_mm.models.mim_head import PeCoMIMHead
    torch.manual_seed(0)
    head = PeCoMIMHead(in_channels=8, num_classes=5)
    head.init_weights()
    feats, target = torch.randn(3, 4, 8), torch.randint(0, 5, (3, 4))
    out = head.loss(feats, target)
    logits = feats @ head.fc.weight.t() + head.fc.bias
    ref = -F.log_softmax(logits, -1).gather(-1, target[..., None]).mean()
    torch.testing.assert_close(out['loss'], ref)
    torch.testing.assert_close(out['mim_acc'], (logits.argmax(-1) == target).float().mean())
    with pytest.raises(ValueError, match=r'\(3, 4, 8\) and target codes \(3, 3\)'):
        head.loss(feats, target[:, :3])


def test_peco_loss_matches_reference_on_masked_positions_only(tokenizer_ckpt):
    model = tiny_peco(tokenizer_ckpt[1])
    np.random.seed(0)
    g = BlockwiseMaskGenerator(4, 6, 2)
    masks = [g.generate() for _ in range(3)]
    x = torch.rand(3, 3, 32, 32) * 2 - 1
    out = model.loss([x, x], samples(masks))
    mask = torch.as_tensor(np.stack(masks)).flatten(1)  # (3, 16)
    with torch.no_grad():
        codes = model.target_generator.encode(x).flatten(1)
    feats = model.backbone.forward_features(x, mask)[:, 1:]
    logits = model.head(feats[mask])  # boolean index: the slow reference
    torch.testing.assert_close(out['loss'], F.cross_entropy(logits, codes[mask]))
    # a mask with another count is refused (checked on the device, no host read)
    bad = [m.copy() for m in masks]
    bad[1][bad[1].argmin() // 4, bad[1].argmin() % 4] = True
    with pytest.raises(RuntimeError, match='exactly num_masked=6'):
        model.loss([x, x], samples(bad))


def test_targets_under_no_grad_and_tokenizer_stays_frozen(tokenizer_ckpt):
    model = tiny_peco(tokenizer_ckpt[1]).train()
    tok = model.target_generator
    assert not tok.training and not any(p.requires_grad for p in tok.parameters())
    seen = []
    encode = tok.encode
    tok.encode = lambda img: (seen.append(torch.is_grad_enabled()), encode(img))[1]
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    out = model.loss([x, x], samples([BlockwiseMaskGenerator(4, 6, 2).generate()] * 2))
    out['loss'].backward()
    assert seen == [False]  # once per step, without grad
    assert all(p.grad is None for p in tok.parameters())
    assert model.backbone.mask_token.grad is not None
    tok.train()  # forcing training mode is caught before any target is computed
    with pytest.raises(RuntimeError, match='training mode'):
        model.tokenize(x)


def test_targets_encoded_in_chunks_equal_the_whole_batch(tokenizer_ckpt):
    # the chunk caps the encoder's activation memory; the codes must not change
    chunked = tiny_peco(tokenizer_ckpt[1], target_chunk=3).train()
    whole = tiny_peco(tokenizer_ckpt[1], target_chunk=None).train()
    tok = chunked.target_generator
    sizes = []
    encode = tok.encode
    tok.encode = lambda img: (sizes.append(img.shape[0]), encode(img))[1]
    torch.manual_seed(3)
    x = torch.rand(8, 3, 32, 32) * 2 - 1
    codes = chunked.tokenize(x)
    assert sizes == [3, 3, 2] and codes.shape == (8, 4, 4) and codes.dtype == torch.long
    assert torch.equal(codes, whole.tokenize(x))
    assert torch.equal(codes, encode(x))
    assert len(set(codes.flatten().tolist())) > 1  # not one codeword everywhere
    with pytest.raises(ValueError, match='target_chunk=0'):
        tiny_peco(tokenizer_ckpt[1], target_chunk=0)


# ---- PeCo_MAE ----------------------------------------------------------------------------------
def test_peco_mae_masking_and_decoder_order(tokenizer_ckpt):
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    m = MODELS.build(dict(
        type='PeCoMAE', require_target_checkpoint=False, target_generator=tokenizer_ckpt[1],
        backbone=dict(type='PeCoViT', arch=TINY_VIT, img_size=32, patch_size=8),
        neck=dict(type='PeCoMAEDecoder', grid=4, embed_dims=32, num_layers=1, num_heads=4),
        head=dict(type='PeCoMIMHead')))
    m.init_weights()
    assert m.head.fc.in_features == 32 and m.neck.decoder_embed.in_features == 64
    assert not m.backbone.pos_embed.requires_grad  # fixed sin-cos, as MAE
    gen = RandomMaskGenerator(4, 0.75)
    mask = torch.stack([torch.as_tensor(gen.generate()) for _ in range(5)]).flatten(1)
    keep, masked, restore = m.split_by_mask(mask, 16 - m.mask_count(mask))
    assert keep.shape == (5, 4) and masked.shape == (5, 12)
    assert not mask.gather(1, keep).any() and mask.gather(1, masked).all()
    assert (keep.diff(dim=1) > 0).all() and (masked.diff(dim=1) > 0).all()  # image order
    full = torch.cat([keep, masked], 1)
    assert (full.sort(1).values == torch.arange(16)).all()
    assert (full.gather(1, restore) == torch.arange(16)).all()
    # the decoder puts visible tokens back at their image positions
    lat = torch.randn(5, 5, 64)
    m.neck.blocks = torch.nn.ModuleList()  # identity decoder: output = embed + position
    out = m.neck(lat, restore)
    vis = m.neck.decoder_embed(lat[:, 1:]) + m.neck.pos_embed[0, 1:][keep]
    torch.testing.assert_close(out.gather(1, keep[..., None].expand(-1, -1, 32)),
                               m.neck.norm(vis))


@pytest.mark.parametrize('grid,ratio', [(14, 0.75), (4, 0.75), (7, 0.4)])
def test_random_masks_are_maes(grid, ratio):
    """Parity with mmpretrain's MAE: from the same torch seed, the masks of B images drawn in
    the pipeline one by one are the masks its `random_masking` draws for the batch."""
    from mmpretrain.models.selfsup.mae import MAEViT
    n = grid * grid
    torch.manual_seed(3)
    _, ref, _ = MAEViT.random_masking(None, torch.zeros(6, n, 1), ratio)  # (6, N), 1 = masked
    torch.manual_seed(3)
    gen = RandomMaskGenerator(grid, ratio)
    ours = torch.stack([torch.as_tensor(gen.generate()).flatten() for _ in range(6)])
    assert torch.equal(ours, ref.bool())
    assert gen.transform({})['mask'].shape == (grid, grid)


def test_mask_step_of_a_pipeline_and_bad_ratios():
    pipe = [dict(type='LoadImageFromFile'), dict(type='BlockwiseMaskGenerator', input_size=4,
                                                 num_masking_patches=6, min_num_patches=2)]
    gen = TRANSFORMS.build(mask_step_of(pipe))
    assert isinstance(gen, BlockwiseMaskGenerator) and gen.generate().sum() == 6
    assert mask_step_of(pipe[:1]) is None
    # a new strategy: subclass, implement generate, register; the seam finds it by its class
    from peco_mm.datasets.mim_transforms import MaskGenerator
    with pytest.raises(TypeError, match='generate'):
        MaskGenerator()

    class FirstRowMask(MaskGenerator):
        def __init__(self, input_size=4):
            self.set_grid(input_size, 4)

        def generate(self):
            return np.arange(16).reshape(4, 4) < 4

    TRANSFORMS.register_module(name='TestFirstRowMask', module=FirstRowMask, force=True)
    step = mask_step_of(pipe[:1] + [dict(type='TestFirstRowMask', input_size=4)])
    assert TRANSFORMS.build(step).transform({})['mask'][0].all()
    for ratio in (0.0, 1.0, 0.01):  # none masked, none visible, rounds to none on 4x4
        with pytest.raises(ValueError, match=f'mask_ratio={ratio}'):
            RandomMaskGenerator(4, ratio)
    with pytest.raises(ValueError, match='input_size'):
        RandomMaskGenerator((4, 4, 4), 0.5)


def test_peco_mae_refuses_a_model_mask_ratio_and_a_batch_without_masks(tokenizer_ckpt):
    from mmpretrain.registry import MODELS
    cfg = dict(type='PeCoMAE', require_target_checkpoint=False, target_generator=tokenizer_ckpt[1],
               backbone=dict(type='PeCoViT', arch=TINY_VIT, img_size=32, patch_size=8),
               neck=dict(type='PeCoMAEDecoder', grid=4, embed_dims=32, num_layers=1,
                         num_heads=4), head=dict(type='PeCoMIMHead'))
    with pytest.raises(ValueError, match="mask_ratio=0.75 is a setting of the data pipeline.*"
                       "RandomMaskGenerator"):
        MODELS.build(dict(cfg, mask_ratio=0.75))
    m = MODELS.build(cfg)
    x = torch.rand(2, 3, 32, 32)
    from mmpretrain.structures import DataSample
    with pytest.raises(ValueError, match='carry no mask.*mask generator in the pipeline'):
        m.loss([x, x], [DataSample(), DataSample()])


# ---- bad input ---------------------------------------------------------------------------------
def test_codebook_size_differs_from_head_classes(tokenizer_ckpt):
    with pytest.raises(ValueError, match=r'codebook size 16 .* head classes 10'):
        tiny_peco(tokenizer_ckpt[1], num_classes=10)


def test_latent_grid_differs_from_patch_grid(tokenizer_ckpt):
    model = tiny_peco(tokenizer_ckpt[1])
    x, target = torch.rand(2, 3, 32, 32), torch.rand(2, 3, 48, 48)
    m = samples([BlockwiseMaskGenerator(4, 6, 2).generate()] * 2)
    with pytest.raises(ValueError, match=r'latent grid \(6, 6\).*patch grid \(4, 4\)'):
        model.loss([x, target], m)


def test_missing_tokenizer_checkpoint_fails_when_the_model_is_built(tmp_path):
    from mmengine.config import Config
    from mmpretrain.registry import MODELS
    cfg = Config.fromfile(f'{REPO}/configs/peco/pretrain_vitb_in1k_300e.py')
    path = str(tmp_path / 'nope.pth')
    cfg.model.target_generator.checkpoint = path
    with pytest.raises(FileNotFoundError, match=r"nope.pth.*model.target_generator.checkpoint"):
        MODELS.build(cfg.model)
    # the builder itself names the key too (e.g. require_target_checkpoint=False)
    with pytest.raises(FileNotFoundError, match=r"nope.pth.*model.target_generator.checkpoint"):
        MODELS.build(dict(cfg.model.target_generator))
    cfg.model.target_generator.checkpoint = None
    with pytest.raises(ValueError,
                       match='no pretrained weights.*model.target_generator.checkpoint'):
        MODELS.build(cfg.model)


def test_shipped_config_reads_the_tokenizer_architecture_from_its_checkpoint(
        tokenizer_ckpt, tmp_path):
    """configs/peco/pretrain_vitb_in1k_300e.py names only the tokenizer file: the tiny
    tokenizer's 8x CNN and 16-code codebook come from the checkpoint, frozen, without a data
    preprocessor or a decoder, and its codes (in fp32; the config asks for bf16 where native)
    equal the trained tokenizer's."""
    from mmengine.config import Config
    from mmpretrain.registry import MODELS
    cfg = Config.fromfile(f'{REPO}/configs/peco/pretrain_vitb_in1k_300e.py')
    assert set(cfg.model.target_generator) == {'type', 'checkpoint', 'encode_bf16'}
    assert cfg.model.target_generator.encode_bf16 == 'auto'
    cfg.model.target_generator.checkpoint = tokenizer_ckpt[0]
    cfg.model.backbone.update(arch=TINY_VIT, img_size=32, patch_size=8)
    model = MODELS.build(cfg.model)
    tg = model.target_generator
    assert type(tg).__name__ == 'FrozenPeCoTokenizer'
    assert (tg.num_embeddings, tg.embed_dims, tg.downsample) == (16, 16, 8)
    assert model.head.num_classes == 16  # K from the checkpoint
    assert tg.decoder is None and not hasattr(tg, 'data_preprocessor')
    assert all(k.startswith(('encoder.', 'quantizer.')) for k in tg.state_dict())
    assert not any(p.requires_grad for p in tg.parameters())
    model.train()
    assert not tg.training
    x = torch.rand(3, 3, 32, 32) * 2 - 1
    assert tg.encode_bf16 == 'auto'
    assert torch.equal(tg.encode(x, bf16=False), tokenizer_ckpt[1].encode(x))
    # a pretraining checkpoint serves as a tokenizer checkpoint too (its config names only
    # the file: the architecture comes from the target generator's weights)
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    path = str(tmp_path / 'peco.pth')
    torch.save({'state_dict': model.state_dict(), 'meta': {'cfg': cfg.pretty_text}}, path)
    assert torch.equal(FrozenPeCoTokenizer(path).encode(x), tg.encode(x, bf16=False))


# ---- configs and the benchmark -----------------------------------------------------------------
def test_shipped_pretrain_configs_state_the_paper_settings():
    from mmengine.config import Config
    for name in ('vitb_in1k_300e', 'vitb_in1k_800e', 'vitl_in1k_800e', 'vith_in1k_800e'):
        cfg = Config.fromfile(f'{REPO}/configs/peco/pretrain_{name}.py')
        opt = cfg.optim_wrapper.optimizer
        assert (opt.type, opt.lr, tuple(opt.betas), opt.weight_decay) == \
            ('AdamW', 1.5e-3, (0.9, 0.999), 0.05)
        assert cfg.model.backbone.drop_path_rate == 0.1
        assert cfg.train_dataloader.batch_size * 8 == 2048
        assert cfg.train_cfg.max_epochs == int(name.split('_')[-1][:-1])
        bb = cfg.model.backbone
        mask = [t for t in cfg.train_dataloader.dataset.pipeline
                if t.type == 'BlockwiseMaskGenerator'][0]
        grid = 224 // bb.get('patch_size', 16)
        assert mask.input_size == grid
        assert math.isclose(mask.num_masking_patches / grid ** 2, 75 / 196, rel_tol=0.01)
    mae = Config.fromfile(f'{REPO}/configs/peco/pretrain_mae_vitb_in1k_800e.py')
    assert mae.model.type == 'PeCoMAE' and 'mask_ratio' not in mae.model
    mask = TRANSFORMS.build(mask_step_of(mae.train_dataloader.dataset.pipeline))
    assert isinstance(mask, RandomMaskGenerator)
    assert (mask.height, mask.width, mask.mask_ratio) == (14, 14, 0.75)
    beit = Config.fromfile(f'{REPO}/configs/peco/pretrain_beit_dalle_vitb_in1k_300e.py')
    assert beit.model.target_generator.type == 'DALL-E'


def test_benchmark_smoke_runs_all_four_models():
    from peco_mm.tooling.benchmark import PRETRAIN_MODELS, bench_pretrain
    res = bench_pretrain(PRETRAIN_MODELS, batch=4, steps=1, warmup=1, device='cpu', smoke=True)
    assert [r['model'] for r in res] == ['peco', 'beit', 'mae', 'peco_mae']
    assert all(r['ms_per_step'] > 0 and r['trainable_m'] > 0 for r in res)


def test_visualize_mim_takes_the_configs_mask_generator():
    from tests.conftest import load_tool
    tool = load_tool('visualize_mim')
    mae = [dict(type='RandomMaskGenerator', input_size=14, mask_ratio=0.75)]
    gen = tool.mask_generator(mae, (4, 4), None, None)  # moved to the image's grid
    assert isinstance(gen, RandomMaskGenerator) and gen.num_masking_patches == 12
    assert tool.mask_generator(mae, (4, 4), 6, None).generate().sum() == 6
    beit = tool.mask_generator([], (4, 4), None, 3)  # none named: BEiT's 75 of 196
    assert isinstance(beit, BlockwiseMaskGenerator)
    assert (beit.num_masking_patches, beit.min_num_patches) == (6, 3)


def test_visualize_mim_asks_for_dalles_decoder_for_beits_codes():
    from mmengine.config import Config

    from tests.conftest import ROOT, load_tool
    tool = load_tool('visualize_mim')
    cfg = Config.fromfile(ROOT / 'configs/peco/pretrain_beit_dalle_vitb_in1k_300e.py')
    with pytest.raises(SystemExit, match="DALL-E's codes; pass --dalle-decoder PATH"):
        tool.build_model(cfg, 'x.pth', None, 'cpu')
