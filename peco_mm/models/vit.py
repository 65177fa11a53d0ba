"""PeCoViT: one Vision Transformer for PeCo MIM pretraining and every downstream task.

Implements ViT (Dosovitskiy et al. 2021) with the BEiT options (Bao et al. 2022) PeCo builds
on (Dong et al., AAAI 2023, Sec. 3.3): q/v bias, shared or per-block relative-position bias,
layer scale, a learnable mask token. It serves MoCo v3 / MAE / timm / BEiT weights alike
(see `peco_mm.checkpoint`), resizes its position tables to any H×W with torch, and can
emit the 4-scale pyramid that UperNet and Mask R-CNN consume.

State-dict names follow timm / unilm BEiT (`patch_embed.proj`, `blocks.{i}.attn.qkv`,
`blocks.{i}.gamma_1`, ...); relative-position tables live at `rel_pos_bias.*` (shared) or
`blocks.{i}.rel_pos_bias.*` (per block).

Beside it: its arguments (presets, allowed choices, default output blocks) in `vit_config`,
loading pretrained weights from any supported file in `pretrained`, the patch embedding in
`layers.patch_embed`.
"""
from __future__ import annotations

import copy
import math
from typing import Sequence

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from torch.nn.init import trunc_normal_
from torch.utils.checkpoint import checkpoint

from ..checkpoint import convert_checkpoint, read_checkpoint
from ..checkpoint.reader import log
from ..layers import Block, RelativePositionBias, resize_pos_embed
from ..layers.patch_embed import PatchEmbed
from ..layers.pos_embed import fit_position_tables, patch_grid
from ..registry import MODELS
from .pretrained import load_pretrained
from .vit_config import (ARCH_KEYS, check_choices, pretrained_init_cfg, resolve_arch,
                         resolve_out_indices)


@MODELS.register_module()
class PeCoViT(BaseModule):
    """ViT backbone with BEiT/MAE/MoCo-v3 options; see the module docstring.

    Args:
        arch: 'tiny' | 'small' | 'base' | 'large' | 'huge' | 'test' (64 wide, 2 deep, for
            tests), or a dict with embed_dims, num_layers, num_heads (mlp_ratio optional).
        embed_dims, num_layers, num_heads, mlp_ratio: override the preset's values (tiny test
            models, or ViT variants between the presets).
        img_size: the pretraining size; position tables are stored for it and resized
            on the fly for other inputs.
        patch_size: 16 or 14 (any positive int works).
        qkv_bias: 'qkv' (ViT/MAE), 'qv' (BEiT), 'none'; True/False map to 'qkv'/'none'.
        use_abs_pos_emb: learnable absolute position embedding.
        rel_pos_bias: 'none' | 'shared' (one table, BEiT pretraining) | 'per_block'.
        layer_scale_init_value: > 0 adds BEiT's layer scale (gamma_1, gamma_2).
        drop_path_rate: stochastic depth, linearly increasing over the blocks.
        out_indices: blocks (0-based, negatives allowed) whose outputs are returned; default
            the last block, or blocks 4/6/8/12 of 12 (scaled to the depth) with `pyramid`.
        out_type: 'cls_token' (B, C); 'avg_featmap' (B, C) mean of patch tokens;
            'featmap' (B, C, h, w) per index. Other outputs per call: `forward_intermediates`.
        final_norm: LayerNorm after the last block. With out_type='avg_featmap' and
            final_norm=False, a `fc_norm` is applied after pooling (BEiT / MAE fine-tuning).
        use_mask_token: learnable [MASK] embedding for masked image modeling.
        pad_to_patch: pad inputs whose size is not a multiple of the patch size (else error).
        frozen_stages: freeze patch embedding + the first `frozen_stages` blocks (linear probe:
            num_layers freezes everything, final norm included); -1 freezes nothing.
        pyramid: None, or kwargs of `ViTPyramidAdapter` (e.g. dict(norm_cfg=dict(type='BN')))
            to turn the four `out_indices` feature maps into strides 4/8/16/32.
        with_cp: gradient checkpointing (the hosts' name): in training, each block's
            activations are recomputed in the backward pass instead of being stored.
        pretrained: a checkpoint path, as stock mmseg / mmdet configs pass it
            (`model.pretrained`); the same as init_cfg=dict(type='Pretrained', checkpoint=...),
            so it may not be given together with init_cfg.
    """

    ARCH_KEYS = ARCH_KEYS  # the keys of an `arch` dict (config checks read them here)
    # parameters that never come from a checkpoint: `load_pretrained` does not report them
    FRESH_PREFIXES: tuple[str, ...] = ('pyramid.',)

    def __init__(self,
                 arch: str | dict = 'base',
                 embed_dims: int | None = None,
                 num_layers: int | None = None,
                 num_heads: int | None = None,
                 mlp_ratio: float | None = None,
                 img_size: int | Sequence[int] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 qkv_bias: str | bool = 'qkv',
                 use_abs_pos_emb: bool = True,
                 rel_pos_bias: str = 'none',
                 layer_scale_init_value: float = 0.0,
                 drop_rate: float = 0.0,
                 attn_drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0,
                 out_indices: int | Sequence[int] | None = None,
                 out_type: str = 'cls_token',
                 final_norm: bool = True,
                 use_mask_token: bool = False,
                 pad_to_patch: bool = True,
                 frozen_stages: int = -1,
                 norm_eps: float = 1e-6,
                 pyramid: dict | None = None,
                 with_cp: bool = False,
                 pretrained: str | None = None,
                 init_cfg: dict | list | None = None) -> None:
        super().__init__(init_cfg=pretrained_init_cfg(pretrained, init_cfg))
        arch = resolve_arch(arch, embed_dims=embed_dims, num_layers=num_layers,
                            num_heads=num_heads, mlp_ratio=mlp_ratio)
        qkv_bias = 'qkv' if qkv_bias is True else 'none' if qkv_bias is False else qkv_bias
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        check_choices(qkv_bias, rel_pos_bias, out_type, patch_size, img_size)
        self.embed_dims = embed_dims = int(arch['embed_dims'])
        self.num_layers = num_layers = int(arch['num_layers'])
        self.num_heads = int(arch['num_heads'])
        mlp_ratio = float(arch.get('mlp_ratio', 4.0))
        self.out_indices = resolve_out_indices(out_indices, num_layers, pyramid, out_type)
        if not -1 <= frozen_stages <= num_layers:
            raise ValueError(f'frozen_stages={frozen_stages}; allowed: -1..{num_layers}')

        self.img_size = img_size
        self.patch_size = patch_size
        self.grid = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.out_type = out_type
        self.frozen_stages = frozen_stages
        self.with_cp = bool(with_cp)
        self.num_extra_tokens = 1  # the cls token
        self._build_embeddings(in_channels, pad_to_patch, use_mask_token, use_abs_pos_emb,
                               drop_rate, rel_pos_bias)
        self._build_blocks(mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, drop_path_rate,
                           layer_scale_init_value, norm_eps, rel_pos_bias, final_norm)
        self.pyramid = None
        if pyramid is not None:
            from .pyramid_adapter import ViTPyramidAdapter  # imports mmseg
            self.pyramid = ViTPyramidAdapter(in_channels=embed_dims, **pyramid)
        self._freeze_stages()
        # every load_state_dict (also of a model holding this one) fits the tables first
        self.register_load_state_dict_pre_hook(PeCoViT.fit_loaded_state)

    def _build_embeddings(self, in_channels: int, pad_to_patch: bool, use_mask_token: bool,
                          use_abs_pos_emb: bool, drop_rate: float, rel_pos_bias: str) -> None:
        """Patch embedding, [CLS] and [MASK] tokens, position tables."""
        C = self.embed_dims
        self.patch_embed = PatchEmbed(self.patch_size, in_channels, C, pad_to_patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, C)) if use_mask_token else None
        num_patches = self.grid[0] * self.grid[1]
        self.pos_embed = (nn.Parameter(torch.zeros(1, 1 + num_patches, C))
                          if use_abs_pos_emb else None)
        self.pos_drop = nn.Dropout(drop_rate)
        self.rel_pos_bias = (RelativePositionBias(self.grid, self.num_heads)
                             if rel_pos_bias == 'shared' else None)

    def _build_blocks(self, mlp_ratio: float, qkv_bias: str, drop_rate: float,
                      attn_drop_rate: float, drop_path_rate: float,
                      layer_scale_init_value: float, norm_eps: float, rel_pos_bias: str,
                      final_norm: bool) -> None:
        """The transformer blocks (stochastic depth rising linearly) and the final norms."""
        C = self.embed_dims
        dpr = torch.linspace(0, drop_path_rate, self.num_layers).tolist()
        self.blocks = nn.ModuleList([
            Block(C, self.num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate,
                  dpr[i], layer_scale_init_value, norm_eps,
                  rel_pos_grid=self.grid if rel_pos_bias == 'per_block' else None)
            for i in range(self.num_layers)
        ])
        self.norm = nn.LayerNorm(C, eps=norm_eps) if final_norm else nn.Identity()
        self.fc_norm = (nn.LayerNorm(C, eps=norm_eps)
                        if self.out_type == 'avg_featmap' and not final_norm else nn.Identity())

    # ---- initialisation -----------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, path: str, **overrides) -> 'PeCoViT':
        """Build the PeCoViT a checkpoint file describes and load its weights strictly.

        Any layout `peco_mm.checkpoint` reads (PeCo, BEiT, timm, MAE, MoCo v3, DINO,
        mmpretrain). `overrides` replace inferred arguments (out_type, out_indices, img_size,
        drop_path_rate, ...); `num_heads=` goes into `arch`, and `fmt=` names the source format
        when detection cannot tell. Weights an override makes unnecessary (fc_norm without
        pooled output, mask_token) are skipped with a log line; any other missing or
        unexpected key raises.
        """
        ckpt = read_checkpoint(path)
        fmt = overrides.pop('fmt', None)
        per_block = overrides.get('rel_pos_bias') == 'per_block'
        conv = convert_checkpoint(ckpt, fmt, per_block_rel_pos=per_block)
        if conv.unrecognised:
            raise ValueError(f'{path} ({conv.fmt}): cannot map these keys to PeCoViT: '
                             f'{conv.unrecognised}')
        kwargs = copy.deepcopy(conv.kwargs)
        if 'num_heads' in overrides:
            kwargs['arch']['num_heads'] = int(overrides.pop('num_heads'))
        kwargs.update(overrides)
        model = cls(**kwargs)
        sd = dict(conv.state_dict)
        optional = []
        if isinstance(model.fc_norm, nn.Identity):
            optional += [k for k in sd if k.startswith('fc_norm.')]
        if model.mask_token is None:
            optional += [k for k in sd if k == 'mask_token']
        if isinstance(model.norm, nn.Identity):  # final_norm=False: raw block outputs only
            optional += [k for k in sd if k.startswith('norm.')]
        for k in optional:
            sd.pop(k)
        missing, unexpected = model.load_state_dict(sd, strict=False)
        if missing or unexpected:
            args = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
            raise ValueError(f'{path} ({conv.fmt}) does not fit PeCoViT({args}): '
                             f'missing keys {missing}, unexpected keys {unexpected}')
        if optional:
            log(f'PeCoViT.from_checkpoint: {path}: skipped {optional} (not used with these '
                'arguments)')
        return model

    def checkpoint_filter(self, state_dict: dict, prefix: str = '') -> dict:
        """Make a PeCoViT-named state dict fit this model, in place (and return it).

        The one adapter of tables, on the idea of timm's `checkpoint_filter_fn`: a shared
        relative-position table is copied into every block when this model has per-block
        tables, position tables are resized to this model's grid (BEiT's geometric resize for
        relative positions), and a width or patch-size mismatch is an error naming both sides.
        `load_state_dict` calls it, so every loader goes through it.
        """
        wkey = prefix + 'patch_embed.proj.weight'
        if wkey in state_dict:
            w = state_dict[wkey]
            if w.shape[0] != self.embed_dims:
                raise ValueError(f'checkpoint width {w.shape[0]} (from {wkey}) does not match '
                                 f'the config: PeCoViT embed_dims={self.embed_dims}; pick the '
                                 'arch that matches the checkpoint (tools/convert_checkpoint.py '
                                 'prints it)')
            if tuple(w.shape[-2:]) != (self.patch_size, self.patch_size):
                raise ValueError(f'checkpoint patch size {tuple(w.shape[-2:])} (from {wkey}) '
                                 f'does not match the config: patch_size={self.patch_size}')
        per_block = self.blocks[0].rel_pos_bias is not None
        fit_position_tables(state_dict, self.grid, self.num_layers if per_block else None,
                            prefix, self.num_extra_tokens, self.embed_dims)
        return state_dict

    def init_weights(self) -> None:
        if self.init_cfg is not None and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg['checkpoint'], self.init_cfg.get('prefix'))
            self._is_init = True
            return
        super().init_weights()
        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=0.02)
        trunc_normal_(self.cls_token, std=0.02)
        if self.mask_token is not None:
            trunc_normal_(self.mask_token, std=0.02)
        for name, m in self.named_modules():
            if name.startswith('pyramid'):
                continue
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # BEiT: shrink residual branches with depth so the stream stays O(1) at init
        for i, blk in enumerate(self.blocks):
            blk.attn.proj.weight.data.div_(math.sqrt(2.0 * (i + 1)))
            blk.mlp.fc2.weight.data.div_(math.sqrt(2.0 * (i + 1)))

    # ---- forward, by step -----------------------------------------------------------------
    def embed(self, x: torch.Tensor, mask: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, tuple[int, int]]:
        """Patchify, replace masked patches by [MASK], prepend cls, add position: (B, 1+N, C)."""
        x, grid = self.patch_embed(x)  # (B, N, C)
        B, N, _ = x.shape
        if mask is not None:
            if self.mask_token is None:
                raise ValueError('a mask was given but PeCoViT was built with '
                                 'use_mask_token=False')
            w = mask.reshape(B, N, 1).to(x.dtype)  # (B, N, 1), 1 = masked
            x = x * (1 - w) + self.mask_token.to(x.dtype) * w
        x = torch.cat([self.cls_token.expand(B, -1, -1).to(x.dtype), x], dim=1)
        if self.pos_embed is not None:
            x = x + resize_pos_embed(self.pos_embed, self.grid, grid).to(x.dtype)
        return self.pos_drop(x), grid

    def forward_intermediates(self, x: torch.Tensor,
                              indices: int | Sequence[int] | None = None,
                              mask: torch.Tensor | None = None,
                              keep_ids: torch.Tensor | None = None,
                              norm: bool = False,
                              output_fmt: str = 'NCHW') -> list[torch.Tensor]:
        """The one loop over the blocks: the tokens after each block in `indices`.

        Every tensor is the raw output of its block unless `norm=True`, which applies the
        final LayerNorm to each one (as timm's `forward_intermediates`).

        Args:
            x: (B, C, H, W) images.
            indices: 0-based block indices (negatives count from the end), an int n for the
                last n blocks, or None for all blocks (timm's convention).
            mask: (B, N) or (B, h, w), 1 = replace the patch by [MASK] (BEiT).
            keep_ids: (B, L) patch indices to keep, the others dropped before the blocks (MAE's
                visible patches); needs output_fmt='NLC' and no relative-position bias.
            norm: apply the final norm to every returned tensor.
            output_fmt: 'NCHW': patch tokens as (B, C, h, w); 'NLC': all tokens, cls first,
                (B, 1+N, C) (or (B, 1+L, C) with keep_ids; timm's NLC drops the cls token).
        """
        if output_fmt not in ('NCHW', 'NLC'):
            raise ValueError(f"output_fmt={output_fmt!r}; allowed: 'NCHW', 'NLC'")
        idx = self.resolve_indices(indices)
        x, grid = self.embed(x, mask)  # (B, 1+N, C)
        if keep_ids is not None:
            if output_fmt != 'NLC' or self.rel_pos_bias is not None or \
                    self.blocks[0].rel_pos_bias is not None:
                raise ValueError("keep_ids needs output_fmt='NLC' and a ViT without "
                                 'relative-position bias')
            B, _, C = x.shape
            kept = x[:, 1:].gather(1, keep_ids.unsqueeze(-1).expand(-1, -1, C))  # (B, L, C)
            x = torch.cat([x[:, :1], kept], dim=1)  # (B, 1+L, C)
        shared = self.rel_pos_bias(grid) if self.rel_pos_bias is not None else None
        recompute = self.with_cp and self.training and torch.is_grad_enabled()
        taps = {}
        wanted = set(idx)
        for i, blk in enumerate(self.blocks[:max(wanted) + 1]):
            if recompute:
                x = checkpoint(blk, x, shared, grid, use_reentrant=False)
            else:
                x = blk(x, shared, grid)
            if i in wanted:
                taps[i] = self.norm(x) if norm else x
        outs = [taps[i] for i in idx]  # an index may repeat (a shallow model's pyramid)
        if output_fmt == 'NCHW':
            outs = [self.tokens_to_map(o, grid) for o in outs]
        return outs

    def resolve_indices(self, indices: int | Sequence[int] | None) -> list[int]:
        """Block indices as sorted non-negative ints (an int n: the last n blocks; None: all)."""
        L = self.num_layers
        if indices is None:
            return list(range(L))
        if isinstance(indices, int):
            if not 0 < indices <= L:
                raise ValueError(f'indices={indices}: the last n blocks needs 1 <= n <= {L}')
            return list(range(L - indices, L))
        out = []
        for i in indices:
            if not -L <= int(i) < L:
                raise ValueError(f'block index {i} is out of range for {L} blocks')
            out.append(int(i) % L)
        return sorted(out)

    def tokens_to_map(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """(B, 1+N, C) tokens -> (B, C, h, w) patch map (cls dropped)."""
        patches = x[:, self.num_extra_tokens:]  # (B, N, C)
        B, N, C = patches.shape
        return patches.transpose(1, 2).reshape(B, C, grid[0], grid[1])

    def forward_features(self, x: torch.Tensor, mask: torch.Tensor | None = None
                         ) -> torch.Tensor:
        """All tokens after the last block and the final norm: (B, 1+N, C)."""
        return self.forward_intermediates(x, [-1], mask, norm=True, output_fmt='NLC')[0]

    def format_output(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """The host's view of (B, 1+N, C) tokens, by `out_type`."""
        if self.out_type == 'cls_token':
            return x[:, 0]  # (B, C)
        if self.out_type == 'avg_featmap':
            return self.fc_norm(x[:, self.num_extra_tokens:].mean(dim=1))  # (B, C)
        return self.tokens_to_map(x, grid)  # (B, C, h, w)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, ...]:
        """The OpenMMLab backbone interface (mmpretrain, mmseg, mmdet): one output per
        `out_indices` entry, by `out_type`; the final norm is applied to the last block's
        output only (cls token and pooled features; dense configs build without it)."""
        grid = patch_grid(x, self.patch_size)
        taps = self.forward_intermediates(x, self.out_indices, mask, output_fmt='NLC')
        last = self.num_layers - 1
        outs = [self.format_output(self.norm(t) if i == last else t, grid)
                for i, t in zip(self.out_indices, taps)]
        if self.pyramid is not None:
            return tuple(self.pyramid(outs))
        return tuple(outs)

    # ---- training protocol ------------------------------------------------------------------
    def get_layer_depth(self, param_name: str, prefix: str = '') -> tuple[int, int]:
        """Depth of a parameter for layer-wise lr decay, and the number of depths (L + 2).

        0: patch embedding, cls / mask tokens, absolute position embedding;
        1..L: block i-1 (its own relative-position table included);
        L+1: everything after the blocks (final norm, pyramid, necks, heads) and the shared
        relative-position table, as in BEiT's fine-tuning recipe.
        """
        num_depths = self.num_layers + 2
        if not param_name.startswith(prefix):
            return num_depths - 1, num_depths
        name = param_name[len(prefix):]
        if name in ('cls_token', 'mask_token', 'pos_embed') or name.startswith('patch_embed'):
            return 0, num_depths
        if name.startswith('blocks.'):
            return int(name.split('.')[1]) + 1, num_depths
        return num_depths - 1, num_depths

    def no_weight_decay(self) -> set[str]:
        """Parameter names exempt from weight decay, BEiT's rule (unilm's optimiser factory
        and mmpretrain's BEiT configs, pretraining and fine-tuning alike): 1-d parameters
        (norms, biases, layer scales), the cls token and the absolute position embedding. The
        [MASK] token and the relative-position tables are decayed, as BEiT decays them."""
        names = {'cls_token'} | ({'pos_embed'} if self.pos_embed is not None else set())
        return names | {name for name, p in self.named_parameters() if p.ndim <= 1}

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        frozen: list[nn.Module | nn.Parameter] = [self.patch_embed, self.cls_token]
        frozen += [p for p in (self.pos_embed, self.mask_token) if p is not None]
        if self.rel_pos_bias is not None:
            frozen.append(self.rel_pos_bias)
        frozen += list(self.blocks[:self.frozen_stages])
        if self.frozen_stages == self.num_layers:
            frozen.append(self.norm)
        for item in frozen:
            if isinstance(item, nn.Parameter):
                item.requires_grad_(False)
            else:
                item.eval()
                for p in item.parameters():
                    p.requires_grad_(False)

    def train(self, mode: bool = True) -> 'PeCoViT':
        super().train(mode)
        self._freeze_stages()
        return self

    # ---- checkpoint loading: resize tables, expand a shared table per block -------------------
    def fit_loaded_state(self, state_dict: dict, prefix: str, *_) -> None:
        """torch's load_state_dict pre-hook (`register_load_state_dict_pre_hook`, in
        `__init__`): `checkpoint_filter` on the keys under this module's `prefix`."""
        self.checkpoint_filter(state_dict, prefix)
