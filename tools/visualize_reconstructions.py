"""Save a side-by-side PNG grid of originals (top) and their reconstructions (bottom).

    python tools/visualize_reconstructions.py CKPT IMAGE_DIR --out recon.png [--num 8]
        [--img-size 224] [--per-row 8]
"""
import argparse
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('checkpoint')
    p.add_argument('images', help='an image folder (searched recursively) or one image')
    p.add_argument('--out', required=True, help='output .png file')
    p.add_argument('--num', type=int, default=8, help='number of images')
    p.add_argument('--per-row', type=int, default=8, help='image pairs per grid row')
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from PIL import Image

    from peco_mm.tokenizer import PeCoTokenizer
    from peco_mm.tokenizer.image_io import find_images, load_image
    from peco_mm.tokenizer.visualize import side_by_side_grid
    files = find_images(args.images)[:args.num]
    tok = PeCoTokenizer.from_checkpoint(args.checkpoint, with_decoder=True,
                                        map_location=args.device)
    img = torch.stack([load_image(f, args.img_size) for f in files]).to(args.device)
    with torch.no_grad():
        recon = tok.decode(tok.encode(img))
    rows = [side_by_side_grid(img[s:s + args.per_row], recon[s:s + args.per_row])
            for s in range(0, len(files), args.per_row)]
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)), constant_values=255)
            for r in rows]
    Image.fromarray(np.concatenate(rows, 0)).save(args.out)
    psnr = 10 * torch.log10(4 / (img - recon).pow(2).mean()).item()  # range [-1, 1]: peak 2
    print(f'{len(files)} images -> {args.out} (PSNR {psnr:.2f} dB)')


if __name__ == '__main__':
    main()
