"""PeCoTokenizer: the perceptual codebook of PeCo (Dong et al., AAAI 2023, Sec. 3.1-3.2, Eq. 5,
appendix B): a VQ-VAE trained with

    L = L_pixel + λ·L_percep (Eq. 4) + β·||sg[q] - Enc(x)||²  (+ 0.4·L_adv, ablation only)
      (+ w·L_codeword: Table 6's explicit classification / contrastive codeword losses)

and an EMA codebook (K = 8192, D = 256). After training, the encoder and the quantizer are the
tokenizer that produces the targets of masked image modeling: `FrozenPeCoTokenizer` rebuilds
them from a training checkpoint alone (its architecture is read from the config that
tools/train.py stores in the checkpoint).

Input normalisation: `encode`, `forward` and `decode` work on RGB images scaled to [-1, 1],
i.e. (pixel - 127.5) / 127.5, which is what `TokenizerDataPreprocessor` (the default data
preprocessor) produces from uint8 images. `TOKENIZER_MEAN` / `TOKENIZER_STD` state it for other
pipelines (e.g. the second view of a MIM data preprocessor).

    tok = FrozenPeCoTokenizer('work_dirs/tokenizer/epoch_100.pth')  # encoder + codebook
    codes = tok.encode(img)   # (B, 3, 224, 224) in [-1, 1] -> (B, 14, 14) long in [0, 8192)
    # in a pretraining config: target_generator=dict(type='FrozenPeCoTokenizer', checkpoint=...)
"""
from __future__ import annotations

import inspect
import os.path as osp
from typing import Sequence

import torch
import torch.nn.functional as F
import torch.nn as nn
from mmengine.model import BaseDataPreprocessor, BaseModel

from ..layers.quantizer import CODEBOOK_SIZE, EMAVectorQuantizer, codebook_stats
from ..checkpoint import is_url, parse_config_text, read_checkpoint, tokenizer_state_dict
from ..registry import MODELS
from ..utils.image import TOKENIZER_MEAN, TOKENIZER_STD, to_uint8
from ..utils.precision import native_bf16
from .cnn import CNNDecoder, CNNEncoder
from .codeword_loss import CODEWORD_LOSSES, build_codeword_loss
from .discriminator import PatchDiscriminator, discriminator_loss, generator_loss
from .perceptual import PerceptualLoss

ENCODER_TYPES = ('cnn', 'vit')
PIXEL_LOSSES = ('l1', 'l2')
# the PeCoTokenizer arguments that fix the encoder / decoder / codebook shapes: what a
# checkpoint's stored config must say (and all a frozen tokenizer takes from it)
ARCH_KEYS = ('encoder_type', 'base_channels', 'channel_mult', 'num_res_blocks',
             'decoder_base_channels', 'decoder_num_res_blocks', 'dropout', 'vit_cfg',
             'decoder_vit_cfg', 'num_embeddings', 'embed_dims')
TARGET_GENERATOR_KEY = 'model.target_generator.checkpoint'


# ---- data preprocessing -------------------------------------------------------------------------
def to_three_channels(img: torch.Tensor, where: str = 'an input image') -> torch.Tensor:
    """(..., C, H, W) with C in {1, 2, 3, 4} -> 3 channels: grey is repeated, alpha dropped."""
    c = img.shape[-3]
    if c == 3:
        return img
    if c in (1, 2):  # grey, grey + alpha
        return img.narrow(-3, 0, 1).expand(*img.shape[:-3], 3, *img.shape[-2:])
    if c == 4:  # colour + alpha
        return img.narrow(-3, 0, 3)
    raise ValueError(f'{where} has {c} channels; the tokenizer takes 1 (grey), 3 (colour) or '
                     '4 (colour + alpha) channels')


@MODELS.register_module()
class TokenizerDataPreprocessor(BaseDataPreprocessor):
    """uint8 images (BGR from mmcv's loader) -> RGB float in [-1, 1], stacked (B, 3, H, W).
    1- and 4-channel images are converted to 3 channels; other counts are an error naming
    the file. On same-size colour batches this is mmengine's `ImgDataPreprocessor` with the
    tokenizer's mean / std and `bgr_to_rgb=True` (tested); it is kept for the channel
    conversion and because mmengine's pads a batch of mixed sizes silently, which would put
    padding into the codes, where this one refuses the batch."""

    def __init__(self, mean: Sequence[float] = TOKENIZER_MEAN,
                 std: Sequence[float] = TOKENIZER_STD,
                 to_rgb: bool = True, non_blocking: bool = False) -> None:
        super().__init__(non_blocking)
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f'mean={mean}, std={std}: need three values each, std > 0')
        self.to_rgb = to_rgb
        self.register_buffer('mean', torch.tensor(mean).view(1, 3, 1, 1), False)
        self.register_buffer('std', torch.tensor(std).view(1, 3, 1, 1), False)

    def forward(self, data: dict, training: bool = False) -> dict:
        data = self.cast_data(data)
        inputs, samples = data['inputs'], data.get('data_samples')
        imgs = []
        for i, img in enumerate(inputs):  # a list or a stacked tensor of (C, H, W)
            imgs.append(to_three_channels(img, _describe(samples, i)))
        sizes = {tuple(im.shape[-2:]) for im in imgs}
        if len(sizes) > 1:
            raise ValueError(f'images of one batch differ in size {sorted(sizes)}; crop or '
                             'resize them to one size in the pipeline')
        x = torch.stack(imgs).float()  # (B, 3, H, W)
        if self.to_rgb:
            x = x.flip(1)
        x = (x - self.mean) / self.std
        return dict(inputs=x, data_samples=samples)


def _describe(samples, i: int) -> str:
    try:
        path = samples[i].metainfo.get('img_path')
    except (AttributeError, IndexError, TypeError):
        path = None
    return f'image {path!r}' if path else f'image {i} of the batch'


# ---- the parts and the encode path shared by the trainable and the frozen tokenizer -----------
def build_codec(embed_dims: int, encoder_type: str = 'cnn', base_channels: int = 64,
                channel_mult: Sequence[int] = (1, 2, 4, 8, 8), num_res_blocks: int = 2,
                decoder_base_channels: int | None = None,
                decoder_num_res_blocks: int | None = None, dropout: float = 0.0,
                vit_cfg: dict | None = None, decoder_vit_cfg: dict | None = None,
                with_decoder: bool = True) -> tuple[nn.Module, nn.Module | None]:
    """(encoder, decoder or None) of a tokenizer; arguments as `PeCoTokenizer`'s."""
    if encoder_type not in ENCODER_TYPES:
        raise ValueError(f'encoder_type={encoder_type!r}; allowed: {ENCODER_TYPES}')
    decoder = None
    if encoder_type == 'cnn':
        encoder = CNNEncoder(3, embed_dims, base_channels, channel_mult, num_res_blocks,
                             dropout)
        if with_decoder:
            decoder = CNNDecoder(embed_dims, 3, decoder_base_channels or base_channels,
                                 channel_mult, decoder_num_res_blocks or num_res_blocks,
                                 dropout)
    else:
        from .vit_codec import ViTDecoder, ViTEncoder
        encoder = ViTEncoder(embed_dims, **(vit_cfg or {}))
        if with_decoder:
            decoder = ViTDecoder(embed_dims, **(decoder_vit_cfg or vit_cfg or {}))
    return encoder, decoder


def check_loss_args(pixel_loss: str, perceptual_weight: float, adversarial_weight: float,
                    codeword_loss: str | None, codeword_loss_weight: float,
                    in_channels: int) -> None:
    """Refuse an unknown loss name, a negative loss weight or non-RGB input channels."""
    if pixel_loss not in PIXEL_LOSSES:
        raise ValueError(f'pixel_loss={pixel_loss!r}; allowed: {PIXEL_LOSSES}')
    if perceptual_weight < 0 or adversarial_weight < 0 or codeword_loss_weight < 0:
        raise ValueError(f'perceptual_weight={perceptual_weight}, adversarial_weight='
                         f'{adversarial_weight}, codeword_loss_weight='
                         f'{codeword_loss_weight}: loss weights must be >= 0')
    if codeword_loss not in (None, *CODEWORD_LOSSES):
        raise ValueError(f'codeword_loss={codeword_loss!r}; allowed: None, '
                         f'{", ".join(map(repr, CODEWORD_LOSSES))}')
    if in_channels != 3:
        raise ValueError(f'in_channels={in_channels}; the tokenizer works on RGB images '
                         '(grey and RGBA inputs are converted to 3 channels)')


ENCODE_PRECISIONS = (False, True, 'auto')


def check_encode_bf16(encode_bf16) -> bool | str:
    """`encode_bf16` itself, or a ValueError naming the allowed settings."""
    if not (isinstance(encode_bf16, bool) or encode_bf16 == 'auto'):
        raise ValueError(f'encode_bf16={encode_bf16!r}; expected one of {ENCODE_PRECISIONS}')
    return encode_bf16


def bf16_targets(encode_bf16: bool | str, device: torch.device) -> bool:
    """Whether `encode` runs its encoder in bf16 on `device` for an `encode_bf16` setting
    (False / True / 'auto': bf16 only where `device` computes it natively); the setting was
    checked when the tokenizer was built (`check_encode_bf16`)."""
    return native_bf16(device) if encode_bf16 == 'auto' else bool(encode_bf16)


class TokenizerEncoding:
    """`encode` / `decode` over `self.encoder`, `self.quantizer` and `self.decoder` (or None),
    shared by `PeCoTokenizer` and `FrozenPeCoTokenizer`."""
    encoder: nn.Module
    decoder: nn.Module | None
    quantizer: EMAVectorQuantizer
    channels_last: bool
    encode_bf16: bool | str

    @property
    def num_embeddings(self) -> int:
        return self.quantizer.num_embeddings

    @property
    def embed_dims(self) -> int:
        return self.quantizer.embed_dims

    @property
    def downsample(self) -> int:
        return self.encoder.downsample

    def encode(self, img: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        """(B, 3, H, W) images in [-1, 1] -> (B, H/s, W/s) long codes, s = self.downsample.
        Runs under inference mode, channels-last when set. The encoder runs in bf16 autocast
        when `bf16` is True (on the images' device, CPU included), in fp32 when False, and by
        default as `encode_bf16` says (`bf16_targets`); the nearest-codeword search is fp32
        always. The codes returned are ordinary tensors, usable as cross-entropy targets."""
        self._check_size(img)
        img = to_three_channels(img)
        use_bf16 = bf16_targets(self.encode_bf16, img.device) if bf16 is None else bool(bf16)
        with torch.inference_mode():
            if self.channels_last:
                img = img.contiguous(memory_format=torch.channels_last)
            with torch.autocast(img.device.type, dtype=torch.bfloat16, enabled=use_bf16):
                z = self.encoder(img)  # (B, D, h, w)
            codes = self.quantizer.encode(z)  # (B, h, w)
        return codes.clone()  # leave inference mode: targets may be saved for backward

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, 3, h·s, w·s) images in [-1, 1]."""
        if self.decoder is None:
            raise RuntimeError(f'this {type(self).__name__} was built with with_decoder=False; '
                               'load it with with_decoder=True to decode')
        return self.decoder(self.codewords(codes)).clamp(-1, 1)

    def codewords(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, D, h, w) quantized codewords."""
        return self.quantizer.codes_to_vectors(codes)

    def _check_size(self, img: torch.Tensor) -> None:
        if img.dim() != 4:
            raise ValueError(f'expected images (B, C, H, W), got shape {tuple(img.shape)}')
        H, W = img.shape[-2:]
        s = self.downsample
        if H % s or W % s:
            raise ValueError(f'image size {H}x{W} is not a multiple of the tokenizer\'s '
                             f'downsampling factor {s}; resize or crop to a multiple of {s}')


# ---- the tokenizer ----------------------------------------------------------------------------
@MODELS.register_module()
class PeCoTokenizer(TokenizerEncoding, BaseModel):
    """VQ-VAE with perceptual loss and EMA codebook; see the module docstring.

    Args:
        encoder_type: 'cnn' (paper default) or 'vit' (ViT-B encoder / inverse-ViT decoder).
        base_channels, channel_mult, num_res_blocks: CNN encoder; (1, 2, 4, 8, 8) on 64 is
            the 16× default, (1, 2, 4, 8) the 8× variant, 32 with (1, 2, 4, 8, 16) the lite one.
        decoder_base_channels, decoder_num_res_blocks: decoder overrides (None = as the
            encoder); half channel / half depth decoders of Table 12.
        vit_cfg: for encoder_type='vit': PeCoViT arguments of the encoder (and decoder
            depth/width unless decoder_vit_cfg is given), e.g. dict(arch='base', img_size=224).
        num_embeddings, embed_dims: K and D of the codebook.
        decay, beta, codebook_init, kmeans_iters, restart_threshold, restart_interval: see
            `EMAVectorQuantizer`.
        pixel_loss: 'l1' (default, as Taming) or 'l2'.
        perceptual_weight: λ of Eq. 5; 0 builds no perceptual network (a plain VQ-VAE).
        perceptual_cfg: `PerceptualLoss` arguments (net, checkpoint, layers,
            channel_reduction, ...).
        adversarial_weight: weight of the generator's adversarial loss (0.4 in the paper's
            ablation; 0 builds no discriminator); adversarial_start_iter: first iteration it
            counts; discriminator_cfg: `PatchDiscriminator` arguments.
        codeword_loss: None, 'classification' or 'contrastive': Table 6's explicit losses on
            the quantised codewords (see `peco_mm.tokenizer.codeword_loss`);
            codeword_loss_weight: its weight; codeword_loss_cfg: its arguments.
        with_decoder: False builds encoder + quantizer only.
        frozen: eval mode and no gradients, always. (A pretraining target generator is a
            `FrozenPeCoTokenizer`.)
        channels_last: run `encode` in channels-last memory format.
        encode_bf16: `encode`'s encoder precision: False fp32 (the default), True bf16
            autocast on any device, 'auto' bf16 where the device computes it natively (a
            CUDA card with bf16, a CPU with AVX512-BF16 or AMX). docs/benchmarks.md gives the
            code agreement with fp32 and what bf16 targets change downstream.

    Logged besides the losses: `perplexity` of the batch's codes and, with a perceptual loss,
    `percep_grad_share` = ||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||), the gradients taken
    at the reconstruction during the previous step's backward (no extra computation).
    """

    def __init__(self,
                 encoder_type: str = 'cnn',
                 in_channels: int = 3,
                 base_channels: int = 64,
                 channel_mult: Sequence[int] = (1, 2, 4, 8, 8),
                 num_res_blocks: int = 2,
                 decoder_base_channels: int | None = None,
                 decoder_num_res_blocks: int | None = None,
                 dropout: float = 0.0,
                 vit_cfg: dict | None = None,
                 decoder_vit_cfg: dict | None = None,
                 num_embeddings: int = CODEBOOK_SIZE,
                 embed_dims: int = 256,
                 decay: float = 0.99,
                 beta: float = 0.25,
                 codebook_init: str = 'data',
                 kmeans_iters: int = 10,
                 restart_threshold: float = 0.1,
                 restart_interval: int = 1,
                 pixel_loss: str = 'l1',
                 perceptual_weight: float = 1.0,
                 perceptual_cfg: dict | None = None,
                 adversarial_weight: float = 0.0,
                 adversarial_start_iter: int = 0,
                 discriminator_cfg: dict | None = None,
                 codeword_loss: str | None = None,
                 codeword_loss_weight: float = 1.0,
                 codeword_loss_cfg: dict | None = None,
                 with_decoder: bool = True,
                 frozen: bool = False,
                 channels_last: bool = True,
                 encode_bf16: bool | str = False,
                 data_preprocessor: dict | None = None,
                 init_cfg: dict | None = None) -> None:
        if data_preprocessor is None:
            data_preprocessor = dict(type='TokenizerDataPreprocessor')
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        check_loss_args(pixel_loss, perceptual_weight, adversarial_weight, codeword_loss,
                        codeword_loss_weight, in_channels)
        args = locals()  # what rebuilds this tokenizer (ArchitectureMetaHook stores it)
        self.arch_args = {k: args[k] for k in ARCH_KEYS}
        self.pixel_loss = pixel_loss
        self.perceptual_weight = float(perceptual_weight)
        self.adversarial_weight = float(adversarial_weight)
        self.adversarial_start_iter = int(adversarial_start_iter)
        self.frozen = frozen
        self.channels_last = channels_last
        self.encode_bf16 = check_encode_bf16(encode_bf16)
        self._iter = 0  # fallback iteration counter when no runner is around
        self._grad_norms: dict[str, torch.Tensor] = {}  # filled by hooks during backward

        # ---- encoder / decoder --------------------------------------------------------------
        self.encoder, self.decoder = build_codec(
            embed_dims, encoder_type, base_channels, channel_mult, num_res_blocks,
            decoder_base_channels, decoder_num_res_blocks, dropout, vit_cfg, decoder_vit_cfg,
            with_decoder)

        # ---- quantizer ----------------------------------------------------------------------
        self.quantizer = EMAVectorQuantizer(num_embeddings, embed_dims, decay, beta,
                                            init=codebook_init, kmeans_iters=kmeans_iters,
                                            restart_threshold=restart_threshold,
                                            restart_interval=restart_interval)

        # ---- losses (checked here, i.e. before the first iteration) ----------------------------
        self.codeword_loss_weight = float(codeword_loss_weight)
        trains = with_decoder and not frozen
        self.perceptual = (PerceptualLoss(**(perceptual_cfg or {}))
                           if trains and self.perceptual_weight > 0 else None)
        self.discriminator = (PatchDiscriminator(**(discriminator_cfg or {}))
                              if trains and self.adversarial_weight > 0 else None)
        self.codeword_loss = (build_codeword_loss(codeword_loss, self.encoder, embed_dims,
                                                  **(codeword_loss_cfg or {}))
                              if trains and codeword_loss is not None else None)
        if self.channels_last:
            self.encoder.to(memory_format=torch.channels_last)
        if frozen:
            self.freeze()

    def num_params(self) -> dict[str, int]:
        """Parameter counts; 'tokenizer' = encoder + codebook, as the paper and BEiT count."""
        enc = sum(p.numel() for p in self.encoder.parameters())
        cb = self.quantizer.embedding.numel()
        dec = sum(p.numel() for p in self.decoder.parameters()) if self.decoder else 0
        return dict(encoder=enc, codebook=cb, decoder=dec, tokenizer=enc + cb)

    # ---- training path --------------------------------------------------------------------------
    def reconstruct(self, img: torch.Tensor, return_quantized: bool = False):
        """Encode, quantize (EMA update in training), decode: (recon, codes, commitment loss)
        (+ the straight-through quantised latents (B, D, h, w) with return_quantized)."""
        if self.decoder is None:
            raise RuntimeError('reconstruct needs the decoder (with_decoder=True)')
        self._check_size(img)
        z = self.encoder(img)  # (B, D, h, w)
        zq, codes, loss_vq = self.quantizer(z)
        out = (self.decoder(zq), codes, loss_vq)  # recon (B, 3, H, W)
        return out + (zq,) if return_quantized else out

    # ---- mmengine entry points ----------------------------------------------------------------
    def forward(self, inputs: torch.Tensor, data_samples: list | None = None,
                mode: str = 'tensor'):
        """'loss': dict of losses (and logged statistics); 'predict': one dict per image with
        codes, reconstruction and per-image statistics for `TokenizerMetric`; 'tensor': codes."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        if mode == 'predict':
            return self.predict(inputs, data_samples)
        if mode == 'tensor':
            return self.encode(inputs)
        raise ValueError(f"mode={mode!r}; allowed: 'loss', 'predict', 'tensor'")

    def loss(self, img: torch.Tensor, data_samples: list | None = None
             ) -> dict[str, torch.Tensor]:
        if self.frozen or self.decoder is None:
            raise RuntimeError('a frozen / decoder-less PeCoTokenizer cannot be trained')
        it = self.current_iter()
        recon, codes, loss_vq, zq = self.reconstruct(img, return_quantized=True)
        recon = recon.float()
        recon_pix, recon_percep = self.watch_gradients(recon)
        if self.pixel_loss == 'l1':
            loss_pixel = F.l1_loss(recon_pix, img)
        else:
            loss_pixel = F.mse_loss(recon_pix, img)
        losses = dict(loss_pixel=loss_pixel, loss_vq=loss_vq)
        if self.perceptual is not None:
            losses['loss_percep'] = self.perceptual_weight * self.perceptual(img, recon_percep)
        if self.discriminator is not None:
            losses.update(self.adversarial_losses(img, recon, it))
        if self.codeword_loss is not None:
            losses['loss_codeword'] = self.codeword_loss_weight * self.codeword_loss(
                zq, img, data_samples, encoder=self.encoder, quantizer=self.quantizer)
        with torch.no_grad():
            stats = codebook_stats(torch.bincount(codes.flatten(), minlength=self.num_embeddings))
        losses['perplexity'] = torch.tensor(stats['perplexity'], device=img.device)
        # a non-finite loss is stopped (or skipped) by the runner's NonFiniteLossHook, as in
        # every stage: with the iteration and the term, and nonfinite_loss.max_skips honoured
        share = self.pop_gradient_share()
        if share is not None:
            losses['percep_grad_share'] = share
        self._iter += 1
        return losses

    # ---- the balance of the loss terms (logged) ---------------------------------------------
    def watch_gradients(self, recon: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two aliases of the reconstruction, one for the pixel and one for the perceptual
        loss, whose hooks record the norm of each term's gradient at the reconstruction
        during backward (read by `pop_gradient_share` at the next step)."""
        if self.perceptual is None or not recon.requires_grad:
            return recon, recon
        aliases = []
        for name in ('pixel', 'percep'):
            alias = recon.view_as(recon)
            alias.register_hook(self._record_grad_norm(name))
            aliases.append(alias)
        return aliases[0], aliases[1]

    def _record_grad_norm(self, name: str):
        def hook(grad: torch.Tensor) -> None:
            self._grad_norms[name] = grad.detach().float().norm()
        return hook

    def pop_gradient_share(self) -> torch.Tensor | None:
        """The perceptual term's share of the gradient at the reconstruction in the last
        backward (None before the first one)."""
        norms, self._grad_norms = self._grad_norms, {}
        if set(norms) != {'pixel', 'percep'}:
            return None
        return gradient_share(norms['pixel'], norms['percep'])

    def adversarial_losses(self, img: torch.Tensor, recon: torch.Tensor, it: int
                           ) -> dict[str, torch.Tensor]:
        """Patch-GAN losses trained with the same optimizer step: the discriminator sees a
        detached reconstruction; the generator's loss goes through a copy of D whose weights
        are detached, so each loss moves only its own network. Zero weight before the start
        iteration (computed anyway so every parameter has a gradient under DDP)."""
        on = 1.0 if it >= self.adversarial_start_iter else 0.0
        d = self.discriminator
        loss_d = discriminator_loss(d(img), d(recon.detach()))
        params = {k: v.detach() for k, v in d.named_parameters()}
        logits_fake = torch.func.functional_call(d, params, (recon,))
        loss_g = generator_loss(logits_fake)
        return dict(loss_adv=on * self.adversarial_weight * loss_g, loss_disc=on * loss_d)

    @torch.no_grad()
    def predict(self, img: torch.Tensor, data_samples: list | None = None) -> list[dict]:
        """Per image: codes, the codebook size, pooled codewords, uint8 image and
        reconstruction (the metric measures distances on those with its own networks)."""
        recon, codes, _ = self.reconstruct(img)
        recon = recon.float().clamp(-1, 1)
        pooled = self.quantizer.codes_to_vectors(codes).mean((2, 3))  # (B, D)
        # one device-to-host copy per batch: (B, 3, H, W) uint8 RGB
        imgs = torch.from_numpy(to_uint8(img)).movedim(-1, 1)
        recons = torch.from_numpy(to_uint8(recon)).movedim(-1, 1)
        codes, pooled = codes.cpu(), pooled.float().cpu()
        outs = []
        for i in range(img.shape[0]):
            out = dict(codes=codes[i], num_embeddings=self.num_embeddings,
                       pooled_codeword=pooled[i], img=imgs[i], recon=recons[i])
            label = _gt_label(data_samples, i)
            if label is not None:
                out['gt_label'] = label
            outs.append(out)
        return outs

    # ---- target generator ----------------------------------------------------------------
    def freeze(self) -> 'PeCoTokenizer':
        self.frozen = True
        for p in self.parameters():
            p.requires_grad_(False)
        return self.train(False)

    def train(self, mode: bool = True) -> 'PeCoTokenizer':
        return super().train(mode and not self.frozen)

    def init_weights(self) -> None:
        if self.init_cfg is not None and self.init_cfg.get('type') == 'Pretrained':
            load_tokenizer_state(self, self.init_cfg['checkpoint'])
            self._is_init = True
            return
        super().init_weights()

    # ---- helpers ------------------------------------------------------------------------------
    def current_iter(self) -> int:
        from mmengine.logging import MessageHub
        hub = MessageHub.get_current_instance()
        it = hub.get_info('iter') if hub is not None else None
        return int(it) if it is not None else self._iter


@MODELS.register_module()
class FrozenPeCoTokenizer(TokenizerEncoding, nn.Module):
    """The target generator of masked image modeling: a trained tokenizer's encoder and
    codebook (decoder only with with_decoder=True), frozen, always in eval mode, without a
    data preprocessor (the MIM data preprocessor prepares its [-1, 1] view).

    The architecture is read from the checkpoint (the config tools/train.py stores in it, or
    the shapes of a CNN encoder and codebook, see `checkpoint_arch`), so a pretraining config
    only names the file:

        target_generator=dict(type='FrozenPeCoTokenizer', checkpoint='tokenizer.pth')

    Args:
        checkpoint: a tokenizer checkpoint written by tools/train.py, or a PeCo pretraining
            checkpoint (its `target_generator.*` weights).
        with_decoder: also load the decoder (for visualising codes).
        channels_last, encode_bf16: as `PeCoTokenizer`'s `encode`.
        config_key: the config key that gives `checkpoint`, named when the file is missing
            (the MIM target generator's by default; wrappers pass their own).
        **arch: architecture arguments (`ARCH_KEYS`) that replace the checkpoint's, e.g. for a
            ViT-encoder file that stores no config.
    """

    def __init__(self, checkpoint: str | None = None, with_decoder: bool = False,
                 channels_last: bool = True, encode_bf16: bool | str = False,
                 config_key: str = TARGET_GENERATOR_KEY, **arch) -> None:
        super().__init__()
        unknown = sorted(set(arch) - set(ARCH_KEYS))
        if unknown:
            raise TypeError(f'FrozenPeCoTokenizer: unknown arguments {unknown}; the '
                            f'architecture comes from the checkpoint, and may be overridden '
                            f'with {", ".join(ARCH_KEYS)}')
        if not checkpoint or not (is_url(checkpoint) or osp.isfile(str(checkpoint))):
            raise FileNotFoundError(
                f'FrozenPeCoTokenizer: tokenizer checkpoint {checkpoint!r} not found; set '
                f'{config_key}=PATH to a tokenizer trained with tools/train.py '
                '(configs/peco/tokenizer_*.py)')
        ckpt = _read(checkpoint)
        arch = checkpoint_arch(ckpt, checkpoint, arch)
        self.arch_args = arch
        self.checkpoint = str(checkpoint)
        self.channels_last = channels_last
        self.encode_bf16 = check_encode_bf16(encode_bf16)
        self.encoder, self.decoder = build_codec(with_decoder=with_decoder, **_codec_args(arch))
        self.quantizer = EMAVectorQuantizer(arch.get('num_embeddings', CODEBOOK_SIZE),
                                            arch.get('embed_dims', 256), init='random',
                                            restart_threshold=0.0)
        load_tokenizer_state(self, self.checkpoint, ckpt)
        if channels_last:
            self.encoder.to(memory_format=torch.channels_last)
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> 'FrozenPeCoTokenizer':
        return super().train(False)  # always eval: GroupNorm / codebook stay as trained

    def init_weights(self) -> None:
        """Nothing to do: the weights were read from the checkpoint when it was built."""

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.encode(img)


def _gt_label(data_samples, i: int):
    if not data_samples:
        return None
    s = data_samples[i]
    label = getattr(s, 'gt_label', None)
    if label is None and isinstance(s, dict):
        label = s.get('gt_label')
    if label is None:
        return None
    return int(torch.as_tensor(label).flatten()[0])


def _read(path: str) -> dict:
    if not path or not (is_url(path) or osp.isfile(str(path))):
        raise FileNotFoundError(f'tokenizer checkpoint {path!r} not found')
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise ValueError(f'{path}: expected a checkpoint dict, got {type(ckpt).__name__}')
    return ckpt


def checkpoint_arch(ckpt: dict, path: str, overrides: dict | None = None) -> dict:
    """The tokenizer architecture (`ARCH_KEYS`) of a checkpoint, from the first source that
    has it: `overrides`, then the plain dict `meta.tokenizer_arch` (written by
    `ArchitectureMetaHook` since checkpoints stopped relying on config text), then the config
    mmengine's Runner stores as text in `meta.cfg`, read as data (a tokenizer run's `model`,
    or the `target_generator` of a pretraining run that spelled it out), then the shapes of a
    CNN encoder and codebook in the state dict (e.g. a pretraining checkpoint whose target
    generator was a `FrozenPeCoTokenizer`), then `PeCoTokenizer`'s defaults."""
    overrides = dict(overrides or {})
    stored = _meta(ckpt).get('tokenizer_arch')
    model = stored if isinstance(stored, dict) else _tokenizer_cfg(ckpt, path)
    shapes = infer_cnn_arch(tokenizer_state_dict(ckpt))
    if model is None and shapes is None and not overrides:
        raise ValueError(
            f'{path}: the checkpoint stores no tokenizer architecture (meta.tokenizer_arch or '
            'meta.cfg) and holds no CNN tokenizer encoder + codebook, so the architecture is '
            'unknown. Use a checkpoint written by tools/train.py, or pass the architecture '
            f'({", ".join(ARCH_KEYS)}) next to the checkpoint')
    defaults = {k: p.default for k, p in inspect.signature(PeCoTokenizer).parameters.items()
                if k in ARCH_KEYS}
    return {**defaults, **(shapes or {}),
            **{k: v for k, v in (model or {}).items() if k in ARCH_KEYS}, **overrides}


def _tokenizer_cfg(ckpt: dict, path: str) -> dict | None:
    """The PeCoTokenizer config in the checkpoint's stored config text, if any, read as data
    (`parse_config_text`: nothing in it is run)."""
    cfg_text = _meta(ckpt).get('cfg')
    if not cfg_text:
        return None
    model = parse_config_text(cfg_text, f'{path} meta.cfg').get('model') or {}
    if not isinstance(model, dict):
        raise ValueError(f'{path} meta.cfg: model is a {type(model).__name__}, not a dict')
    if model.get('type') in (None, 'PeCoTokenizer'):
        return model
    target = model.get('target_generator')
    if isinstance(target, dict) and target.get('type') == 'PeCoTokenizer':
        return target
    if isinstance(target, dict) and target.get('type') == 'FrozenPeCoTokenizer':
        return {k: v for k, v in target.items() if k in ARCH_KEYS}  # the rest from shapes
    raise ValueError(f'{path}: the config stored in this checkpoint builds a '
                     f'{model.get("type")!r} without a PeCo tokenizer: give a tokenizer '
                     f'checkpoint ({TARGET_GENERATOR_KEY})')


def _meta(ckpt: dict) -> dict:
    meta = ckpt.get('meta')
    return meta if isinstance(meta, dict) else {}


def infer_cnn_arch(sd: dict) -> dict | None:
    """CNN encoder + codebook arguments read off the weights' shapes (None when the state
    dict holds no CNN tokenizer encoder): base_channels from the first conv, channel_mult
    from the first residual block of each stage, num_res_blocks from stage 0, K and D from
    the codebook."""
    if 'encoder.conv_in.weight' not in sd or 'quantizer.embedding' not in sd:
        return None
    base = sd['encoder.conv_in.weight'].shape[0]
    blocks: dict[int, list[int]] = {}  # stage -> indices of its residual blocks
    for k in sd:
        parts = k.split('.')
        if k.startswith('encoder.stages.') and parts[4:] == ['conv1', 'weight']:
            blocks.setdefault(int(parts[2]), []).append(int(parts[3]))
    mult = tuple(sd[f'encoder.stages.{i}.0.conv1.weight'].shape[0] // base
                 for i in sorted(blocks))
    K, D = sd['quantizer.embedding'].shape
    return dict(encoder_type='cnn', base_channels=base, channel_mult=mult,
                num_res_blocks=len(blocks[0]), num_embeddings=K, embed_dims=D)


def _codec_args(arch: dict) -> dict:
    return {k: (tuple(v) if k == 'channel_mult' else v) for k, v in arch.items()
            if k != 'num_embeddings'}


def gradient_share(pixel_norm: torch.Tensor, percep_norm: torch.Tensor) -> torch.Tensor:
    """||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||): the perceptual term's share of the
    gradient that reaches the reconstruction (0: the pixel loss alone; 1: perception alone)."""
    return percep_norm / (pixel_norm + percep_norm).clamp_min(1e-30)


TOKENIZER_PREFIXES = ('encoder.', 'quantizer.')


def load_tokenizer_state(model: PeCoTokenizer, path: str, ckpt: dict | None = None) -> None:
    """Load encoder + quantizer (+ decoder when the model has one) from a tokenizer
    checkpoint; every expected key must be there, with the right shape."""
    ckpt = ckpt if ckpt is not None else _read(path)
    sd = tokenizer_state_dict(ckpt)
    wanted = TOKENIZER_PREFIXES + (('decoder.',) if model.decoder is not None else ())
    own = {k: v for k, v in model.state_dict().items() if k.startswith(wanted)}
    missing = sorted(set(own) - set(sd))
    if missing:
        raise ValueError(f'{path}: not a PeCoTokenizer checkpoint for this architecture: '
                         f'missing {missing[:6]}{" ..." if len(missing) > 6 else ""} '
                         f'(found e.g. {list(sd)[:4]})')
    bad = [f'{k}: {tuple(sd[k].shape)} vs {tuple(v.shape)}' for k, v in own.items()
           if tuple(sd[k].shape) != tuple(v.shape)]
    if bad:
        raise ValueError(f'{path}: shapes differ from the configured tokenizer '
                         f'(checkpoint vs model): {bad[:4]}')
    model.load_state_dict({k: sd[k] for k in own}, strict=False)
