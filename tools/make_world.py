#!/usr/bin/env python3
"""Write one shape world (peco_mm/tooling/shape_world.py; nothing downloaded): its classes split
into A and B by the seed, unlabeled images for pretraining, a labelled split of A (the perceptual
network's) and one of B (the judge's), few-label splits of B with a tuning and a test half in
the ImageNet folder layout, per-pixel masks of B in the ADEChallengeData2016 layout, and
geometry-matched pairs of B under held-out nuisances. The same arguments write the same bytes.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/make_world.py                                   # work_dirs/study/world, 20000 images
  tools/make_world.py --out /tmp/world --n-pretrain 2000   # fewer images (as the demo)
  tools/make_world.py --out /tmp/world_r3 --seed 3 --no-rotation   # replicate 3's world
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', default='work_dirs/study/world', help='output folder')
    p.add_argument('--n-pretrain', type=int, default=20000, help='unlabeled images (20000)')
    p.add_argument('--per-class', type=int, default=10,
                   help='few-label images per held-out class (10)')
    p.add_argument('--val-per-class', type=int, default=30,
                   help='images per held-out class in each of the tuning and test halves (30)')
    p.add_argument('--judge-per-class', type=int, default=100,
                   help='labelled images per class of A (perceptual network) and of B '
                   '(judge) (100)')
    p.add_argument('--held-out', type=int, default=5, help='classes in B (5 of 10)')
    p.add_argument('--n-pairs', type=int, default=200, help='geometry-matched pairs (200)')
    p.add_argument('--size', type=int, default=32, help='image side in pixels (32)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--no-rotation', action='store_true',
                   help='draw every shape upright (the same world otherwise, image for image)')
    args = p.parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    from peco_mm.tooling.shape_world import make_world
    try:
        out = make_world(args.out, n_pretrain=args.n_pretrain, size=args.size,
                         per_class=args.per_class, val_per_class=args.val_per_class,
                         judge_per_class=args.judge_per_class, seed=args.seed,
                         rotate=not args.no_rotation, held_out=args.held_out,
                         n_pairs=args.n_pairs)
    except ValueError as err:
        p.error(str(err))
    for name, path in out.items():
        print(f'{name}: {path}')
    return out


if __name__ == '__main__':
    main()
