#!/usr/bin/env python3
"""Agreement of image distances with human judgement (PeCo Fig. 1), on BAPPS' 2AFC triplets.

BAPPS (Zhang et al., CVPR 2018, the LPIPS data) stores each two-alternative forced-choice
triplet as `ref/N.png`, `p0/N.png`, `p1/N.png` and `judge/N.npy`, the fraction of people who
found p1 closer to ref, under `2afc/<split>/<subset>/`. A distance d agrees with the people
as LPIPS scores it: a triplet scores `judge` when d(ref, p1) < d(ref, p0), `1 - judge` when
d(ref, p0) < d(ref, p1), and 0.5 on a tie; the 2AFC score is the mean over triplets, given
with a 95 % confidence interval (normal approximation over the per-triplet scores).

Distances:
- `l2`: mean squared pixel difference (images in [-1, 1]);
- `codebook`: mean squared distance between the quantized codeword maps of a trained PeCo
  tokenizer (`--tokenizer`, any tools/train.py tokenizer checkpoint): how far apart the
  codebook puts the two images;
- `perceptual`: the tokenizer's perceptual loss (Eq. 4) with a frozen network
  (`--perceptual-checkpoint`, MoCo v3 ViT-B by default, `--perceptual-layers`);
- `dalle`: the same codebook distance with DALL-E's codes (BEiT's tokenizer; `--dalle-encoder`
  and `--dalle-decoder`, OpenAI's encoder.pkl / decoder.pkl, read without running them): a
  code's vector is the decoder's embedding of it (peco_mm/tokenizer/dalle.py). DALL-E codes
  8x down, so the codebook map of a 64 px image is 8 x 8 where PeCo's is 4 x 4.
"""
from __future__ import annotations

import argparse
import math
import os.path as osp
import sys
from pathlib import Path
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

DISTANCES = ('l2', 'codebook', 'perceptual', 'dalle')
EPILOG = """examples:
  tools/perceptual_agreement.py data/bapps/2afc/val --distances l2
  tools/perceptual_agreement.py data/bapps/2afc/val \\
      --tokenizer work_dirs/tokenizer_vqvae_in1k/epoch_100.pth \\
      --perceptual-checkpoint checkpoints/mocov3_vit_base_300ep.pth \\
      --dalle-encoder checkpoints/dalle_encoder.pkl --dalle-decoder checkpoints/dalle_decoder.pkl \\
      --out agreement.json
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('root', help="BAPPS 2AFC folder: a subset (with ref/, p0/, p1/, judge/) or a "
                   "split holding subsets (e.g. 2afc/val: cnn, traditional, ...)")
    p.add_argument('--distances', nargs='+', choices=DISTANCES, default=None,
                   help='default: l2, plus codebook / perceptual when their weights are given')
    p.add_argument('--tokenizer', help='PeCo tokenizer checkpoint (for the codebook distance)')
    p.add_argument('--perceptual-checkpoint', help='perceptual network weights (any format '
                   'the converter reads)')
    p.add_argument('--perceptual-net', default='vit', choices=('vit', 'resnet50', 'vgg16'))
    p.add_argument('--dalle-encoder', help="DALL-E's encoder weights (OpenAI's encoder.pkl or "
                   "OpenMMLab's dalle_encoder.pth), for the dalle distance")
    p.add_argument('--dalle-decoder', help="DALL-E's decoder weights (OpenAI's decoder.pkl): "
                   'its code embedding gives the dalle distance')
    p.add_argument('--perceptual-layers', type=int, nargs='+', default=[3, 6, 9, 12])
    p.add_argument('--size', type=int, default=64, help='images are resized to this square '
                   'size (BAPPS: 64; a multiple of the tokenizer downsampling)')
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--device', default='cpu')
    p.add_argument('--out', help='write the scores as JSON here')
    return p.parse_args(argv)


def find_subsets(root: Path) -> list[Path]:
    """The 2AFC subset folders under root (root itself when it holds ref/p0/p1/judge)."""
    want = ('ref', 'p0', 'p1', 'judge')
    if all((root / d).is_dir() for d in want):
        return [root]
    subsets = sorted(d for d in root.iterdir() if all((d / w).is_dir() for w in want)) \
        if root.is_dir() else []
    if not subsets:
        raise FileNotFoundError(f'{root}: no 2AFC triplets; expected ref/, p0/, p1/ and judge/ '
                                'in it or in its sub-folders (BAPPS 2afc/<split>/<subset>/)')
    return subsets


def load_triplets(subset: Path) -> list[tuple[Path, Path, Path, float]]:
    """(ref, p0, p1, judge) per triplet id present in all four folders."""
    import numpy as np
    out = []
    for ref in sorted((subset / 'ref').glob('*.png')):
        p0, p1 = subset / 'p0' / ref.name, subset / 'p1' / ref.name
        judge = subset / 'judge' / (ref.stem + '.npy')
        if not (p0.is_file() and p1.is_file() and judge.is_file()):
            raise FileNotFoundError(f'{subset}: triplet {ref.stem} lacks one of {p0}, {p1}, '
                                    f'{judge}')
        value = np.load(judge, allow_pickle=False)
        if value.size != 1 or not 0.0 <= float(value.reshape(-1)[0]) <= 1.0:
            raise ValueError(f'{judge}: expected one fraction in [0, 1], got {value!r}')
        out.append((ref, p0, p1, float(value.reshape(-1)[0])))
    return out


def load_images(paths, size: int):
    """(N, 3, size, size) RGB float in [-1, 1]."""
    import numpy as np
    import torch
    from PIL import Image
    arrs = [np.asarray(Image.open(p).convert('RGB').resize((size, size), Image.BICUBIC))
            for p in paths]
    return torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2).float() / 127.5 - 1


def build_distances(args) -> dict:
    """name -> f(ref, p0, p1) -> ((B,) d(ref, p0), (B,) d(ref, p1)), images in [-1, 1]."""
    names = args.distances or (['l2'] + (['codebook'] if args.tokenizer else []) +
                               (['perceptual'] if args.perceptual_checkpoint else []) +
                               (['dalle'] if args.dalle_encoder and args.dalle_decoder else []))
    fns = {}
    for name in names:
        if name == 'l2':
            fns[name] = to_both(lambda a, b: (a - b).pow(2).flatten(1).mean(1))
        elif name == 'codebook':
            if not args.tokenizer:
                raise SystemExit('perceptual_agreement: the codebook distance needs --tokenizer')
            from peco_mm.tokenizer import FrozenPeCoTokenizer
            tok = FrozenPeCoTokenizer(args.tokenizer, channels_last=False).to(args.device)
            fns[name] = codebook_distance(tok)
        elif name == 'dalle':
            if not (args.dalle_encoder and args.dalle_decoder):
                raise SystemExit('perceptual_agreement: the dalle distance needs --dalle-encoder '
                                 'and --dalle-decoder')
            from peco_mm.tokenizer import DalleTokenizer
            tok = DalleTokenizer(args.dalle_encoder, args.dalle_decoder, config_key='--dalle')
            fns[name] = codebook_distance(tok.to(args.device))
        elif name == 'perceptual':
            if not args.perceptual_checkpoint:
                raise SystemExit('perceptual_agreement: the perceptual distance needs '
                                 '--perceptual-checkpoint')
            from peco_mm.tokenizer import PerceptualLoss
            loss = PerceptualLoss(args.perceptual_net, args.perceptual_checkpoint,
                                  layers=args.perceptual_layers).to(args.device).eval()
            fns[name] = to_both(lambda a, b, loss=loss: loss(a, b, reduce=False))
    return fns


def to_both(distance):
    """d(a, b) -> f(ref, p0, p1) = (d(ref, p0), d(ref, p1))."""
    return lambda ref, p0, p1: (distance(ref, p0), distance(ref, p1))


def codebook_distance(tok):
    """f(ref, p0, p1): mean squared distance between the codeword maps of `tok`'s codes,
    the reference encoded once."""
    def codewords(x):
        return tok.codewords(tok.encode(x))  # (B, D, h, w)

    def distances(ref, p0, p1):
        q = codewords(ref)
        return tuple((q - codewords(p)).pow(2).sum(1).flatten(1).mean(1) for p in (p0, p1))
    return distances


def two_afc(d0, d1, judge):
    """Per-triplet 2AFC scores (LPIPS' rule): judge if p1 is closer, 1 - judge if p0 is."""
    import torch
    tie = torch.full_like(judge, 0.5)
    return torch.where(d1 < d0, judge, torch.where(d0 < d1, 1 - judge, tie))


def summarise(scores) -> dict:
    """Mean 2AFC score and its 95 % normal-approximation interval."""
    n = len(scores)
    mean = float(scores.mean())
    half = 1.96 * float(scores.std(unbiased=True)) / math.sqrt(n) if n > 1 else float('nan')
    return dict(score=mean, ci95=[mean - half, mean + half], triplets=n)


def evaluate(args) -> dict:
    import torch
    fns = build_distances(args)
    results = {}
    for subset in find_subsets(Path(args.root)):
        triplets = load_triplets(subset)
        per = {name: [] for name in fns}
        for i in range(0, len(triplets), args.batch_size):
            chunk = triplets[i:i + args.batch_size]
            ref, p0, p1 = (load_images([t[k] for t in chunk], args.size).to(args.device)
                           for k in range(3))
            judge = torch.tensor([t[3] for t in chunk])
            with torch.no_grad():
                for name, fn in fns.items():
                    d0, d1 = fn(ref, p0, p1)
                    per[name].append(two_afc(d0.cpu(), d1.cpu(), judge))
        results[subset.name] = {name: summarise(torch.cat(v)) for name, v in per.items()}
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    from peco_mm.tooling.tool_runs import save_json
    results = evaluate(args)
    for subset, by_name in results.items():
        for name, r in by_name.items():
            lo, hi = r['ci95']
            print(f'{subset:<16}{name:<12}2AFC {100 * r["score"]:6.2f} % '
                  f'(95 % CI {100 * lo:.2f} - {100 * hi:.2f}, {r["triplets"]} triplets)')
    save_json(args.out, results, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
