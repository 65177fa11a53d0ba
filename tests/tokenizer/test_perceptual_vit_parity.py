"""The ViT perceptual features are timm's raw block outputs at blocks 3/6/9/12, the last block
included (no final LayerNorm), for MoCo v3, DINO, timm and MAE checkpoint files; checked with
forward hooks on timm's own blocks."""
import pytest
import torch

from peco_mm.tokenizer.perceptual import PerceptualLoss

LAYERS = (3, 6, 9, 12)  # the paper's blocks, 1-based
LAYOUTS = {
    'timm': lambda sd: sd,
    # MoCo v3: the base encoder is used; the momentum encoder and the predictor are not
    'mocov3': lambda sd: {'state_dict': {
        **{f'module.base_encoder.{k}': v for k, v in sd.items()},
        **{f'module.momentum_encoder.{k}': torch.zeros_like(v) for k, v in sd.items()}}},
    # DINO training file: the teacher's backbone is used
    'dino': lambda sd: {'teacher': {f'backbone.{k}': v for k, v in sd.items()},
                        'student': {f'module.backbone.{k}': torch.zeros_like(v)
                                    for k, v in sd.items()}},
    'mae': lambda sd: {'model': {k: v for k, v in sd.items() if not k.startswith('head')}},
}


def timm_vit():
    """A 12-block timm ViT (width 32, 32 px, patch 8) with a non-trivial final norm."""
    from timm.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=12, num_heads=2,
                            num_classes=10).eval()
    with torch.no_grad():  # so that "after the final norm" differs from "raw" in every entry
        vit.norm.weight.uniform_(0.5, 1.5)
        vit.norm.bias.normal_(std=0.5)
    return vit


def timm_block_outputs(vit, x: torch.Tensor, layers) -> list[torch.Tensor]:
    """timm's block outputs at the 1-based `layers`, read by forward hooks: (B, C, h, w)."""
    seen = {}
    hooks = [vit.blocks[i - 1].register_forward_hook(
        lambda mod, args, out, i=i: seen.__setitem__(i, out)) for i in layers]
    try:
        with torch.no_grad():
            vit(x)
    finally:
        for h in hooks:
            h.remove()
    outs = []
    for i in layers:
        patches = seen[i][:, vit.num_prefix_tokens:]  # (B, N, C)
        B, N, C = patches.shape
        side = int(N ** 0.5)
        outs.append(patches.transpose(1, 2).reshape(B, C, side, side))
    return outs


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_features_are_timm_raw_block_outputs(tmp_path, layout):
    vit = timm_vit()
    path = tmp_path / f'{layout}.pth'
    torch.save(LAYOUTS[layout](vit.state_dict()), path)
    # the converter cannot read the head count from the weights (32-d heads here)
    loss = PerceptualLoss('vit', str(path), vit_cfg=dict(num_heads=2))
    assert loss.layers == LAYERS
    x = loss.normalize_input(torch.rand(2, 3, 32, 32) * 2 - 1)
    with torch.no_grad():
        ours = loss.net(x)
    ref = timm_block_outputs(vit, x, LAYERS)
    assert len(ours) == 4
    for layer, a, b in zip(LAYERS, ours, ref):
        assert a.shape == b.shape == (2, 32, 4, 4)
        diff = (a - b).abs().max().item()
        assert diff < 1e-5, f'block {layer}: max |ours - timm| = {diff:.3g}'
    # the final norm would change block 12 (the entries are not equal by accident)
    assert (vit.norm(ref[-1].flatten(2).transpose(1, 2)).transpose(1, 2).flatten()
            - ref[-1].flatten()).abs().max() > 0.1


def test_final_norm_false_is_accepted_and_changes_nothing(tmp_path):
    """vit_cfg=dict(final_norm=False) with a checkpoint holding norm.weight / norm.bias builds;
    the features are the same raw block outputs."""
    vit = timm_vit()
    path = tmp_path / 'timm.pth'
    torch.save(vit.state_dict(), path)
    loss = PerceptualLoss('vit', str(path), vit_cfg=dict(num_heads=2, final_norm=False))
    x = loss.normalize_input(torch.rand(1, 3, 32, 32) * 2 - 1)
    with torch.no_grad():
        ours = loss.net(x)
    for a, b in zip(ours, timm_block_outputs(vit, x, LAYERS)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
