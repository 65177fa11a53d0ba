"""Perceptual loss of PeCo (Eq. 4): L = Σ_{l∈S} 1/(C_l H_l W_l) ||f_l(x) - f_l(x̂)||²,
with f_l the channel-normalised activations of layer l of a frozen network.

Reduction over channels (`channel_reduction`): 'mean' is Eq. 4 as printed (mean over C, H, W);
'sum' is the LPIPS / Taming reduction (sum over channels, mean over positions), C_l times
larger. Read literally, Eq. 4 leaves the perceptual term a small share of the gradient next to
the pixel L1 (for a ViT-B, C = 768), so the λ sweep of the paper (84.1 at λ = 0.3 against 82.9
at λ = 0) would measure almost nothing; 'sum' is the default. docs/tokenizer.md gives the
measured gradient shares.

Networks (paper Sec. 3.2 and Table 5):
- 'vit': ViT-B (MoCo v3; the paper's is trained 100 epochs, the configs default to the
  released 300-epoch one) at blocks 3/6/9/12; any checkpoint format the
  converter reads (MoCo v3, DINO, timm, MAE, BEiT, mmpretrain, peco_mm) through
  `PeCoViT.from_checkpoint`;
- 'resnet50': torchvision ResNet-50 at the end of each stage (layer1..layer4); torchvision or
  MoCo (v1/v2 `module.encoder_q.*`, v3 `module.base_encoder.*`) state dicts;
- 'vgg16': torchvision VGG16 at the end of each stage (relu1_2 ... relu5_3), torchvision format.

The network is frozen and always in eval mode. Images arrive in the tokenizer's [-1, 1] range
and are mapped to the network's normalisation (ImageNet mean/std by default). The checkpoint
is loaded when the loss is built, i.e. before the first iteration, and a missing or unfitting
file is an error naming the path.
"""
from __future__ import annotations

import os.path as osp
from typing import Sequence

import torch
import torch.nn as nn

from ..checkpoint import cnn_backbone_state_dict, read_checkpoint
from ..models.vit import PeCoViT
from ..registry import MODELS
from ..utils.finite import nonfinite_names
from ..utils.held import follow_buffer
from ..utils.quiet import quiet_logs

NETS = ('vit', 'resnet50', 'vgg16')
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_LAYERS = {'vit': (3, 6, 9, 12), 'resnet50': (1, 2, 3, 4), 'vgg16': (1, 2, 3, 4, 5)}
# VGG16 `features` indices of the ReLU closing each stage (before each max-pool)
VGG16_STAGE_ENDS = (3, 8, 15, 22, 29)
CHANNEL_REDUCTIONS = ('sum', 'mean')


@MODELS.register_module()
class PerceptualLoss(nn.Module):
    """Frozen-network feature distance (Eq. 4); see the module docstring.

    Args:
        net: 'vit' | 'resnet50' | 'vgg16'.
        checkpoint: path to the network's weights; None only with allow_random=True.
        layers: 1-based blocks (vit) or stages (resnet50, vgg16) whose features are compared.
        allow_random: build with random weights when checkpoint is None (tests, debugging).
        mean, std: the network's input normalisation, on a [0, 1] scale.
        vit_cfg: PeCoViT arguments used for a random ViT, or overrides for the checkpoint's
            inferred ones (e.g. dict(img_size=224)).
        channel_reduction: 'sum' (LPIPS-style, default) or 'mean' (Eq. 4 as printed) over the
            C_l channels of a position; positions are averaged, layers summed, either way.
    """

    def __init__(self, net: str = 'vit', checkpoint: str | None = None,
                 layers: Sequence[int] | None = None, allow_random: bool = False,
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 vit_cfg: dict | None = None, channel_reduction: str = 'sum') -> None:
        super().__init__()
        if net not in NETS:
            raise ValueError(f'perceptual net={net!r}; allowed: {NETS}')
        if channel_reduction not in CHANNEL_REDUCTIONS:
            raise ValueError(f'perceptual channel_reduction={channel_reduction!r}; allowed: '
                             f'{CHANNEL_REDUCTIONS}')
        if checkpoint is None and not allow_random:
            raise ValueError(f'perceptual loss ({net}): set its checkpoint path in the config '
                             '(model.perceptual.checkpoint=PATH), or perceptual_weight=0 for '
                             'a plain pixel VQ-VAE')
        if checkpoint is not None and not osp.isfile(str(checkpoint)):
            raise FileNotFoundError(f'perceptual loss ({net}): checkpoint {checkpoint!r} not '
                                    'found; set model.perceptual.checkpoint=PATH')
        layers = tuple(layers) if layers is not None else DEFAULT_LAYERS[net]
        self.net_name = net
        self.checkpoint = checkpoint
        self.layers = layers
        self.channel_reduction = channel_reduction
        if net == 'vit':
            feat_net = build_vit(checkpoint, layers, vit_cfg or {})
        elif net == 'resnet50':
            feat_net = build_resnet50(checkpoint, layers)
        else:
            feat_net = build_vgg16(checkpoint, layers)
        if checkpoint is not None:
            refuse_nonfinite(feat_net, checkpoint, net)
        feat_net.eval()
        for p in feat_net.parameters():
            p.requires_grad_(False)
        # Held outside the module tree: the frozen network is neither trained, counted, nor
        # saved in tokenizer checkpoints (it is re-read from its own file); it follows the
        # `mean` buffer, which .to / .cuda / .half move with the tokenizer (`net`).
        self._frozen = [feat_net]
        self.register_buffer('mean', torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer('std', torch.tensor(std).view(1, 3, 1, 1), persistent=False)

    @property
    def net(self) -> nn.Module:
        """The frozen network, on the device and in the dtype of the `mean` buffer."""
        return follow_buffer(self._frozen[0], self.mean)

    # ---- steps --------------------------------------------------------------------------------
    def normalize_input(self, img: torch.Tensor) -> torch.Tensor:
        """Tokenizer range [-1, 1] -> the network's normalisation."""
        return ((img + 1) / 2 - self.mean.to(img.dtype)) / self.std.to(img.dtype)

    def features(self, img: torch.Tensor) -> list[torch.Tensor]:
        """Channel-normalised (B, C_l, H_l, W_l) fp32 features of each selected layer (the
        network may run in bf16 autocast; the normalisation and distances do not)."""
        feats = [f.float() for f in self.net(self.normalize_input(img))]
        return [f / (f.pow(2).sum(1, keepdim=True).add(1e-10).sqrt()) for f in feats]

    def forward(self, img: torch.Tensor, recon: torch.Tensor,
                reduce: bool = True) -> torch.Tensor:
        """Eq. 4 between images and reconstructions: a scalar, or (B,) with reduce=False."""
        with torch.no_grad():
            target = self.features(img)
        pred = self.features(recon)
        per_layer = [self.layer_distance(p, t) for p, t in zip(pred, target)]
        loss = torch.stack(per_layer, 0).sum(0)  # (B,)
        return loss.mean() if reduce else loss

    def layer_distance(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) normalised features -> (B,): squared distance reduced over channels
        (sum or mean, `channel_reduction`), then averaged over the H·W positions."""
        sq = (pred - target).pow(2)  # (B, C, H, W)
        per_pos = sq.sum(1) if self.channel_reduction == 'sum' else sq.mean(1)  # (B, H, W)
        return per_pos.flatten(1).mean(1)


def quiet_init_weights(module: nn.Module) -> None:
    """init_weights() without mmengine's per-parameter 'value is the same' log lines."""
    with quiet_logs():
        module.init_weights()


# ---- feature networks -------------------------------------------------------------------------
class ViTFeatures(nn.Module):
    """The raw outputs of the selected blocks (no final norm, whatever the checkpoint holds),
    as the hooks of timm's blocks would give them: (B, C, h, w) each."""

    def __init__(self, vit: nn.Module, indices: Sequence[int]) -> None:
        super().__init__()
        self.vit = vit
        self.indices = list(indices)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.vit.forward_intermediates(x, self.indices, norm=False, output_fmt='NCHW')


class StageFeatures(nn.Module):
    """The outputs of named nodes of a torchvision network, in network order, through
    torchvision's feature extractor (`create_feature_extractor`: the graph is cut after the
    last node asked for, so a ResNet's head and a VGG's later blocks never run)."""

    def __init__(self, net: nn.Module, nodes: Sequence[str]) -> None:
        super().__init__()
        from torchvision.models.feature_extraction import create_feature_extractor
        self.nodes = list(nodes)
        self.body = create_feature_extractor(net, return_nodes=self.nodes)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = self.body(x)
        return [out[n] for n in self.nodes]


def build_vit(checkpoint: str | None, layers: Sequence[int], vit_cfg: dict) -> nn.Module:
    idx = [int(i) - 1 for i in layers]
    over = dict(drop_path_rate=0.0)
    if checkpoint is None:
        kw = dict(arch='base', img_size=224, patch_size=16)
        kw.update(vit_cfg)
        kw.update(over)
        vit = PeCoViT(**kw)
        quiet_init_weights(vit)
    else:
        try:
            vit = PeCoViT.from_checkpoint(checkpoint, **{**vit_cfg, **over})
        except Exception as err:
            raise ValueError(f'perceptual loss (vit): cannot load {checkpoint!r} as a ViT: '
                             f'{err}') from err
    if max(idx) >= vit.num_layers:
        raise ValueError(f'perceptual loss (vit): layers {tuple(layers)} but {checkpoint or "the"}'
                         f' ViT has {vit.num_layers} blocks')
    return ViTFeatures(vit, idx)


def refuse_nonfinite(feat_net: nn.Module, checkpoint: str, net: str) -> None:
    """Raise ValueError naming the file when the loaded network holds NaN/inf: its features,
    and so the perceptual loss, would be NaN from the first step on."""
    bad = nonfinite_names(feat_net)
    if bad:
        shown = ', '.join(bad[:3]) + (' ...' if len(bad) > 3 else '')
        raise ValueError(f'perceptual loss ({net}): {checkpoint!r} holds NaN/inf in {len(bad)} '
                         f'weight tensor(s) ({shown}); the frozen network must be finite: use '
                         'another checkpoint of it')


def _load_torchvision_state(checkpoint: str, net: str) -> dict:
    try:
        ckpt = read_checkpoint(checkpoint)
    except Exception as err:
        raise ValueError(f'perceptual loss ({net}): cannot read {checkpoint!r}: {err}') from err
    sd = cnn_backbone_state_dict(ckpt)
    if sd is None:
        raise ValueError(f'perceptual loss ({net}): {checkpoint!r} holds no state dict')
    return sd


def _load_strict(model: nn.Module, sd: dict, checkpoint: str, net: str,
                 ignore: tuple[str, ...]) -> None:
    sd = {k: v for k, v in sd.items() if not k.startswith(ignore)}
    own = {k for k in model.state_dict() if not k.startswith(ignore)}
    missing = sorted(own - set(sd))
    unexpected = sorted(set(sd) - own)
    if missing or unexpected:
        raise ValueError(f'perceptual loss ({net}): {checkpoint!r} does not fit torchvision '
                         f'{net}: missing {missing[:8]}, unexpected {unexpected[:8]}')
    model.load_state_dict(sd, strict=False)


def build_resnet50(checkpoint: str | None, stages: Sequence[int]) -> nn.Module:
    from torchvision.models import resnet50
    if not stages or not set(stages) <= {1, 2, 3, 4}:
        raise ValueError(f'perceptual loss (resnet50): layers={tuple(stages)}; allowed 1..4')
    model = resnet50(weights=None)
    if checkpoint is not None:
        sd = _load_torchvision_state(checkpoint, 'resnet50')
        _load_strict(model, sd, checkpoint, 'resnet50', ignore=('fc.',))
    return StageFeatures(model, [f'layer{i}' for i in sorted(set(stages))])


def build_vgg16(checkpoint: str | None, stages: Sequence[int]) -> nn.Module:
    from torchvision.models.vgg import cfgs, make_layers
    if not stages or not set(stages) <= {1, 2, 3, 4, 5}:
        raise ValueError(f'perceptual loss (vgg16): layers={tuple(stages)}; allowed 1..5')
    model = nn.Module()  # torchvision's VGG16 without its 120M-parameter classifier
    model.features = make_layers(cfgs['D'], batch_norm=False)
    if checkpoint is not None:
        sd = _load_torchvision_state(checkpoint, 'vgg16')
        _load_strict(model, sd, checkpoint, 'vgg16', ignore=('classifier.',))
    ends = [str(VGG16_STAGE_ENDS[i - 1]) for i in sorted(set(stages))]  # relu1_2 ... relu5_3
    return StageFeatures(model.features, ends)
