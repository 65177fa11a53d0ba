"""The perceptual term's share of the gradient at the reconstruction, per λ and reduction.

    python tools/measure_grad_share.py [--perceptual-checkpoint VIT.pth --layers 3 6 9 12]
        [--num-heads H] [--tokenizer TOKENIZER.pth] [--images DIR] [--img-size 224]
        [--lambdas 0.3 1 3 10] [--num 8]

share = ||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||) at x̂, for Eq. 4 as printed (mean
over channels) and the LPIPS-style reduction (sum over channels). Without a perceptual
checkpoint: a randomly initialised ViT-B/16 at blocks 3/6/9/12. Reconstructions: those of
--tokenizer (a checkpoint with its decoder), else the images blurred (Gaussian, sigma 2 px),
which stands in for a VQ-VAE's loss of detail.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))


EPILOG = """examples:
  tools/measure_grad_share.py --num 8
  tools/measure_grad_share.py --perceptual-checkpoint mocov3_vit-b.pth \\
      --tokenizer work_dirs/tokenizer_vqvae_in1k/epoch_100.pth --lambdas 0.3 1 3 10
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--perceptual-checkpoint', help='ViT checkpoint (default: random ViT-B)')
    p.add_argument('--layers', type=int, nargs='+', default=[3, 6, 9, 12],
                   help='1-based blocks whose outputs the loss compares')
    p.add_argument('--num-heads', type=int, default=None,
                   help='attention heads when the checkpoint does not say')
    p.add_argument('--tokenizer', help='tokenizer checkpoint whose reconstructions are used')
    p.add_argument('--images', help='image folder (default: scikit-image photo crops)')
    p.add_argument('--img-size', type=int, default=224, help='crop size in pixels')
    p.add_argument('--num', type=int, default=8, help='images measured')
    p.add_argument('--lambdas', type=float, nargs='+', default=[0.3, 1.0, 3.0, 10.0],
                   help='perceptual weights to report')
    p.add_argument('--seed', type=int, default=0, help='seed of the crops and random weights')
    return p.parse_args(argv)


def reconstructions(x, tokenizer: str | None):
    import torch
    if tokenizer:
        from peco_mm.tokenizer import FrozenPeCoTokenizer
        tok = FrozenPeCoTokenizer(tokenizer, with_decoder=True)
        with torch.no_grad():
            return tok.decode(tok.encode(x)), f'{tokenizer} reconstructions'
    from torchvision.transforms.v2.functional import gaussian_blur
    return gaussian_blur(x, kernel_size=13, sigma=2.0), 'Gaussian blur (sigma 2 px)'


def main(argv=None):
    args = parse_args(argv)
    import torch

    from peco_mm.tooling.inputs import measurement_images
    from peco_mm.tooling.loss_balance import perceptual_gradient_shares
    from peco_mm.tokenizer import PerceptualLoss
    torch.manual_seed(args.seed)
    x = measurement_images(args.images, args.img_size, args.num, args.seed)
    recon, kind = reconstructions(x, args.tokenizer)
    vit_cfg = dict(img_size=args.img_size)
    if args.num_heads:
        vit_cfg['num_heads'] = args.num_heads
    rows = {}
    for reduction in ('mean', 'sum'):
        torch.manual_seed(args.seed)  # the same random network for both reductions
        loss = PerceptualLoss('vit', args.perceptual_checkpoint, layers=args.layers,
                              allow_random=True, vit_cfg=vit_cfg, channel_reduction=reduction)
        rows[reduction] = perceptual_gradient_shares(loss, x, recon, args.lambdas)
    net = args.perceptual_checkpoint or 'random ViT-B/16'
    print(f'perceptual net: {net}, layers {args.layers}; {args.num} images at {args.img_size} '
          f'px; reconstructions: {kind}')
    print('| channel reduction | ' + ' | '.join(f'λ = {lam:g}' for lam in args.lambdas) + ' |')
    print('|---' * (len(args.lambdas) + 1) + '|')
    for reduction, label in (('mean', 'mean (Eq. 4 as printed)'), ('sum', 'sum (LPIPS)')):
        print(f'| {label} | ' + ' | '.join(f'{100 * rows[reduction][float(lam)]:.1f} %'
                                           for lam in args.lambdas) + ' |')
    return rows


if __name__ == '__main__':
    main()
