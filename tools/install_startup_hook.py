#!/usr/bin/env python3
"""Put peco_mm's start-up hook (`peco_mm/ops/peco_mm_mmcv_ext.pth`) into this Python's
site-packages, or take it out (--remove).

`import peco_mm` serves mmcv's RoIAlign and nms from torchvision by itself; the hook is only for
stock OpenMMLab configs that never import peco_mm, in an mmcv-lite environment. `pip install .`
puts it there with the package; an editable install (`pip install -e .`) cannot (setuptools
builds editable wheels from the package folders alone), so `make install` runs this tool after
it, and a user who installs with `pip install -e .` runs it once. `PECO_MM_STARTUP_HOOK=0`
turns an installed hook off without removing it.
"""
import argparse
import shutil
import sys
import sysconfig
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

NAME = 'peco_mm_mmcv_ext.pth'
SOURCE = Path(__file__).resolve().parents[1] / 'peco_mm' / 'ops' / NAME
EPILOG = """examples:
  python tools/install_startup_hook.py            # into this Python's site-packages
  python tools/install_startup_hook.py --remove
  python tools/install_startup_hook.py --site DIR # another site-packages folder
"""


def main(argv=None) -> Path:
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--site', default=sysconfig.get_paths()['purelib'],
                   help="the site-packages folder (this Python's: %(default)s)")
    p.add_argument('--remove', action='store_true', help='take the hook out instead')
    args = p.parse_args(argv)
    site = Path(args.site)
    if not site.is_dir():
        raise SystemExit(f'install_startup_hook: --site {site} is not a folder')
    target = site / NAME
    if args.remove:
        target.unlink(missing_ok=True)
        print(f'install_startup_hook: removed {target}')
    else:
        shutil.copyfile(SOURCE, target)
        print(f'install_startup_hook: wrote {target}')
    return target


if __name__ == '__main__':
    main(sys.argv[1:])
