"""PeCo_MAE: MAE's asymmetric encoder-decoder predicting PeCo codes (Dong et al., AAAI 2023,
appendix A; He et al., CVPR 2022).

The encoder (a `PeCoViT` with absolute position embeddings) sees only the visible 25% of the
patches; a light decoder adds mask tokens back, restores the patch order and runs a few blocks;
the K-way head classifies the decoder's hidden states at the masked positions into the frozen
tokenizer's codes (Eq. 7), instead of regressing pixels as MAE does.

Masking is MAE's per-sample random subset with a fixed count, drawn in the data pipeline by
`RandomMaskGenerator` (the mask seam PeCo uses too), so the step has static shapes and no host
sync; any mask generator with a fixed count works. As in MAE, the encoder's and the decoder's
position embeddings are fixed 2-D sin-cos tables (mmpretrain's
`build_2d_sincos_position_embedding`).

The decoder is written here rather than reusing mmpretrain's `MAEPretrainDecoder`: that one
ends in a projection applied to every patch (pixels, or K logits for all 196 positions), where
we want hidden states and the classifier only on the masked ones; its blocks are PeCo's
SDPA blocks.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmpretrain.models.utils import build_2d_sincos_position_embedding
from torch.nn.init import trunc_normal_

from ..layers import Block
from ..layers.pos_embed import patch_grid
from ..registry import MODELS
from .peco import PeCo, codebook_size, gather_tokens


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class PeCoMAEDecoder(BaseModule):
    """MAE's decoder without the output projection: (B, 1+L, C_enc) visible tokens and
    ids_restore (B, N) -> (B, N, embed_dims) hidden states of all patches in image order.

    Args:
        grid: the patch grid (h, w) or its side (14 for 224 px, patch 16).
        in_channels: the encoder width.
        embed_dims, num_layers, num_heads, mlp_ratio: decoder size (MAE: 512, 8, 16, 4).
    """

    def __init__(self,
                 grid: int | tuple[int, int] = 14,
                 in_channels: int = 768,
                 embed_dims: int = 512,
                 num_layers: int = 8,
                 num_heads: int = 16,
                 mlp_ratio: float = 4.0,
                 norm_eps: float = 1e-6,
                 init_cfg: dict | list | None = None) -> None:
        super().__init__(init_cfg=init_cfg)
        grid = (grid, grid) if isinstance(grid, int) else tuple(grid)
        if len(grid) != 2 or min(grid) < 1:
            raise ValueError(f'grid={grid!r}; expected a positive int or (h, w)')
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims={embed_dims} is not divisible by num_heads={num_heads}')
        self.grid = grid
        self.embed_dims = embed_dims
        self.decoder_embed = nn.Linear(in_channels, embed_dims)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.register_buffer('pos_embed', torch.zeros(1, 1 + grid[0] * grid[1], embed_dims))
        self.blocks = nn.ModuleList([
            Block(embed_dims, num_heads, mlp_ratio, 'qkv', norm_eps=norm_eps)
            for _ in range(num_layers)])
        self.norm = nn.LayerNorm(embed_dims, eps=norm_eps)

    def init_weights(self) -> None:
        super().init_weights()
        self.pos_embed.copy_(sincos_table(self.grid, self.embed_dims))
        if self.init_cfg is None:  # MAE: xavier-uniform linears, N(0, 0.02) mask token
            trunc_normal_(self.mask_token, std=0.02)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.LayerNorm):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        B, N = ids_restore.shape
        if N != self.grid[0] * self.grid[1]:
            raise ValueError(f'PeCoMAEDecoder built for a {self.grid} grid got {N} patches')
        x = self.decoder_embed(x)  # (B, 1+L, D)
        L = x.shape[1] - 1
        masks = self.mask_token.to(x.dtype).expand(B, N - L, -1)  # (B, N-L, D)
        patches = torch.cat([x[:, 1:], masks], dim=1)  # (B, N, D) in shuffled order
        patches = gather_tokens(patches, ids_restore)  # (B, N, D) in image order
        x = torch.cat([x[:, :1], patches], dim=1) + self.pos_embed.to(x.dtype)  # (B, 1+N, D)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)[:, 1:]  # (B, N, D)


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class PeCoMAE(PeCo):
    """PeCo_MAE: the `PeCo` tokenizer and head on MAE's encoder-decoder.

    Args:
        backbone: `PeCoViT` with `use_abs_pos_emb=True`, `rel_pos_bias='none'` (MAE's ViT:
            qkv_bias='qkv', no layer scale).
        neck: `PeCoMAEDecoder`; its `in_channels` is the backbone width.
        head: `PeCoMIMHead` with `in_channels` = decoder width, `num_classes` = codebook size.
        target_generator, target_chunk: the frozen tokenizer and its chunk, as for `PeCo`.
        num_masked: as `PeCo`'s: the masks come from the pipeline's mask generator
            (`RandomMaskGenerator`, mask_ratio 0.75 in MAE).
        fix_pos_embed: use a fixed 2-D sin-cos encoder position table, as MAE does.
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 target_generator: dict | nn.Module,
                 num_masked: int | None = None,
                 fix_pos_embed: bool = True,
                 target_chunk: int | None = 64,
                 require_target_checkpoint: bool = True,
                 data_preprocessor: dict | nn.Module | None = None,
                 init_cfg: dict | list | None = None,
                 mask_ratio: float | None = None) -> None:
        if mask_ratio is not None:
            raise ValueError(
                f'PeCoMAE: mask_ratio={mask_ratio} is a setting of the data pipeline, not of '
                'the model: put dict(type=\'RandomMaskGenerator\', input_size=14, '
                f'mask_ratio={mask_ratio}) before PackInputs in train_pipeline')
        self.fix_pos_embed = fix_pos_embed
        super().__init__(backbone=backbone, neck=neck, head=head, num_masked=num_masked,
                         target_generator=target_generator, target_chunk=target_chunk,
                         require_target_checkpoint=require_target_checkpoint,
                         data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        if fix_pos_embed:
            self.backbone.pos_embed.requires_grad_(False)

    def check_parts(self) -> None:
        bb = self.backbone
        if (getattr(bb, 'pos_embed', None) is None or bb.rel_pos_bias is not None
                or bb.blocks[0].rel_pos_bias is not None):
            raise ValueError('PeCoMAE: the encoder sees only visible patches, so it needs '
                             'absolute positions: build PeCoViT with use_abs_pos_emb=True, '
                             "rel_pos_bias='none'")
        if self.neck is None:
            raise ValueError('PeCoMAE needs a neck (the MAE decoder, e.g. '
                             "dict(type='PeCoMAEDecoder'))")
        self.check_codebook_size(codebook_size(self.target_generator))

    def init_weights(self) -> None:
        super().init_weights()
        pretrained = isinstance(self.backbone.init_cfg, dict) and \
            self.backbone.init_cfg.get('type') == 'Pretrained'
        if self.fix_pos_embed and not pretrained:
            table = sincos_table(self.backbone.grid, self.backbone.embed_dims)
            self.backbone.pos_embed.data.copy_(table)

    # ---- steps ----------------------------------------------------------------------------
    def split_by_mask(self, mask: torch.Tensor, keep: int
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, N) bool mask with `keep` visible patches in each row -> ids_keep (B, keep),
        ids_masked (B, N - keep) (each in image order) and ids_restore (B, N), as MAE's
        shuffle gives them."""
        if keep < 1:
            raise ValueError(f'PeCoMAE: every one of the {mask.shape[1]} patches is masked; the '
                             'encoder needs at least one visible patch')
        order = mask.float().argsort(dim=1, stable=True)  # (B, N): visible first, then masked
        return order[:, :keep], order[:, keep:], order.argsort(dim=1)

    def encode_visible(self, img: torch.Tensor, ids_keep: torch.Tensor) -> torch.Tensor:
        """The encoder on the visible patches only: (B, 1+L, C)."""
        return self.backbone.forward_intermediates(img, [-1], keep_ids=ids_keep, norm=True,
                                                   output_fmt='NLC')[0]  # (B, 1+L, C)

    def loss(self, inputs: list[torch.Tensor], data_samples: list
             ) -> dict[str, torch.Tensor]:
        img, mask, codes = self.masked_batch(inputs, data_samples)
        if tuple(self.neck.grid) != tuple(codes.shape[-2:]):
            raise ValueError(f'PeCoMAE: decoder grid {tuple(self.neck.grid)} != patch grid '
                             f'{tuple(codes.shape[-2:])}; set neck.grid to the patch grid')
        keep = mask.shape[1] - self.mask_count(mask)
        ids_keep, ids_masked, ids_restore = self.split_by_mask(mask, keep)
        latent = self.encode_visible(img, ids_keep)  # (B, 1+L, C)
        feats = self.neck(latent, ids_restore)  # (B, N, D)
        feats = gather_tokens(feats, ids_masked)  # (B, M, D)
        target = codes.flatten(1).gather(1, ids_masked)  # (B, M)
        return self.head.loss(feats, target)

    @torch.no_grad()
    def predict_codes(self, img: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Codes predicted at every position for a given (B, h, w) mask with a fixed count."""
        grid = patch_grid(img, self.backbone.patch_size)
        mask = mask.flatten(1).bool()
        ids_keep, _, ids_restore = self.split_by_mask(mask, mask.shape[1] - int(mask[0].sum()))
        latent = self.encode_visible(img, ids_keep)
        feats = self.neck(latent, ids_restore)  # (B, N, D)
        return self.head(feats).argmax(-1).reshape(img.shape[0], *grid)


def sincos_table(grid: tuple[int, int], dims: int) -> torch.Tensor:
    """MAE's fixed 2-D sin-cos table with a zero cls row: (1, 1 + h*w, dims)."""
    if dims % 4:
        raise ValueError(f'a 2-D sin-cos table needs a width divisible by 4, got {dims}')
    return build_2d_sincos_position_embedding(tuple(grid), dims, cls_token=True).float()
