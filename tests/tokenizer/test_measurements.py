"""The tokenizer measurements behind docs/benchmarks.md and docs/tokenizer.md: bf16-vs-fp32
code agreement, and each loss term's share of the gradient at the reconstruction."""
import torch

from peco_mm.tooling.code_agreement import code_agreement
from peco_mm.tooling.loss_balance import perceptual_gradient_shares
from peco_mm.tokenizer import PeCoTokenizer, PerceptualLoss

TINY = dict(base_channels=8, channel_mult=(1, 2, 2), num_res_blocks=1, num_embeddings=64,
            embed_dims=8, perceptual_weight=0.0, with_decoder=False)


def _tokenizer_and_outputs():
    torch.manual_seed(0)
    tok = PeCoTokenizer(**TINY).eval()
    x = torch.rand(4, 3, 16, 16) * 2 - 1
    with torch.no_grad():
        z = tok.quantizer.flatten(tok.encoder(x))  # (64, 8) fp32 outputs
    return tok, x, z


def test_code_agreement_counts_flips_between_bf16_and_fp32():
    tok, x, z = _tokenizer_and_outputs()
    # codewords ON the fp32 outputs: nothing near a tie, bf16 changes no code
    tok.quantizer.embedding.copy_(z)
    r = code_agreement(tok, x, batch_size=3)
    assert (r['agreement'], r['codes'], r['flipped']) == (1.0, 64.0, 0.0)
    # 32 pairs of codewords 1e-5 apart around 32 outputs, far from everything else: a tie
    # that bf16's rounding (~4e-3 relative) breaks either way, for those 32 positions
    d = torch.randn(32, 8)
    pairs = torch.cat([z[:32] + 1e-5 * d, z[:32] - 1e-5 * d])
    tok.quantizer.embedding.copy_(pairs)
    r = code_agreement(tok, x, batch_size=4)
    assert r['codes'] == 64 and 0 < r['flipped'] <= 48
    assert r['agreement'] == 1 - r['flipped'] / 64
    assert r['flipped_median_gap'] < 1e-2  # the flipped ones were near-ties in fp32


def test_gradient_shares_of_the_two_channel_reductions():
    """One layer of C channels: the summed reduction is exactly C times the averaged one, so
    its gradient-norm ratio r = ||∇L_percep|| / ||∇L_pixel|| is C times larger, and each share
    is λr / (1 + λr)."""
    vit = dict(arch=dict(embed_dims=32, num_layers=2, num_heads=4), img_size=32, patch_size=8)
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    recon = (x + 0.2 * torch.randn_like(x)).clamp(-1, 1)
    shares = {}
    for red in ('mean', 'sum'):
        torch.manual_seed(1)
        loss = PerceptualLoss('vit', None, layers=(2,), allow_random=True, vit_cfg=vit,
                              channel_reduction=red)
        shares[red] = perceptual_gradient_shares(loss, x, recon, lambdas=(0.3, 3.0))
    s = shares['mean'][0.3]
    r_mean = s / (1 - s) / 0.3
    for lam in (0.3, 3.0):
        assert abs(shares['mean'][lam] - lam * r_mean / (1 + lam * r_mean)) < 1e-5
        rs = 32 * r_mean
        assert abs(shares['sum'][lam] - lam * rs / (1 + lam * rs)) < 1e-5


def test_measurement_images_from_a_folder_are_the_tools_centre_crops(tmp_path):
    import numpy as np
    from PIL import Image

    from peco_mm.tooling.inputs import measurement_images
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(20, 30), (24, 16), (16, 16)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            tmp_path / f'{i}.png')
    x = measurement_images(str(tmp_path), size=16, num=2)
    assert x.shape == (2, 3, 16, 16) and -1 <= x.min() and x.max() <= 1
    # the 16x16 image is third: not taken; the 24x16 one is taken as a centre crop
    arr = np.asarray(Image.open(tmp_path / '1.png'), dtype=np.float32)[4:20]
    assert torch.allclose(x[1], torch.from_numpy(arr).permute(2, 0, 1) / 127.5 - 1, atol=1e-6)
