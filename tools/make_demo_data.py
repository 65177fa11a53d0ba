"""Write the demo data (nothing downloaded): scikit-image photo crops in the ImageNet folder
layout, and shapes on photo crops in the ADEChallengeData2016 and COCO layouts.

    python tools/make_demo_data.py [DIR] [--quick] [--seed 0]
"""
import argparse
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('root', nargs='?', default='work_dirs/demo/data')
    p.add_argument('--quick', action='store_true', help='fewer images (tests)')
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args(argv)
    from peco_mm.utils.demo_data import make_demo_data
    for name, path in make_demo_data(args.root, quick=args.quick, seed=args.seed).items():
        print(f'{name}: {path}')


if __name__ == '__main__':
    main()
