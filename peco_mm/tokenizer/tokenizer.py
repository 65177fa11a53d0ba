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

import contextlib
import os.path as osp

import torch
import torch.nn.functional as F
from mmengine.model import BaseModel

from ..checkpoint import is_url, read_checkpoint, tokenizer_state_dict
from ..layers.quantizer import codebook_stats
from ..registry import MODELS
from ..utils.image import to_uint8
from .codeword_loss import CODEWORD_LOSSES, build_codeword_loss
from .discriminator import discriminator_loss, generator_loss
from .encoding import (TokenizerEncoding, arch_parts, bf16_targets, build_codec,
                       check_encode_bf16, check_setting)
from .legacy import translate_flat_args

PIXEL_LOSSES = ('l1', 'l2')
DATA_PREPROCESSOR = dict(type='TokenizerDataPreprocessor')
# the loss parts built when their weight is > 0 (a config without `type` gets these types)
PERCEPTUAL = dict(type='PerceptualLoss')
DISCRIMINATOR = dict(type='PatchDiscriminator')


def check_loss_args(pixel_loss: str, perceptual_weight: float, adversarial_weight: float,
                    codeword_loss: str | None, codeword_loss_weight: float) -> None:
    """Refuse an unknown loss name or a negative loss weight."""
    if pixel_loss not in PIXEL_LOSSES:
        raise ValueError(f'pixel_loss={pixel_loss!r}; allowed: {PIXEL_LOSSES}')
    if perceptual_weight < 0 or adversarial_weight < 0 or codeword_loss_weight < 0:
        raise ValueError(f'perceptual_weight={perceptual_weight}, adversarial_weight='
                         f'{adversarial_weight}, codeword_loss_weight='
                         f'{codeword_loss_weight}: loss weights must be >= 0')
    if codeword_loss not in (None, *CODEWORD_LOSSES):
        raise ValueError(f'codeword_loss={codeword_loss!r}; allowed: None, '
                         f'{", ".join(map(repr, CODEWORD_LOSSES))}')


@MODELS.register_module()
class PeCoTokenizer(TokenizerEncoding, BaseModel):
    """VQ-VAE with perceptual loss and EMA codebook, built from registered parts; see the
    module docstring.

    Args:
        encoder, decoder: part configs, e.g. dict(type='CNNEncoder', base_channels=64,
            channel_mult=(1, 2, 4, 8, 8), num_res_blocks=2) (the default, the paper's 16×
            CNN; `CNNDecoder` likewise) or dict(type='ViTEncoder', arch='base') /
            `ViTDecoder`. Their `code_dims` is the quantizer's `embed_dims`. Any registered
            module mapping (B, 3, H, W) to (B, code_dims, H/s, W/s) with a `downsample`
            attribute s, and back, is an encoder / decoder.
        quantizer: dict(type='EMAVectorQuantizer', num_embeddings=8192, embed_dims=256,
            decay=0.99, beta=0.25, init='data', ...): K and D of the codebook and its EMA
            settings (see `EMAVectorQuantizer`).
        perceptual: the perceptual loss, dict(type='PerceptualLoss', net='vit',
            checkpoint=..., layers=..., channel_reduction=...); built when perceptual_weight
            > 0. perceptual_weight: λ of Eq. 5; 0 gives a plain VQ-VAE.
        pixel_loss: 'l1' (default, as Taming) or 'l2'.
        discriminator: dict(type='PatchDiscriminator', ...), built when adversarial_weight >
            0 (0.4 in the paper's ablation); adversarial_start_iter: first iteration it counts.
        codeword_loss: None, 'classification' or 'contrastive': Table 6's explicit losses on
            the quantised codewords (see `peco_mm.tokenizer.codeword_loss`);
            codeword_loss_weight: its weight; codeword_loss_cfg: its arguments.
        with_decoder: False builds encoder + quantizer only.
        frozen: eval mode and no gradients, always. (A pretraining target generator is a
            `FrozenPeCoTokenizer`.)
        channels_last: `encode`'s memory format: True channels-last, False contiguous,
            'auto' by device (channels-last on a CPU, contiguous on CUDA); the encoder's
            weights follow the first time they differ (`encode_memory_format`).
        compile_encoder: run `encode`'s encoder through torch.compile: True, False (the
            default here), 'auto' on CUDA only; a failed compile logs one line and encodes
            eagerly (`compiles_encoder`). A pretraining target (`FrozenPeCoTokenizer`)
            defaults both to 'auto'.
        encode_bf16: `encode`'s encoder precision: False fp32 (the default), True bf16
            autocast on any device, 'auto' bf16 where the device computes it natively (a
            CUDA card with bf16, a CPU with AVX512-BF16 or AMX). docs/benchmarks.md gives the
            code agreement with fp32 and what bf16 targets change downstream.
        train_bf16: the training step's precision (`loss`): False fp32 (the default), True
            bf16 autocast for the encoder, decoder, perceptual network and discriminator on
            any device, 'auto' where the device computes bf16 natively (as `encode_bf16`).
            The codebook's distances, its EMA update and every loss's reduction stay fp32;
            False leaves the fp32 step exactly as it was.
        **flat_args: the flat arguments of configs written before parts (`encoder_type`,
            `base_channels`, ..., `num_embeddings`, `perceptual_cfg`), translated by
            `peco_mm.tokenizer.legacy`; not to be mixed with part configs.

    The architecture (encoder, decoder, quantizer configs) is kept as plain data in
    `arch_parts`; `ArchitectureMetaHook` stores it in every checkpoint, and
    `FrozenPeCoTokenizer` rebuilds the tokenizer from it.

    Logged besides the losses: `perplexity` of the batch's codes and, with a perceptual loss,
    `percep_grad_share` = ||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||), the gradients taken
    at the reconstruction during the previous step's backward (no extra computation).
    """

    def __init__(self,
                 encoder: dict | None = None,
                 decoder: dict | None = None,
                 quantizer: dict | None = None,
                 perceptual: dict | None = None,
                 perceptual_weight: float = 1.0,
                 pixel_loss: str = 'l1',
                 discriminator: dict | None = None,
                 adversarial_weight: float = 0.0,
                 adversarial_start_iter: int = 0,
                 codeword_loss: str | None = None,
                 codeword_loss_weight: float = 1.0,
                 codeword_loss_cfg: dict | None = None,
                 with_decoder: bool = True,
                 frozen: bool = False,
                 channels_last: bool | str = True,
                 compile_encoder: bool | str = False,
                 encode_bf16: bool | str = False,
                 train_bf16: bool | str = False,
                 data_preprocessor: dict | None = None,
                 init_cfg: dict | None = None,
                 **flat_args) -> None:
        super().__init__(data_preprocessor=data_preprocessor or DATA_PREPROCESSOR,
                         init_cfg=init_cfg)
        check_loss_args(pixel_loss, perceptual_weight, adversarial_weight, codeword_loss,
                        codeword_loss_weight)
        parts = dict(encoder=encoder, decoder=decoder, quantizer=quantizer,
                     perceptual=perceptual, discriminator=discriminator)
        if flat_args:
            parts = translate_flat_args(flat_args, parts)
        self.arch_parts = arch_parts(parts['encoder'], parts['decoder'], parts['quantizer'])
        self.pixel_loss = pixel_loss
        self.perceptual_weight = float(perceptual_weight)
        self.adversarial_weight = float(adversarial_weight)
        self.adversarial_start_iter = int(adversarial_start_iter)
        self.codeword_loss_weight = float(codeword_loss_weight)
        self.frozen = frozen
        self.channels_last = check_setting('channels_last', channels_last)
        self.compile_encoder = check_setting('compile_encoder', compile_encoder)
        self.encode_bf16 = check_encode_bf16(encode_bf16)
        self.train_bf16 = check_setting('train_bf16', train_bf16)
        self._iter = 0  # fallback iteration counter when no runner is around
        self._grad_norms: dict[str, torch.Tensor] = {}  # filled by hooks during backward
        self.encoder, self.decoder, self.quantizer = build_codec(self.arch_parts, with_decoder)
        # the losses' parts, checked here (i.e. before the first iteration)
        trains = with_decoder and not frozen
        self.perceptual = (MODELS.build({**PERCEPTUAL, **(parts['perceptual'] or {})})
                           if trains and self.perceptual_weight > 0 else None)
        self.discriminator = (MODELS.build({**DISCRIMINATOR, **(parts['discriminator'] or {})})
                              if trains and self.adversarial_weight > 0 else None)
        self.codeword_loss = (build_codeword_loss(codeword_loss, self.encoder, self.embed_dims,
                                                  **(codeword_loss_cfg or {}))
                              if trains and codeword_loss is not None else None)
        self.encoder_layout(next(self.encoder.parameters()).device)  # where built
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
        with self.training_precision(img.device):  # the networks; losses reduced in fp32
            losses, codes = self.loss_terms(img, data_samples, it)
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

    def training_precision(self, device: torch.device):
        """bf16 autocast on `device` where `train_bf16` says (`bf16_targets`), else nothing:
        the fp32 step runs outside any autocast region, as before the setting existed."""
        if not bf16_targets(self.train_bf16, device):
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    def loss_terms(self, img: torch.Tensor, data_samples: list | None, it: int
                   ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The loss terms (fp32 scalars) and the (B, h, w) codes of one training batch."""
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
                zq, img, data_samples, encoder=self.encoder, quantizer=self.quantizer).float()
        return losses, codes

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
        pooled = self.codewords(codes).mean((2, 3))  # (B, D)
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


def read_tokenizer_checkpoint(path: str) -> dict:
    """A tokenizer checkpoint read through the gate, named when missing or not a dict."""
    if not path or not (is_url(path) or osp.isfile(str(path))):
        raise FileNotFoundError(f'tokenizer checkpoint {path!r} not found')
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise ValueError(f'{path}: expected a checkpoint dict, got {type(ckpt).__name__}')
    return ckpt


def gradient_share(pixel_norm: torch.Tensor, percep_norm: torch.Tensor) -> torch.Tensor:
    """||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||): the perceptual term's share of the
    gradient that reaches the reconstruction (0: the pixel loss alone; 1: perception alone)."""
    return percep_norm / (pixel_norm + percep_norm).clamp_min(1e-30)


TOKENIZER_PREFIXES = ('encoder.', 'quantizer.')


def load_tokenizer_state(model: PeCoTokenizer, path: str, ckpt: dict | None = None) -> None:
    """Load encoder + quantizer (+ decoder when the model has one) from a tokenizer
    checkpoint; every expected key must be there, with the right shape."""
    ckpt = ckpt if ckpt is not None else read_tokenizer_checkpoint(path)
    sd = tokenizer_state_dict(ckpt)
    wanted = TOKENIZER_PREFIXES + (('decoder.',) if model.decoder is not None else ())
    own = {k: v for k, v in model.state_dict().items() if k.startswith(wanted)}
    # the restarts' random state (quantizer._extra_state): training state, absent from files
    # written before it; a frozen tokenizer draws nothing
    own = {k: v for k, v in own.items() if k in sd or not k.endswith('._extra_state')}
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
