"""Tokenize an image folder into a code file with a trained PeCo tokenizer.

    python tools/tokenize_dataset.py CKPT IMAGE_DIR --out codes.npz [--img-size 224]
        [--batch-size 64] [--device cuda]

Writes `codes` (N, h, w) uint16 (int32 when K > 65536), `files` (paths relative to IMAGE_DIR)
and `num_embeddings` into an .npz file. CKPT is a tools/train.py checkpoint of a tokenizer
config (its architecture is read from the checkpoint).
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
    p.add_argument('--out', required=True, help='output .npz file')
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from peco_mm.tokenizer import PeCoTokenizer
    from peco_mm.tokenizer.image_io import find_images, load_image
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        def tqdm(x, **_):
            return x
    files = find_images(args.images)
    tok = PeCoTokenizer.from_checkpoint(args.checkpoint, map_location=args.device)
    if args.img_size % tok.downsample:
        raise SystemExit(f'--img-size {args.img_size} is not a multiple of the tokenizer\'s '
                         f'downsampling factor {tok.downsample}')
    dtype = np.uint16 if tok.num_embeddings <= 65536 else np.int32
    side = args.img_size // tok.downsample
    codes = np.zeros((len(files), side, side), dtype)
    for s in tqdm(range(0, len(files), args.batch_size), desc='tokenize', unit='batch'):
        batch = torch.stack([load_image(f, args.img_size)
                             for f in files[s:s + args.batch_size]]).to(args.device)
        codes[s:s + len(batch)] = tok.encode(batch).cpu().numpy().astype(dtype)
    root = args.images if osp.isdir(args.images) else osp.dirname(args.images)
    rel = np.array([osp.relpath(f, root) for f in files])
    np.savez_compressed(args.out, codes=codes, files=rel, num_embeddings=tok.num_embeddings)
    print(f'{len(files)} images -> {args.out}: codes {codes.shape}, '
          f'{len(np.unique(codes))} of {tok.num_embeddings} codes used')


if __name__ == '__main__':
    main()
