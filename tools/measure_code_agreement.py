"""How many tokenizer codes flip when the encoder runs in bf16 autocast instead of fp32.

    python tools/measure_code_agreement.py [--checkpoint TOKENIZER.pth] [--images DIR]
        [--img-size 224] [--num 16] [--batch-size 4] [--device cpu]

Without --checkpoint: the paper's architecture (37.5M, K = 8192) with random weights, its
codebook drawn from encoder outputs of other crops as the quantizer's data init does. Without
--images: random crops of scikit-image's colour photos. On CPU, bf16 autocast is emulated where
the processor lacks bf16 instructions: slow, but the numbers are those of bf16 arithmetic.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))


EPILOG = """examples:
  tools/measure_code_agreement.py --num 16 --batch-size 4 --threads 2
  tools/measure_code_agreement.py \\
      --checkpoint work_dirs/demo/tokenizer_lambda1_seed0/iter_120.pth \\
      --images work_dirs/demo/world/cls/val --img-size 32 --num 200
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--checkpoint', help='tokenizer checkpoint (default: random weights)')
    p.add_argument('--images', help='image folder (default: scikit-image photo crops)')
    p.add_argument('--img-size', type=int, default=224, help='crop size in pixels')
    p.add_argument('--num', type=int, default=16, help='images compared')
    p.add_argument('--batch-size', type=int, default=4, help='images per encode call')
    p.add_argument('--device', default='cpu', help='cpu or cuda')
    p.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    p.add_argument('--seed', type=int, default=0, help='seed of the crops and random weights')
    return p.parse_args(argv)


def random_tokenizer(img_size: int, seed: int):
    """Paper architecture, random weights, codebook from encoder outputs of other crops."""
    import torch

    from peco_mm.tooling.inputs import measurement_images
    from peco_mm.tokenizer import PeCoTokenizer
    torch.manual_seed(seed)
    tok = PeCoTokenizer(with_decoder=False, perceptual_weight=0.0).eval()
    K = tok.num_embeddings
    n = -(-K // (img_size // tok.downsample) ** 2)  # crops to have >= K encoder outputs
    x = measurement_images(None, img_size, n, seed=seed + 1)
    with torch.no_grad():
        z = torch.cat([tok.encoder(x[i:i + 4]) for i in range(0, n, 4)])
        tok.quantizer.initialise_codebook(tok.quantizer.flatten(z))
    return tok


def main(argv=None):
    args = parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    from peco_mm.tooling.code_agreement import code_agreement
    from peco_mm.tooling.inputs import measurement_images
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    if args.checkpoint:
        tok = FrozenPeCoTokenizer(args.checkpoint)
        name = args.checkpoint
    else:
        tok = random_tokenizer(args.img_size, args.seed)
        name = 'random weights (paper architecture)'
    tok = tok.to(args.device)
    x = measurement_images(args.images, args.img_size, args.num, args.seed).to(args.device)
    r = code_agreement(tok, x, args.batch_size)
    print(f'| {name} | K = {tok.num_embeddings} | {args.img_size} px | {args.num} images | '
          f'{int(r["codes"])} codes | {int(r["flipped"])} flipped | '
          f'agreement {100 * r["agreement"]:.2f} % | median gap of flipped '
          f'{r["flipped_median_gap"]:.2e} |')
    return r


if __name__ == '__main__':
    main()
