#!/usr/bin/env python3
"""Write the shape world (peco_mm/tooling/shape_world.py; nothing downloaded): unlabeled images
for pretraining, a labelled judge split, few-label splits in the ImageNet folder layout and
per-pixel masks in the ADEChallengeData2016 layout. The same arguments write the same bytes.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/make_world.py                                   # work_dirs/study/world, 20000 images
  tools/make_world.py --out /tmp/world --n-pretrain 2000   # fewer images (the demo uses 5000)
  tools/make_world.py --out /tmp/world_upright --n-pretrain 5000 --val-per-class 20 --no-rotation
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', default='work_dirs/study/world', help='output folder')
    p.add_argument('--n-pretrain', type=int, default=20000, help='unlabeled images (20000)')
    p.add_argument('--per-class', type=int, default=10, help='few-label images per class (10)')
    p.add_argument('--val-per-class', type=int, default=30, help='validation per class (30)')
    p.add_argument('--judge-per-class', type=int, default=100,
                   help='clean labelled images per class for the judge (100)')
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
                         rotate=not args.no_rotation)
    except ValueError as err:
        p.error(str(err))
    for name, path in out.items():
        print(f'{name}: {path}')


if __name__ == '__main__':
    main()
