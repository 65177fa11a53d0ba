#!/usr/bin/env python3
"""Masked-token prediction, decoded to pixels (PeCo Fig. 4-5 and appendix Fig. 6).

For each image: block-mask it, let the pretrained model predict the codes of the masked
patches, keep the tokenizer's own codes at the visible ones, and decode the result with the
tokenizer's decoder. One PNG row per image: original | masked | reconstruction.

CONFIG is the pretraining config (sizes, normalisation, tokenizer); CHECKPOINT holds the ViT,
the head and the tokenizer's encoder and codebook; the decoder comes from the tokenizer
checkpoint (default: the one in the config). BEiT's config (DALL-E codes, PeCo Fig. 4's
other side) draws with DALL-E's decoder, `--dalle-decoder` (OpenAI's decoder.pkl, read
without running it). IMAGES are image files or folders (the images under a folder, sorted,
at most --num of them). Writes OUT/<image name>.png for each image and OUT/grid.png with all
rows, and lists them in OUT/visualize_mim_files.json: a rerun into the same folder first
removes the files of that list (and no other file), so OUT holds one run's images.
"""
import argparse
import os
import os.path as osp
import sys
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/visualize_mim.py configs/peco/pretrain_vitb_in1k_300e.py work_dirs/pretrain/epoch_300.pth \
      photo1.jpg photo2.jpg --out vis/ --tokenizer work_dirs/tokenizer/epoch_100.pth
  tools/visualize_mim.py work_dirs/demo/pretrain_peco_seed0/pretrain_peco_world.py \
      work_dirs/demo/pretrain_peco_seed0/iter_130.pth work_dirs/demo/world/cls/val/*/00000.png \
      --out vis/ --num-masked 24
  tools/visualize_mim.py configs/peco/pretrain_beit_dalle_vitb_in1k_300e.py \
      work_dirs/pretrain_beit_dalle_vitb_in1k_300e/epoch_300.pth photo1.jpg --out vis_beit/ \
      --dalle-decoder checkpoints/dalle_decoder.pkl
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('images', nargs='+', help='image files or folders of images')
    p.add_argument('--out', required=True, help='output folder')
    p.add_argument('--num-masked', type=int, default=None,
                   help="masked patches per image (default: the config's mask generator)")
    p.add_argument('--min-block', type=int, default=None, help='smallest mask block')
    p.add_argument('--num', type=int, default=8,
                   help='at most this many images of each folder given (8); files named are '
                   'all drawn')
    p.add_argument('--tokenizer', help="tokenizer checkpoint with the decoder (default: the "
                   "config's target_generator checkpoint)")
    p.add_argument('--dalle-decoder', help="DALL-E's decoder weights (OpenAI's decoder.pkl), "
                   "for a config whose targets are DALL-E's codes (BEiT)")
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--device', help='cpu or cuda (default: cuda when available)')
    return p.parse_args(argv)


def find_step(pipeline: list, name: str) -> dict | None:
    return next((dict(t) for t in pipeline if t.get('type') == name), None)


def mask_generator(pipeline: list, grid: tuple[int, int], num_masked: int | None,
                   min_block: int | None):
    """The pipeline's mask generator (BEiT's block-wise 75 of 196 when it names none) on the
    image's patch grid, with --num-masked and --min-block applied."""
    from peco_mm.datasets.mim_transforms import RandomMaskGenerator, mask_step_of
    from peco_mm.registry import TRANSFORMS
    n = grid[0] * grid[1]
    step = mask_step_of(pipeline) or dict(type='BlockwiseMaskGenerator',
                                          num_masking_patches=round(75 / 196 * n))
    step['input_size'] = grid
    if issubclass(TRANSFORMS.get(step['type']), RandomMaskGenerator):
        if num_masked is not None:
            step['mask_ratio'] = num_masked / n
        return TRANSFORMS.build(step)
    if num_masked is not None:
        step['num_masking_patches'] = num_masked
    if min_block is not None:
        step['min_num_patches'] = min_block
    step['min_num_patches'] = min(step.get('min_num_patches', 16),
                                  step.get('num_masking_patches', 75))
    return TRANSFORMS.build(step)


def view_sizes(cfg, pipeline: list) -> tuple[int, int | None]:
    crop = find_step(pipeline, 'RandomResizedCropAndInterpolationWithTwoPic') or {}
    size = crop.get('size', cfg.model.backbone.get('img_size', 224))
    second = crop.get('second_size')
    as_int = (lambda s: s if s is None or isinstance(s, int) else int(s[0]))
    return as_int(size), as_int(second)


def image_files(paths: list[str], num: int) -> list[str]:
    """The files named, and up to `num` images under each folder named (sorted); a one-line
    error for a path that is neither, or a folder without images."""
    from peco_mm.tooling.images import find_images
    files = []
    for path in paths:
        if osp.isdir(path):
            try:
                files += find_images(path)[:num]
            except FileNotFoundError as err:
                raise SystemExit(f'visualize_mim.py: {err}') from None
        elif osp.isfile(path):
            files.append(path)
        else:
            raise SystemExit(f'visualize_mim.py: {path!r} not found; give image files or '
                             'folders of images')
    return files


def output_names(files: list[str]) -> list[str]:
    """One PNG name per image: its own name; with the parent folder's name in front where
    two images share a name (and a number where that is not enough)."""
    stems = [osp.splitext(osp.basename(f))[0] for f in files]
    names = []
    for f, stem in zip(files, stems):
        name = stem if stems.count(stem) == 1 else \
            f'{osp.basename(osp.dirname(osp.abspath(f)))}_{stem}'
        base, k = name, 2
        while f'{name}.png' in names or name == 'grid':
            name, k = f'{base}_{k}', k + 1
        names.append(f'{name}.png')
    return names


MANIFEST = 'visualize_mim_files.json'


def start_output(out: str, names: list[str]) -> None:
    """Make OUT hold this run's files only: remove the files the previous run listed in OUT's
    manifest (plain files directly in OUT; nothing else is touched), then list this run's."""
    import json
    os.makedirs(out, exist_ok=True)
    manifest = osp.join(out, MANIFEST)
    try:
        with open(manifest) as f:
            old = json.load(f).get('files', [])
    except (OSError, ValueError, AttributeError):
        old = []
    for name in old if isinstance(old, list) else []:
        path = osp.join(out, str(name))
        if osp.basename(str(name)) == name and osp.isfile(path) and not osp.islink(path):
            os.remove(path)
    with open(manifest, 'w') as f:
        json.dump(dict(tool='tools/visualize_mim.py', files=names), f, indent=1)


def tokenizer_checkpoint(tg: dict, tokenizer: str | None) -> str:
    """The tokenizer checkpoint whose decoder draws the codes: --tokenizer, else the config's
    target_generator checkpoint; a one-line error naming the option and the path when the
    file is not there."""
    if tokenizer:
        if not osp.isfile(tokenizer):
            raise SystemExit(f'visualize_mim.py: --tokenizer {tokenizer!r} not found')
        return tokenizer
    default = tg.get('checkpoint')
    if not default or not osp.isfile(str(default)):
        raise SystemExit(
            f"visualize_mim.py: the config's tokenizer checkpoint "
            f'(model.target_generator.checkpoint={default!r}) not found; pass --tokenizer '
            'PATH, the tokenizer checkpoint whose decoder draws the reconstruction')
    return str(default)


def build_model(cfg, checkpoint: str, tokenizer: str | None, device: str,
                dalle_decoder: str | None = None):
    """(the pretraining model from CONFIG + CKPT, decode: codes -> images in [-1, 1]). The
    decoder, which the pretraining checkpoint does not hold, comes from the tokenizer
    checkpoint, or for DALL-E's codes from `dalle_decoder`."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    model_cfg = cfg.model.to_dict()
    tg = dict(model_cfg['target_generator'])
    dalle = None
    if tg.get('type') == 'DALL-E':
        if not dalle_decoder:
            raise SystemExit("visualize_mim.py: this config's targets are DALL-E's codes; pass "
                             "--dalle-decoder PATH (OpenAI's decoder.pkl) to draw them")
        from peco_mm.tokenizer import DalleTokenizer
        dalle = DalleTokenizer(decoder=dalle_decoder, config_key='--dalle').to(device)
        # the encoder's weights are CHECKPOINT's target_generator.*, loaded (and checked) below
        model_cfg['require_target_checkpoint'] = False
    elif tg.get('type') != 'FrozenPeCoTokenizer':
        raise TypeError(f"target_generator {tg.get('type')!r} has no decoder; reconstructions "
                        'need a FrozenPeCoTokenizer, or DALL-E with --dalle-decoder')
    else:  # encoder, codebook and decoder
        tg.update(with_decoder=True, checkpoint=tokenizer_checkpoint(tg, tokenizer))
    if not osp.isfile(checkpoint):
        raise SystemExit(f'visualize_mim.py: pretraining checkpoint {checkpoint!r} not found')
    model_cfg['target_generator'] = tg
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    model = MODELS.build(model_cfg)
    from peco_mm.checkpoint import read_checkpoint
    state = read_checkpoint(checkpoint)
    state = state.get('state_dict', state)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith('target_generator.decoder.')]
    if missing or unexpected:
        raise ValueError(f'{checkpoint} does not fit {cfg.model.type} of this config: missing '
                         f'{missing[:5]}, unexpected {unexpected[:5]}')
    model = model.to(device).eval()
    return model, (dalle or model.target_generator).decode


def draw_row(model, decode, masker, path: str, size: int, second: int | None):
    """(row (3, H, W, 3) uint8: original | masked | reconstruction, masked patches, masked-token
    accuracy) for one image."""
    import numpy as np
    import torch
    from PIL import Image

    from peco_mm.tooling.images import read_rgb
    from peco_mm.utils.image import to_uint8
    rgb = read_rgb(path, size)
    views = [rgb] + ([read_rgb(path, second)] if second else [])
    # the data preprocessor expects BGR uint8 (B, 3, H, W), as LoadImageFromFile gives
    inputs = [torch.from_numpy(v[..., ::-1].copy()).permute(2, 0, 1)[None] for v in views]
    data = model.data_preprocessor(dict(inputs=inputs, data_samples=None))
    img, target_img = data['inputs'][0], data['inputs'][-1]
    mask = torch.from_numpy(masker.generate())[None].to(img.device)  # (1, h, w)
    with torch.no_grad():
        codes = model.tokenize(target_img)  # (1, h, w)
        pred = model.predict_codes(img, mask)  # (1, h, w)
        mixed = torch.where(mask.bool(), pred, codes)
        recon = decode(mixed)  # (1, 3, H, W) in [-1, 1]
    recon = to_uint8(recon[0], [127.5] * 3, [127.5] * 3)
    if recon.shape[:2] != rgb.shape[:2]:
        recon = np.asarray(Image.fromarray(recon).resize(rgb.shape[1::-1], Image.BICUBIC))
    p = model.backbone.patch_size
    pixel_mask = mask[0].cpu().numpy().repeat(p, 0).repeat(p, 1)[..., None]
    masked = np.where(pixel_mask, np.uint8(127), rgb)
    acc = (pred == codes)[mask.bool()].float().mean().item()
    return np.stack([rgb, masked, recon]), int(mask.sum()), acc


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))  # run from any folder
    import numpy as np
    import torch
    from mmengine.config import Config

    import peco_mm  # noqa: F401  (registers peco_mm types)
    from peco_mm.datasets.wrapped import dataset_pipeline
    from peco_mm.tooling.images import save_png
    from peco_mm.utils.image import image_grid
    from peco_mm.utils.quiet import quiet_pkg_resources
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    files = image_files(args.images, args.num)
    if not osp.isfile(args.config):
        raise SystemExit(f'visualize_mim.py: config {args.config!r} not found')
    with quiet_pkg_resources():  # mmengine resolving `mmpretrain::` bases imports it
        cfg = Config.fromfile(args.config)
    pipeline = dataset_pipeline(cfg)  # through the dumped config's BadSampleGuard
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    model, decode = build_model(cfg, args.checkpoint, args.tokenizer, args.device,
                                args.dalle_decoder)
    size, second = view_sizes(cfg, pipeline)
    grid = (size // model.backbone.patch_size, ) * 2
    masker = mask_generator(pipeline, grid, args.num_masked, args.min_block)

    names = output_names(files)
    start_output(args.out, names + ['grid.png'])
    rows = []
    for path, name in zip(files, names):
        row, num_masked, acc = draw_row(model, decode, masker, path, size, second)
        save_png(image_grid([row]), osp.join(args.out, name))
        print(f'{name[:-4]}: {num_masked} masked patches, masked-token accuracy {acc:.3f}')
        rows.append(row)
    save_png(image_grid(rows), osp.join(args.out, 'grid.png'))
    print(f'wrote {len(rows)} rows to {osp.join(args.out, "grid.png")}')


if __name__ == '__main__':
    main()
