"""PeCo: BERT pre-training of a ViT over a perceptual codebook (Dong et al., AAAI 2023, Sec. 3.3).

For an image x, block-wise masked patches are replaced by a learnable [MASK] embedding; the
ViT's last hidden states h^t at the masked positions t ∈ M are classified into the K codewords
of the frozen perceptual tokenizer, k^t = q(Enc(x))^t, with the cross-entropy of Eq. 7.

The step never synchronises with the host: masks carry a fixed count M per image (the mask
generators of `peco_mm.datasets.mim_transforms`), so the masked positions are gathered with static
shapes (top-k of the mask, not `feats[mask]`), and the count is checked on the device.
"""
from __future__ import annotations

import os.path as osp

import torch
import torch.nn as nn
from mmpretrain.models.selfsup.base import BaseSelfSupervisor
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from ..layers.pos_embed import patch_grid
from ..registry import MODELS


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class PeCo(BaseSelfSupervisor):
    """The MIM algorithm: PeCoViT with a mask token, a frozen tokenizer, a K-way head.

    Args:
        backbone: a `PeCoViT` config with `use_mask_token=True` (out_type is ignored: the
            loss reads `forward_features`).
        head: a `PeCoMIMHead` config; `in_channels` defaults to the backbone (or neck) width,
            `num_classes` to the tokenizer's codebook size, and must equal it when given.
        target_generator: the frozen tokenizer: `dict(type='FrozenPeCoTokenizer',
            checkpoint=PATH)`, which reads its architecture from the tokenizer checkpoint
            (anything with `encode(img) -> (B, h, w) codes` works), or a generator returning
            (B, K, h, w) logits such as mmpretrain's `DALL-E` with its weights in `init_cfg`
            (`dict(type='Pretrained', checkpoint=...)`). The file is checked when the model
            is built.
        num_masked: masked patches per image; None reads it from the first batch (one host
            read, once) and then only checks it on the device.
        target_chunk: images the tokenizer encodes at a time (None: the whole batch at once).
            The codes are the same; the encoder's activations at 224 px (about 84 MiB per
            image on a GPU) then stop growing with the batch, which at 256 images per GPU was
            the peak memory of a ViT-B step, and of a ViT-L step with `with_cp`.
        require_target_checkpoint: refuse a tokenizer config without pretrained weights
            (random targets teach nothing). Benchmarks and tests switch it off.
        data_preprocessor: `OneViewTwoNormDataPreprocessor` (the shipped configs: one view
            normalised for the ViT and for the tokenizer), mmpretrain's
            `TwoNormDataPreprocessor` for two views (ViT input, tokenizer input), or
            `SelfSupDataPreprocessor` for one view fed to both as it is.
    """

    def __init__(self,
                 backbone: dict,
                 head: dict,
                 target_generator: dict | nn.Module,
                 num_masked: int | None = None,
                 target_chunk: int | None = 64,
                 require_target_checkpoint: bool = True,
                 data_preprocessor: dict | nn.Module | None = None,
                 init_cfg: dict | list | None = None,
                 neck: dict | None = None) -> None:
        if target_generator is None:
            raise ValueError(f'{type(self).__name__} needs a target_generator (the frozen '
                             'tokenizer, e.g. dict(type="FrozenPeCoTokenizer", checkpoint=...))')
        if require_target_checkpoint and isinstance(target_generator, dict):
            check_target_checkpoint(target_generator)
        for key, value in (('num_masked', num_masked), ('target_chunk', target_chunk)):
            if value is not None and value < 1:
                raise ValueError(f'{key}={value}; allowed: None or a positive int')
        # shapes come from the parts: the head's width from the module before it, its
        # classes from the tokenizer (a value given in the config is checked against it)
        backbone, target_generator = build(backbone), build(target_generator)
        if isinstance(neck, dict):
            neck = build(dict(neck, in_channels=neck.get('in_channels', backbone.embed_dims)))
        head = dict(head) if isinstance(head, dict) else head
        if isinstance(head, dict):
            head.setdefault('in_channels', getattr(neck, 'embed_dims', backbone.embed_dims))
            k = codebook_size(target_generator)
            if k is not None:
                head.setdefault('num_classes', k)
        super().__init__(backbone=backbone, neck=neck, head=head,
                         target_generator=target_generator,
                         data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.num_masked = num_masked
        self.target_chunk = target_chunk
        self.check_parts()
        self.freeze_target_generator()

    # ---- construction checks -------------------------------------------------------------
    def check_parts(self) -> None:
        if getattr(self.backbone, 'mask_token', None) is None:
            raise ValueError('PeCo: backbone has no mask token; build PeCoViT with '
                             'use_mask_token=True')
        self.check_codebook_size(codebook_size(self.target_generator))

    def check_codebook_size(self, k: int | None) -> None:
        if k is not None and k != self.head.num_classes:
            raise ValueError(
                f'{type(self).__name__}: tokenizer codebook size {k} (target_generator) != '
                f'head classes {self.head.num_classes} (head.num_classes); set '
                f'head.num_classes={k}')

    def freeze_target_generator(self) -> None:
        self.target_generator.requires_grad_(False)
        self.target_generator.eval()

    def train(self, mode: bool = True) -> 'PeCo':
        super().train(mode)
        self.target_generator.eval()  # EMA codebooks, GroupNorm/BN statistics stay fixed
        return self

    # ---- steps ----------------------------------------------------------------------------
    @torch.no_grad()
    def tokenize(self, img: torch.Tensor) -> torch.Tensor:
        """The frozen tokenizer's codes of the target view: (B, h, w) long, no grad, encoded
        `target_chunk` images at a time."""
        if self.target_generator.training:
            raise RuntimeError('PeCo: the target generator is in training mode; it must stay '
                               'frozen (do not call .train() on it)')
        if not self.target_chunk or img.shape[0] <= self.target_chunk:
            return self.codes_of(img)  # one call, no copy
        return torch.cat([self.codes_of(chunk) for chunk in img.split(self.target_chunk)])

    def codes_of(self, img: torch.Tensor) -> torch.Tensor:
        """(b, 3, H, W) -> (b, h, w) long codes of the target generator."""
        tg = self.target_generator
        if hasattr(tg, 'encode'):
            return tg.encode(img).long()  # (b, h, w)
        logits = tg(img)  # (b, K, h, w), e.g. DALL-E
        self.check_codebook_size(logits.shape[1])
        return logits.argmax(dim=1)

    def mask_count(self, mask: torch.Tensor) -> int:
        """M, the fixed number of masked patches of every (B, N) mask: read from the first
        batch once (or given as num_masked), then checked on the device, no host sync."""
        N = mask.shape[1]
        if self.num_masked is None:  # read once; later batches are checked on the device
            self.num_masked = int(mask[0].sum())
        M = self.num_masked
        if not 0 < M <= N:
            raise ValueError(f'{type(self).__name__}: {M} masked patches for a grid of {N}')
        torch._assert_async(
            (mask.sum(dim=1) == M).all(),
            f'{type(self).__name__}: every mask must have exactly num_masked={M} patches (the '
            'mask generators of peco_mm.datasets.mim_transforms give an exact count)')
        return M

    def masked_positions(self, mask: torch.Tensor) -> torch.Tensor:
        """(B, N) bool mask -> (B, M) indices of its masked patches, M fixed, no host sync."""
        M = self.mask_count(mask)
        return mask.float().topk(M, dim=1, sorted=False).indices  # (B, M)

    def masked_batch(self, inputs: list[torch.Tensor], data_samples: list
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ViT's view (B, 3, H, W), the data samples' masks (B, N) bool and the frozen
        tokenizer's codes of the target view (B, h, w), checked to share one patch grid."""
        img, target_img = inputs[0], inputs[-1]  # one view serves both when only one is given
        if not data_samples or any(getattr(ds, 'mask', None) is None for ds in data_samples):
            raise ValueError(f'{type(self).__name__}: the data samples carry no mask; put a '
                             "mask generator in the pipeline (dict(type='BlockwiseMaskGenerator'"
                             ", ...) or dict(type='RandomMaskGenerator', ...))")
        mask = torch.stack([ds.mask for ds in data_samples]).flatten(1).bool()  # (B, N)
        codes = self.tokenize(target_img)  # (B, h, w), before the ViT so its memory is freed
        grid = patch_grid(img, self.backbone.patch_size)
        if tuple(codes.shape[-2:]) != grid or grid[0] * grid[1] != mask.shape[1]:
            raise ValueError(
                f'{type(self).__name__}: tokenizer latent grid {tuple(codes.shape[-2:])} (from '
                f'a {tuple(target_img.shape[-2:])} target view) != ViT patch grid {grid} (from '
                f'a {tuple(img.shape[-2:])} input, patch {self.backbone.patch_size}), mask has '
                f'{mask.shape[1]} patches; make target size / tokenizer downsample equal '
                'image size / patch size (the crop\'s second_size sets the target size) and '
                'the mask generator input_size equal the grid')
        return img, mask, codes

    def loss(self, inputs: list[torch.Tensor], data_samples: list) -> dict[str, torch.Tensor]:
        """Eq. 7: cross-entropy of the head's logits against the codes at masked positions."""
        img, mask, codes = self.masked_batch(inputs, data_samples)
        ids = self.masked_positions(mask)  # (B, M)
        feats = self.backbone.forward_features(img, mask)[:, 1:]  # (B, N, C), cls dropped
        feats = gather_tokens(feats, ids)  # (B, M, C)
        target = codes.flatten(1).gather(1, ids)  # (B, M)
        return self.head.loss(feats, target)

    def extract_feat(self, inputs: torch.Tensor | list[torch.Tensor]):
        img = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        return self.backbone(img)

    @torch.no_grad()
    def predict_codes(self, img: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Predicted codes at every position of a masked image: (B, h, w) long."""
        grid = patch_grid(img, self.backbone.patch_size)
        feats = self.backbone.forward_features(img, mask.flatten(1).bool())[:, 1:]
        return self.head(feats).argmax(-1).reshape(img.shape[0], *grid)


# ---- helpers ---------------------------------------------------------------------------------
def build(cfg: dict | nn.Module | None) -> nn.Module | None:
    return MMPRETRAIN_MODELS.build(cfg) if isinstance(cfg, dict) else cfg


def gather_tokens(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """x (B, N, C), ids (B, M) -> (B, M, C)."""
    return x.gather(1, ids.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def codebook_size(tg: nn.Module) -> int | None:
    """K of a tokenizer, when it says it (`num_embeddings` / `vocab_size`)."""
    for name in ('num_embeddings', 'codebook_size', 'vocab_size'):
        k = getattr(tg, name, None)
        if isinstance(k, int):
            return k
    return None


def check_target_checkpoint(cfg: dict) -> None:
    """Fail at build time, naming the key, when the tokenizer's weights are not given/found."""
    path, key = None, None
    for k in ('checkpoint', 'pretrained'):
        if cfg.get(k):
            path, key = cfg[k], f'target_generator.{k}'
    init_cfgs = cfg.get('init_cfg') or []
    for i, init in enumerate(init_cfgs if isinstance(init_cfgs, list) else [init_cfgs]):
        if init.get('type') == 'Pretrained':
            path = init.get('checkpoint')
            key = 'target_generator.init_cfg' + (f'[{i}]' if isinstance(init_cfgs, list) else '')
            key += '.checkpoint'
    if path is None:
        key = ('model.target_generator.checkpoint' if cfg.get('type') == 'FrozenPeCoTokenizer'
               else "model.target_generator.init_cfg=dict(type='Pretrained', checkpoint=...)")
        raise ValueError(
            f'PeCo: the tokenizer ({cfg.get("type")}) has no pretrained weights: set {key} to '
            'a trained tokenizer (configs/peco/tokenizer_*.py); random targets teach nothing')
    if '://' not in str(path) and not osp.isfile(path):
        raise FileNotFoundError(
            f'PeCo: tokenizer checkpoint {path!r} ({key}) not found; set --cfg-options '
            f'model.{key}=PATH to a tokenizer trained with tools/train.py '
            '(configs/peco/tokenizer_vqvae_in1k.py)')
