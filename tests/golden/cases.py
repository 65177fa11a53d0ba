"""Golden outputs: tiny models of every stage on fixed inputs and fixed weights.

`python -m tests.golden.cases` (from the repository root) writes `tests/golden/golden.pt`,
the outputs of each case. `test_golden.py` rebuilds each model, fills its weights by name
(`fill_weights`: a tensor's values depend only on its state-dict name and shape, not on the
order modules are created in), runs it on the same inputs and compares. A restructuring of the
code that keeps the state-dict names (a new module layout, reused host primitives), or lists a
rename in `RENAMED`, must give the same numbers; one that changes a computation is caught.
"""
import re
import zlib

import numpy as np
import torch

# tokenizer: 32 px -> 4 x 4 codes, K = 16; the same tiny architecture the MIM tests use
TOKENIZER = dict(type='PeCoTokenizer', base_channels=16, channel_mult=(1, 2, 2, 4),
                 num_res_blocks=1, embed_dims=16, num_embeddings=16, perceptual_weight=0.0,
                 channels_last=False)
VIT = dict(type='PeCoViT', arch='test', img_size=32, patch_size=8)
DEMO = 'configs/demo'


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * 2 - 1


def _mask_samples(seed: int, n: int):
    from mmpretrain.structures import DataSample
    from peco_mm.datasets.mim_transforms import BlockwiseMaskGenerator
    np.random.seed(seed)
    gen = BlockwiseMaskGenerator(4, 6, 2)
    return [DataSample().set_mask(torch.as_tensor(gen.generate())) for _ in range(n)]


def _random_mask_samples(n: int):
    """MAE's masks of 12 of 16 patches, drawn from torch's generator as it stands."""
    from mmpretrain.structures import DataSample
    from peco_mm.datasets.mim_transforms import RandomMaskGenerator
    gen = RandomMaskGenerator(4, 0.75)
    return [DataSample().set_mask(torch.as_tensor(gen.generate())) for _ in range(n)]


def build_tokenizer():
    from peco_mm.registry import MODELS
    return MODELS.build(dict(TOKENIZER))


def run_tokenizer(model) -> dict:
    x = _inputs(0, 2, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        codes = model.encode(x)
        recon = model.decode(codes)
    model.train()
    torch.manual_seed(0)
    losses = model.loss(x)
    return dict(codes=codes, recon=recon,
                **{f'loss.{k}': v.detach() for k, v in losses.items() if torch.is_tensor(v)})


def _mim(kind: str):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    tok = build_tokenizer()
    common = dict(require_target_checkpoint=False, target_generator=tok,
                  head=dict(type='PeCoMIMHead'))
    if kind == 'PeCo':
        cfg = dict(type='PeCo', backbone=dict(VIT, qkv_bias='qv', use_abs_pos_emb=False,
                                              rel_pos_bias='shared', layer_scale_init_value=0.1,
                                              use_mask_token=True), **common)
    else:
        cfg = dict(type='PeCoMAE', backbone=dict(VIT),
                   neck=dict(type='PeCoMAEDecoder', grid=4, embed_dims=32, num_layers=1,
                             num_heads=4), **common)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def run_mim(model) -> dict:
    x = _inputs(1, 2, 3, 32, 32)
    model.train()
    torch.manual_seed(0)  # MAE's masks: the draws its model made before masks came from the data
    mae = type(model).__name__ == 'PeCoMAE'
    out = model.loss([x, x], _random_mask_samples(2) if mae else _mask_samples(0, 2))
    return {k: v.detach() for k, v in out.items() if torch.is_tensor(v)}


def _dense(cfg_name: str, scope: str):
    from mmengine.config import Config
    from mmengine.registry import DefaultScope, MODELS
    cfg = Config.fromfile(f'{DEMO}/{cfg_name}')
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(cfg.model)


def run_dense(model) -> dict:
    x = _inputs(2, 1, 3, 64, 64)
    model.eval()
    samples = None
    if type(model).__name__ == 'MaskRCNN':
        from mmdet.structures import DetDataSample
        meta = dict(img_shape=(64, 64), ori_shape=(64, 64), pad_shape=(64, 64),
                    batch_input_shape=(64, 64), scale_factor=(1.0, 1.0))
        samples = [DetDataSample(metainfo=meta)]
    with torch.no_grad():
        out = model(x, samples, mode='tensor')
    flat = []

    def walk(o):
        if torch.is_tensor(o):
            flat.append(o)
        elif isinstance(o, (list, tuple)):
            for i in o:
                walk(i)
    walk(out)
    # the mask logits of the first 2 RoIs stand for all 100 (the file stays small)
    return {f'out{i}': t[:2].clone() if t.dim() == 4 and len(t) > 2 else t
            for i, t in enumerate(flat)}


CASES = {
    'tokenizer': (build_tokenizer, run_tokenizer),
    'peco': (lambda: _mim('PeCo'), run_mim),
    'peco_mae': (lambda: _mim('PeCoMAE'), run_mim),
    'upernet': (lambda: _dense('upernet_tiny_shapes.py', 'mmseg'), run_dense),
    'mask_rcnn': (lambda: _dense('mask_rcnn_tiny_shapes.py', 'mmdet'), run_dense),
}


# weights renamed since the recording, drawn by the name they had then: the pyramid adapter's
# list of branches became mmseg's Feature2Pyramid (the 4x stack, the 2x conv)
RENAMED = ((re.compile(r'pyramid\.upsample_4x\.'), 'pyramid.branches.0.'),
           (re.compile(r'pyramid\.upsample_2x\.0\.'), 'pyramid.branches.1.'))


def recorded_name(name: str) -> str:
    for pattern, old in RENAMED:
        name = pattern.sub(old, name)
    return name


def fill_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Constant tensors (norm weights, zero biases, counters) keep their value; every other
    floating tensor is drawn from a generator seeded by its name: N(0, 1 / fan_in) for
    weights (activations stay of order one through the depth), N(0, 0.02) otherwise."""
    state = model.state_dict()
    for name, t in state.items():
        if not t.is_floating_point() or t.numel() == 0:
            continue
        flat = t.flatten()
        if bool((flat == flat[0]).all()):
            continue
        g = torch.Generator().manual_seed(zlib.crc32(recorded_name(name).encode()))
        std = (t[0].numel() ** -0.5) if t.dim() >= 2 else 0.02
        t.copy_(torch.randn(t.shape, generator=g) * std)
    return model


def outputs(name: str) -> dict:
    build, run = CASES[name]
    torch.manual_seed(0)
    model = build()
    if hasattr(model, 'init_weights'):
        model.init_weights()
    return run(fill_weights(model))


def record(path: str = 'tests/golden/golden.pt') -> None:
    import peco_mm.registry  # noqa: F401  registers everything
    torch.save({name: outputs(name) for name in CASES}, path)


if __name__ == '__main__':
    record()
