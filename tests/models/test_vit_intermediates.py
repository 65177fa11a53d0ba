"""PeCoViT.forward_intermediates, the one loop over the blocks, against timm's
VisionTransformer.forward_intermediates; and gradient checkpointing (`with_cp`) giving the
same loss and gradients as the plain loop."""
import pytest
import timm
import torch

from peco_mm.models import PeCoViT


@pytest.fixture(scope='module')
def timm_pair(tmp_path_factory):
    """A random 4-block timm ViT and the PeCoViT its checkpoint file builds."""
    torch.manual_seed(0)
    src = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=4, num_heads=4, num_classes=0).eval()
    with torch.no_grad():
        for p in src.parameters():
            p.normal_(0, 0.05)
    path = tmp_path_factory.mktemp('timm') / 'timm.pth'
    torch.save(src.state_dict(), path)
    return src, PeCoViT.from_checkpoint(str(path), num_heads=4).eval()


@pytest.mark.parametrize('indices', [None, 2, [0, 3], [-1]])
@pytest.mark.parametrize('norm', [False, True])
def test_intermediates_equal_timm(timm_pair, indices, norm):
    src, ours = timm_pair
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = src.forward_intermediates(x, indices, norm=norm, intermediates_only=True)
        got = ours.forward_intermediates(x, indices, norm=norm)  # NCHW
        ref_nlc = src.forward_intermediates(x, indices, norm=norm, output_fmt='NLC',
                                            return_prefix_tokens=True, intermediates_only=True)
        got_nlc = ours.forward_intermediates(x, indices, norm=norm, output_fmt='NLC')
    expected = 4 if indices is None else indices if isinstance(indices, int) else len(indices)
    assert len(got) == len(ref) == expected
    for a, b in zip(got, ref):
        assert a.shape == b.shape == (2, 64, 4, 4)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for a, (patches, prefix) in zip(got_nlc, ref_nlc):  # ours keeps the cls token in NLC
        torch.testing.assert_close(a, torch.cat([prefix, patches], 1), atol=1e-5, rtol=0)


def test_forward_features_and_hosts_forward_keep_their_outputs(timm_pair):
    src, ours = timm_pair
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours.forward_features(x), src.forward_features(x),
                                   atol=1e-5, rtol=0)
        # the hosts' view: cls token after the final norm, as timm's pre-logits
        torch.testing.assert_close(ours(x)[0], src.forward_features(x)[:, 0], atol=1e-5, rtol=0)


def test_keep_ids_runs_only_the_kept_patches():
    torch.manual_seed(0)
    vit = PeCoViT(arch='test', img_size=32, patch_size=8, use_abs_pos_emb=True).eval()
    x = torch.randn(2, 3, 32, 32)
    keep = torch.tensor([[0, 5, 7, 15], [3, 2, 1, 0]])  # (B, L)
    with torch.no_grad():
        out = vit.forward_intermediates(x, [-1], keep_ids=keep, norm=True, output_fmt='NLC')[0]
        tokens, _ = vit.embed(x)  # the same tokens through the blocks by hand
        t = torch.cat([tokens[:, :1], torch.stack([tokens[b, 1 + keep[b]] for b in range(2)])], 1)
        for blk in vit.blocks:
            t = blk(t, None, vit.grid)
    assert out.shape == (2, 5, 64)
    torch.testing.assert_close(out, vit.norm(t))
    with pytest.raises(ValueError, match="keep_ids needs output_fmt='NLC'"):
        vit.forward_intermediates(x, keep_ids=keep)


def test_bad_indices_and_format_name_the_problem():
    vit = PeCoViT(arch='test', img_size=32, patch_size=8)
    x = torch.randn(1, 3, 32, 32)
    with pytest.raises(ValueError, match='block index 2 is out of range for 2 blocks'):
        vit.forward_intermediates(x, [2])
    with pytest.raises(ValueError, match='1 <= n <= 2'):
        vit.forward_intermediates(x, 3)
    with pytest.raises(ValueError, match="output_fmt='NHWC'"):
        vit.forward_intermediates(x, output_fmt='NHWC')


def _loss_and_grads(with_cp: bool, **kw):
    torch.manual_seed(0)
    vit = PeCoViT(arch='test', num_layers=4, img_size=32, patch_size=8, drop_path_rate=0.2,
                  with_cp=with_cp, **kw).train()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)  # the same drop-path draws in both runs
    if kw.get('use_mask_token'):  # pretraining: masked tokens after the final norm
        mask = torch.zeros(2, 16, dtype=torch.bool)
        mask[:, ::3] = True
        loss = vit.forward_features(x, mask)[:, 1:].pow(2).mean()
    else:  # dense fine-tuning: the four pyramid maps
        loss = sum(o.pow(2).mean() for o in vit(x))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in vit.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('kw', [
    dict(use_mask_token=True, qkv_bias='qv', rel_pos_bias='shared', layer_scale_init_value=0.1),
    dict(out_type='featmap', rel_pos_bias='per_block', final_norm=False,
         pyramid=dict(norm_cfg=dict(type='GN', num_groups=8))),
], ids=['pretraining', 'dense'])
def test_with_cp_gives_the_same_loss_and_gradients(kw):
    loss0, grads0 = _loss_and_grads(False, **kw)
    loss1, grads1 = _loss_and_grads(True, **kw)
    torch.testing.assert_close(loss1, loss0)
    assert grads1.keys() == grads0.keys() and len(grads0) > 10
    for n in grads0:
        torch.testing.assert_close(grads1[n], grads0[n], atol=1e-6, rtol=1e-5, msg=n)


def test_with_cp_recomputes_the_blocks_in_backward():
    """Checkpointed blocks run their layers again during backward (and only in training; torch
    stops a recompute once it has the tensors it needs, so a layer inside the block is
    watched)."""
    calls = []
    vit = PeCoViT(arch='test', img_size=32, patch_size=8, with_cp=True)
    vit.blocks[0].mlp.fc1.register_forward_hook(lambda *a: calls.append(1))
    x = torch.randn(1, 3, 32, 32)
    vit.train()
    vit.forward_features(x).sum().backward()
    assert len(calls) == 2  # forward, then the recompute in backward
    calls.clear()
    vit.eval()
    vit.forward_features(x).sum().backward()
    assert len(calls) == 1
