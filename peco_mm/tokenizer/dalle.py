"""DALL-E's discrete VAE (Ramesh et al., 2021) as a tokenizer: BEiT's codes, and the paper's
baseline in its codeword table (Table 4), its human-agreement figure (Fig. 1) and its
masked-prediction figure (Fig. 4).

The encoder is mmpretrain's (`DALL-E`, which BEiT's pretraining already uses). The decoder is
written here: mmpretrain has none, and OpenAI releases it only as a pickled module
(`decoder.pkl`). Its parameters carry the names of that release (`blocks.input.w`,
`blocks.group_1.block_1.res_path.conv_1.w`, ...), so the released weights load unchanged,
read by `peco_mm.checkpoint.read_module_state_dict` without running the pickle.

The architecture, 8x down and up (Ramesh et al., appendix A):
- encoder: 7x7 conv, 4 groups of residual blocks with 2x max-pooling between them, a 1x1
  conv to `vocab_size` logits; the code is their argmax;
- decoder: the one-hot code through a 1x1 conv (`blocks.input`: each code's
  embedding, `n_init` = 128 wide), 4 groups of residual blocks (1x1, 3x3, 3x3, 3x3 convs,
  the residual branch scaled by 1 / (number of blocks)^2) with 2x nearest upsampling between
  them, a 1x1 conv to 6 channels; the first 3 through a sigmoid are the pixels in DALL-E's
  mapped range [0.1, 0.9] ("logit-Laplace" means; the other 3 are scales, unused here).

`DalleTokenizer` gives DALL-E the interface of a PeCo tokenizer: images in [-1, 1],
`encode` -> codes, `decode` -> images, `codewords` -> each code's vector. DALL-E has no
separate codebook; a code's vector is the decoder's first feature for it (`blocks.input`'s
column plus bias, 128 wide), the input of everything that draws the code.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import MODELS

LOGIT_LAPLACE_EPS = 0.1  # DALL-E maps pixels x in [0, 1] to 0.8 x + 0.1 before encoding


def dalle_conv(n_in: int, n_out: int, kernel: int, use_float16: bool = True) -> nn.Module:
    """DALL-E's convolution (parameters `w`, `b`, 'same' padding; fp16 on CUDA unless told),
    as mmpretrain writes it for the encoder."""
    from mmpretrain.models.selfsup.cae import Conv2d
    return Conv2d(n_in, n_out, kernel, use_float16=use_float16)


class DalleDecoderBlock(nn.Module):
    """x -> id_path(x) + res_path(x) / num_layers^2; res_path: ReLU-conv 1x1, 3x3, 3x3, 3x3."""

    def __init__(self, n_in: int, n_out: int, num_layers: int) -> None:
        super().__init__()
        n_hid = n_out // 4
        self.post_gain = 1 / num_layers ** 2
        self.id_path = dalle_conv(n_in, n_out, 1) if n_in != n_out else nn.Identity()
        convs = [(n_in, n_hid, 1), (n_hid, n_hid, 3), (n_hid, n_hid, 3), (n_hid, n_out, 3)]
        layers = []
        for i, (a, b, k) in enumerate(convs, 1):
            layers += [(f'relu_{i}', nn.ReLU()), (f'conv_{i}', dalle_conv(a, b, k))]
        self.res_path = nn.Sequential(OrderedDict(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.id_path(x) + self.post_gain * self.res_path(x)


class DalleDecoder(nn.Module):
    """(B, vocab_size, h, w) one-hot codes -> (B, 6, 8h, 8w) logit-Laplace statistics.

    Args:
        vocab_size: codes (DALL-E: 8192).
        n_hid: the last group's width; the groups are 8, 4, 2, 1 times it (DALL-E: 256).
        n_init: the code embedding's width (DALL-E: 128).
        group_count, blocks_per_group: DALL-E: 4 and 2.
    """

    def __init__(self, vocab_size: int = 8192, n_hid: int = 256, n_init: int = 128,
                 group_count: int = 4, blocks_per_group: int = 2) -> None:
        super().__init__()
        self.vocab_size, self.n_init = vocab_size, n_init
        num_layers = group_count * blocks_per_group
        widths = [n_hid * 2 ** (group_count - 1 - g) for g in range(group_count)]  # 8, 4, 2, 1 x
        groups: list[tuple[str, nn.Module]] = [
            ('input', dalle_conv(vocab_size, n_init, 1, use_float16=False))]
        n_in = n_init
        for g, width in enumerate(widths, 1):
            blocks = [(f'block_{i + 1}', DalleDecoderBlock(n_in if i == 0 else width, width,
                                                           num_layers))
                      for i in range(blocks_per_group)]
            if g < group_count:
                blocks.append(('upsample', nn.Upsample(scale_factor=2, mode='nearest')))
            groups.append((f'group_{g}', nn.Sequential(OrderedDict(blocks))))
            n_in = width
        groups.append(('output', nn.Sequential(OrderedDict([
            ('relu', nn.ReLU()), ('conv', dalle_conv(widths[-1], 6, 1))]))))
        self.blocks = nn.Sequential(OrderedDict(groups))

    def forward(self, one_hot: torch.Tensor) -> torch.Tensor:
        return self.blocks(one_hot.float())


@MODELS.register_module()
class DalleTokenizer(nn.Module):
    """DALL-E's encoder and decoder, frozen, with a PeCo tokenizer's interface.

    The architecture of each part is read from its weights (widths, vocabulary, groups), so
    DALL-E's release and smaller test files load alike.

    Args:
        encoder: weights of the encoder: OpenMMLab's converted `dalle_encoder.pth`, OpenAI's
            `encoder.pkl` (read without running it), or a BEiT pretraining checkpoint (its
            `target_generator.*`). None: no `encode`.
        decoder: weights of the decoder: OpenAI's `decoder.pkl` (read without running it), or
            a state dict of `DalleDecoder`. None: no `decode` / `codewords`.
        config_key: the config key that gives the files, named in errors ('KEY.encoder'; a
            command-line flag '--NAME' is named '--NAME-encoder').
    Images are RGB in [-1, 1], as PeCo's tokenizer takes them, a multiple of 8 in size.
    """
    downsample = 8

    def __init__(self, encoder: str | None = None, decoder: str | None = None,
                 config_key: str = 'tokenizer') -> None:
        super().__init__()
        sep = '-' if config_key.startswith('--') else '.'
        enc_key, dec_key = f'{config_key}{sep}encoder', f'{config_key}{sep}decoder'
        if encoder is None and decoder is None:
            raise ValueError(f'DalleTokenizer: give {enc_key} and / or {dec_key} (weights files)')
        self.encoder = self.decoder = None
        vocab = {}
        if encoder is not None:
            from mmpretrain.models.selfsup.cae import DALLEEncoder
            state, arch = read_dalle_part(encoder, 'encoder', enc_key)
            self.encoder = DALLEEncoder(**arch)
            self.encoder.load_state_dict(state, strict=True)
            vocab['encoder'] = arch['vocab_size']
        if decoder is not None:
            state, arch = read_dalle_part(decoder, 'decoder', dec_key)
            self.decoder = DalleDecoder(**arch)
            self.decoder.load_state_dict(state, strict=True)
            vocab['decoder'] = arch['vocab_size']
        if len(set(vocab.values())) > 1:
            raise ValueError(f'DalleTokenizer: {enc_key} ({encoder}) has {vocab["encoder"]} '
                             f'codes, {dec_key} ({decoder}) {vocab["decoder"]}: not one DALL-E')
        self.num_embeddings = next(iter(vocab.values()))
        self.embed_dims = self.decoder.n_init if self.decoder is not None else None
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> 'DalleTokenizer':
        return super().train(False)  # frozen

    def init_weights(self) -> None:
        """Nothing to do: the weights were read when it was built."""

    def _need(self, part: str) -> nn.Module:
        module = getattr(self, part)
        if module is None:
            raise RuntimeError(f'this DalleTokenizer was built without its {part}; give its '
                               f'weights as {part}=PATH')
        return module

    @torch.no_grad()
    def encode(self, img: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) images in [-1, 1] -> (B, H/8, W/8) long codes (argmax of the logits
        of DALL-E's encoder, on its mapped input 0.8 x + 0.1 for x in [0, 1])."""
        if img.dim() != 4 or img.shape[-1] % 8 or img.shape[-2] % 8:
            raise ValueError(f'expected images (B, 3, H, W) with H and W multiples of 8, got '
                             f'shape {tuple(img.shape)}')
        encoder = self._need('encoder')
        x = (img.float() + 1) / 2
        logits = encoder((1 - 2 * LOGIT_LAPLACE_EPS) * x + LOGIT_LAPLACE_EPS)
        return logits.argmax(1)  # (B, h, w)

    def one_hot(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, vocab_size, h, w) float one-hot, the decoder's input."""
        return F.one_hot(codes.long(), self.num_embeddings).permute(0, 3, 1, 2).float()

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, 3, 8h, 8w) images in [-1, 1]: the sigmoid of the decoder's
        means, mapped back from [0.1, 0.9] to [0, 1] (clamped), then to [-1, 1]."""
        stats = self._need('decoder')(self.one_hot(codes))
        mapped = torch.sigmoid(stats[:, :3].float())
        x = ((mapped - LOGIT_LAPLACE_EPS) / (1 - 2 * LOGIT_LAPLACE_EPS)).clamp(0, 1)
        return x * 2 - 1

    @torch.no_grad()
    def codewords(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, n_init, h, w): each code's vector, the decoder's first
        feature for it (`blocks.input`, a 1x1 conv of the one-hot code)."""
        conv = self._need('decoder').blocks.input
        vectors = conv.w[:, :, 0, 0].t() + conv.b  # (vocab_size, n_init)
        return vectors[codes.long()].permute(0, 3, 1, 2)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.encode(img)


# a DALL-E part's input conv: the encoder's 7x7 on RGB, the decoder's 1x1 on one-hot codes
INPUT_KERNEL = {'encoder': 7, 'decoder': 1}
PREFIXES = ('', 'module.', 'target_generator.', 'encoder.', 'decoder.')


def read_dalle_part(path: str, part: str, key: str) -> tuple[dict, dict]:
    """(state dict, architecture) of DALL-E's `part` ('encoder' / 'decoder') in `path`: a
    pickled module (read inertly) or a state dict, with or without a prefix
    (`target_generator.` in a BEiT checkpoint). The architecture is read from the shapes:
    mmpretrain's `DALLEEncoder` arguments, or `DalleDecoder`'s."""
    import os.path as osp

    from ..checkpoint import is_url, read_module_state_dict, select_prefix
    if not (is_url(path) or osp.isfile(str(path))):
        raise FileNotFoundError(f'DalleTokenizer: {part} checkpoint {path!r} not found; set '
                                f"{key}=PATH to DALL-E's {part} weights (e.g. OpenAI's "
                                f'{part}.pkl)')
    sd = read_module_state_dict(path)
    prefix = next((p for p in PREFIXES if f'{p}blocks.input.w' in sd
                   and f'{p}blocks.output.conv.w' in sd), None)
    if prefix is None:
        raise ValueError(f'{path} ({key}) holds no DALL-E {part}: no blocks.input.w and '
                         f'blocks.output.conv.w under {PREFIXES}; found {sorted(sd)[:4]}')
    sd = select_prefix(sd, prefix)
    w_in, w_out = sd['blocks.input.w'], sd['blocks.output.conv.w']
    found = next((p for p, k in INPUT_KERNEL.items() if w_in.shape[-1] == k), None)
    if found != part:
        raise ValueError(f'{path} ({key}) holds a DALL-E {found or "part"} '
                         f'(input conv {tuple(w_in.shape)}), not the {part}')
    groups = {k.split('.')[1] for k in sd if k.startswith('blocks.group_')}
    blocks = {k.split('.')[2] for k in sd if k.startswith('blocks.group_1.block_')}
    if part == 'encoder':
        arch = dict(group_count=len(groups), n_hid=w_in.shape[0], n_blk_per_group=len(blocks),
                    vocab_size=w_out.shape[0])
    else:
        arch = dict(vocab_size=w_in.shape[1], n_hid=w_out.shape[1], n_init=w_in.shape[0],
                    group_count=len(groups), blocks_per_group=len(blocks))
    return sd, arch
