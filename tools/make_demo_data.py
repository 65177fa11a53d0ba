#!/usr/bin/env python3
"""Write the demo data (nothing downloaded): crops of the photos scikit-image ships in the
ImageNet folder layout (OUT/imagenet), and shapes on photo crops in the ADEChallengeData2016
(OUT/ade) and COCO (OUT/coco) layouts. The same seed writes the same bytes.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/make_demo_data.py                        # work_dirs/demo/data, what configs/demo/ read
  tools/make_demo_data.py --out /tmp/demo_data --quick --seed 1
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', default='work_dirs/demo/data', help='output folder '
                   '(work_dirs/demo/data)')
    p.add_argument('--quick', action='store_true', help='fewer images (tests)')
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    from peco_mm.tooling.demo_data import make_demo_data
    for name, path in make_demo_data(args.out, quick=args.quick, seed=args.seed).items():
        print(f'{name}: {path}')


if __name__ == '__main__':
    main()
