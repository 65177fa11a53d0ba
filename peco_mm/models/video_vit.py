"""PeCoTimeSformer: PeCoViT with divided space-time attention, for video recognition.

Implements TimeSformer's divided space-time attention (Bertasius et al., ICML 2021) on PeCo's
ViT, as PeCo fine-tunes it on Kinetics-400 and Something-Something v2 (Dong et al., AAAI 2023,
appendix, Table 9): every block first attends over time (each token with the same token of the
other frames), then runs the image block on each frame (spatial attention with its
relative-position bias and layer scale, then the MLP).

Two choices make the network at initialisation equal to the image model applied to each frame
(so an ImageNet checkpoint starts from exactly what it learnt):
- the temporal branch ends in a linear projection initialised to zero (TimeSformer's
  `temporal_fc`), and the temporal position embedding starts at zero;
- every frame keeps its own cls token through the blocks (TimeSformer shares one cls token and
  averages it over frames after each block, which is not the image model per frame); the
  temporal attention runs over all tokens, cls included, and the output averages over frames.

The image parts keep PeCoViT's names, so PeCo / BEiT / DeiT checkpoints load through PeCoViT's
one checkpoint path (`init_cfg=dict(type='Pretrained', ...)`); the temporal parts
(`temporal_blocks.*`, `time_embed`) start from their initialisation.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.init import trunc_normal_
from torch.utils.checkpoint import checkpoint

from ..layers.attention import Attention
from ..registry import MODELS
from .pretrained import load_pretrained
from .vit import PeCoViT


class TemporalAttention(nn.Module):
    """Pre-norm self-attention over the frames of one token position, then a zero-initialised
    projection (TimeSformer's `temporal_fc`); returns the residual branch, not the sum."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: str, attn_drop: float,
                 proj_drop: float, norm_eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.temporal_fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B * (1+N), T, C)
        return self.temporal_fc(self.attn(self.norm(x)))


@MODELS.register_module()
class PeCoTimeSformer(PeCoViT):
    """Video backbone: PeCoViT with a temporal attention before each block (see the module
    docstring). Input (B, C, T, H, W) clips (mmaction2's `NCTHW`); output (B, C) features,
    the per-frame cls tokens (`out_type='cls_token'`) or patch tokens (`'avg_featmap'`)
    averaged over frames, as mmaction2's TimeSformerHead consumes them.

    Args:
        num_frames: T, the frames per clip the temporal position embedding is stored for
            (linearly resized for other clip lengths).
        out_type: 'cls_token' or 'avg_featmap'.
        **kwargs: PeCoViT's arguments (arch, qkv_bias, rel_pos_bias, layer_scale_init_value,
            drop_path_rate, init_cfg, ...); the temporal attention uses the same width,
            heads, q/k/v bias and dropouts.
    """

    # initialised here, never read from an image checkpoint (and what the load log adds)
    FRESH_PREFIXES = ('pyramid.', 'temporal_blocks.', 'time_embed')
    FRESH_NOTE = (' (the temporal attention projects to zero and the time embedding is zero: '
                  'the model starts as the image model on each frame)')

    def __init__(self, num_frames: int = 8, out_type: str = 'cls_token', **kwargs) -> None:
        if not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f'num_frames={num_frames!r} must be a positive int')
        if out_type not in ('cls_token', 'avg_featmap'):
            raise ValueError(f"out_type={out_type!r}; a video backbone allows 'cls_token' or "
                             "'avg_featmap'")
        for key in ('pyramid', 'use_mask_token', 'out_indices'):
            if kwargs.get(key) not in (None, False):
                raise ValueError(f'PeCoTimeSformer does not take {key}={kwargs[key]!r}')
        super().__init__(out_type=out_type, **kwargs)
        self.num_frames = num_frames
        C = self.embed_dims
        block = self.blocks[0]
        qkv_bias = ('qv' if block.attn.q_bias is not None else
                    'qkv' if block.attn.qkv.bias is not None else 'none')
        self.time_embed = nn.Parameter(torch.zeros(1, num_frames, C))
        self.temporal_blocks = nn.ModuleList([
            TemporalAttention(C, self.num_heads, qkv_bias, block.attn.attn_drop,
                              block.attn.proj_drop.p, block.norm1.eps)
            for _ in range(self.num_layers)])
        self.init_temporal()

    # ---- initialisation -------------------------------------------------------------------
    def init_temporal(self) -> None:
        """Zero temporal projection and position embedding (the network is then the image
        model per frame); truncated-normal attention weights as the image blocks."""
        nn.init.zeros_(self.time_embed)
        for tb in self.temporal_blocks:
            trunc_normal_(tb.attn.qkv.weight, std=0.02)
            trunc_normal_(tb.attn.proj.weight, std=0.02)
            for bias in (tb.attn.qkv.bias, tb.attn.proj.bias, tb.attn.q_bias, tb.attn.v_bias):
                if bias is not None:
                    nn.init.zeros_(bias)
            nn.init.ones_(tb.norm.weight)
            nn.init.zeros_(tb.norm.bias)
            nn.init.zeros_(tb.temporal_fc.weight)
            nn.init.zeros_(tb.temporal_fc.bias)

    def init_weights(self) -> None:
        if self.init_cfg is not None and self.init_cfg.get('type') == 'Pretrained':
            self.init_temporal()  # kept where the checkpoint has no temporal weights
            load_pretrained(self, self.init_cfg['checkpoint'], self.init_cfg.get('prefix'))
            self._is_init = True
            return
        super().init_weights()
        self.init_temporal()

    # ---- forward, by step -------------------------------------------------------------------
    def frames_to_images(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, T, H, W) clips -> (B*T, C, H, W) frames, frame-major within a clip."""
        if x.dim() != 5:
            raise ValueError(f'PeCoTimeSformer expects (B, C, T, H, W) clips, got shape '
                             f'{tuple(x.shape)}')
        B, C, T, H, W = x.shape
        return x.transpose(1, 2).reshape(B * T, C, H, W)

    def add_time_embed(self, x: torch.Tensor, T: int) -> torch.Tensor:
        """x (B, T, 1+N, C) + the temporal position embedding, resized to T frames."""
        time_embed = self.time_embed  # (1, T0, C)
        if T != time_embed.shape[1]:
            time_embed = F.interpolate(time_embed.transpose(1, 2), size=T, mode='linear',
                                       align_corners=False).transpose(1, 2)
        return x + time_embed.unsqueeze(2).to(x.dtype)

    def temporal_step(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, 1+N, C) + block i's temporal attention over T, per token position."""
        B, T, L, C = x.shape
        y = x.transpose(1, 2).reshape(B * L, T, C)  # (B*(1+N), T, C)
        y = self.temporal_blocks[i](y).reshape(B, L, T, C).transpose(1, 2)  # (B, T, 1+N, C)
        return x + self.blocks[i].drop_path(y)

    def spatial_step(self, i: int, x: torch.Tensor, shared: torch.Tensor | None,
                     grid: tuple[int, int]) -> torch.Tensor:
        """x (B, T, 1+N, C) through image block i, each frame on its own."""
        B, T, L, C = x.shape
        return self.blocks[i](x.reshape(B * T, L, C), shared, grid).reshape(B, T, L, C)

    def divided_block(self, i: int, x: torch.Tensor, shared: torch.Tensor | None,
                      grid: tuple[int, int]) -> torch.Tensor:
        return self.spatial_step(i, self.temporal_step(i, x), shared, grid)

    def forward_features(self, x: torch.Tensor, mask: torch.Tensor | None = None
                         ) -> torch.Tensor:
        """All tokens of every frame after the last block and the final norm: (B, T, 1+N, C)."""
        if mask is not None:
            raise ValueError('PeCoTimeSformer does not take a mask')
        B, T = x.shape[0], x.shape[2]
        frames = self.frames_to_images(x)  # (B*T, C, H, W)
        tokens, grid = self.embed(frames)  # (B*T, 1+N, C)
        tokens = self.add_time_embed(tokens.reshape(B, T, *tokens.shape[1:]), T)
        shared = self.rel_pos_bias(grid) if self.rel_pos_bias is not None else None
        recompute = self.with_cp and self.training and torch.is_grad_enabled()
        for i in range(self.num_layers):
            if recompute:
                tokens = checkpoint(self.divided_block, i, tokens, shared, grid,
                                    use_reentrant=False)
            else:
                tokens = self.divided_block(i, tokens, shared, grid)
        return self.norm(tokens)  # (B, T, 1+N, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, T, H, W) -> (B, C_embed) clip features (a tensor, as mmaction2's
        TimeSformer returns)."""
        tokens = self.forward_features(x)  # (B, T, 1+N, C)
        if self.out_type == 'cls_token':
            return tokens[:, :, 0].mean(dim=1)  # (B, C)
        return self.fc_norm(tokens[:, :, self.num_extra_tokens:].mean(dim=(1, 2)))  # (B, C)

    # ---- training protocol ------------------------------------------------------------------
    def get_layer_depth(self, param_name: str, prefix: str = '') -> tuple[int, int]:
        """PeCoViT's depths; block i's temporal attention shares block i's depth (i + 1) and
        the temporal position embedding the embeddings' depth (0)."""
        name = param_name[len(prefix):] if param_name.startswith(prefix) else None
        if name == 'time_embed':
            return 0, self.num_layers + 2
        if name is not None and name.startswith('temporal_blocks.'):
            return int(name.split('.')[1]) + 1, self.num_layers + 2
        return super().get_layer_depth(param_name, prefix)

    def no_weight_decay(self) -> set[str]:
        """PeCoViT's rule, plus the temporal position embedding (TimeSformer's recipe)."""
        return super().no_weight_decay() | {'time_embed'}
