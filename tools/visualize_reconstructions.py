#!/usr/bin/env python3
"""Save a PNG grid of originals and their reconstructions by a trained PeCo tokenizer:
originals on one row, their reconstructions on the row below, --per-row pairs per row pair.
Prints the PSNR over the images.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/visualize_reconstructions.py work_dirs/tokenizer_vqvae_in1k/epoch_100.pth \\
      data/imagenet/val --out recon.png --num 16
  tools/visualize_reconstructions.py work_dirs/demo/tokenizer_lambda1_seed0/iter_120.pth \\
      work_dirs/demo/world/cls/val --out recon.png --img-size 32
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('checkpoint', help='tokenizer checkpoint (tools/train.py)')
    p.add_argument('images', help='an image folder (searched recursively) or one image')
    p.add_argument('--out', required=True, help='output .png file')
    p.add_argument('--num', type=int, default=8, help='number of images (8)')
    p.add_argument('--per-row', type=int, default=8, help='image pairs per grid row (8)')
    p.add_argument('--img-size', type=int, default=224,
                   help='short side resized to this, centre crop (224)')
    p.add_argument('--device', help='cpu or cuda (default: cuda when available)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    import torch

    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.utils.image import image_grid
    from peco_mm.tooling.images import find_images, load_images, save_png
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    try:
        files = find_images(args.images)[:args.num]
    except FileNotFoundError as err:
        raise SystemExit(f'visualize_reconstructions.py: {err}')
    tok = FrozenPeCoTokenizer(args.checkpoint, with_decoder=True, config_key='CHECKPOINT')
    tok.to(device)
    img = load_images(files, args.img_size).to(device)  # (B, 3, H, W) in [-1, 1]
    with torch.no_grad():
        recon = tok.decode(tok.encode(img))
    rows = []
    for s in range(0, len(files), args.per_row):
        rows += [img[s:s + args.per_row], recon[s:s + args.per_row]]
    save_png(image_grid(rows), args.out)
    psnr = 10 * torch.log10(4 / (img - recon).pow(2).mean()).item()  # range [-1, 1]: peak 2
    print(f'{len(files)} images -> {args.out} (PSNR {psnr:.2f} dB)')


if __name__ == '__main__':
    main()
