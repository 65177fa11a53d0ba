"""`make demo` in its --quick form (a few iterations per stage, about 2 minutes on 2 cores):
the report has every section and image, the images show what they claim, and the data
generators are deterministic and in the layouts the host datasets read."""
import re

import numpy as np
import pytest
from PIL import Image

from tests.conftest import run_tool

SECTIONS = ['## Data', '## 1. Perceptual network', '## 2. Tokenizer', '## 3. PeCo masked image',
            '## Loss curves', '## 4. Dense fine-tuning', '## Where these numbers stand']
IMAGES = ['reconstructions.png', 'codebook_usage.png', 'loss_curves.png',
          'dense_loss_curves.png', 'mim/grid.png']


@pytest.fixture(scope='module')
def quick_demo(tmp_path_factory):
    wd = tmp_path_factory.mktemp('demo')
    proc = run_tool(['tools/demo.py', '--quick', '--work-dir', wd], timeout=600,
                    env=dict(OMP_NUM_THREADS='2'))
    return wd, proc.stdout + proc.stderr


def test_quick_demo_report_has_every_section_and_image(quick_demo):
    wd, log = quick_demo
    assert f'report: {wd / "report.md"}' in log
    for n in range(7):  # visible progress: every stage announced
        assert re.search(rf'==> \[\s*\d+ s\] {n}\. ', log), n
    text = (wd / 'report.md').read_text()
    assert 'toy-scale run' in text and '84.5' in text and '48.5' in text  # vs the paper
    pos = [text.index(s) for s in SECTIONS]
    assert pos == sorted(pos)
    for name in IMAGES:
        assert f'(report_files/{name})' in text, name
        assert (wd / 'report_files' / name).stat().st_size > 1000, name
    # the tables hold numbers, not placeholders, where every quick stage gives one
    for row in ('| MoCo v3 (stage 1) |', '| pixel only (lambda = 0) |', '| PeCo (lambda = 1) |'):
        line = next(ln for ln in text.splitlines() if ln.startswith(row))
        assert re.search(r'\d+\.\d', line), line
    psnr = float(next(ln for ln in text.splitlines()
                      if ln.startswith('| PeCo (lambda = 1) |')).split('|')[2])
    assert 5 < psnr < 60
    seg = next(ln for ln in text.splitlines() if ln.startswith('| PeCo |')).split('|')
    assert 0 <= float(seg[2]) <= 100  # mIoU from mmseg's IoUMetric
    # every stage went through a shipped config and left its checkpoint
    for d, ckpt in (('mocov3', 'iter_3.pth'), ('tokenizer_perceptual', 'iter_4.pth'),
                    ('tokenizer_pixel', 'iter_4.pth'), ('pretrain', 'iter_4.pth'),
                    ('upernet_peco', 'iter_3.pth'), ('upernet_scratch', 'iter_3.pth'),
                    ('mask_rcnn_peco', 'epoch_1.pth'), ('mask_rcnn_scratch', 'epoch_1.pth')):
        assert (wd / d / ckpt).is_file(), (d, ckpt)
    assert (wd / 'mocov3' / 'mocov3_vit_tiny_pecovit.pth').is_file()


def test_reconstruction_grid_rows(quick_demo):
    """Top row: the held-out originals, exactly; rows 2-3: reconstructions that differ."""
    wd, _ = quick_demo
    grid = np.asarray(Image.open(wd / 'report_files' / 'reconstructions.png'))[::2, ::2]
    files = sorted((wd / 'data' / 'imagenet' / 'val').glob('*/*.png'))
    first = np.asarray(Image.open(files[0]).convert('RGB'))
    np.testing.assert_array_equal(grid[2:66, 2:66], first)
    assert grid.shape[0] == 3 * 66 + 2
    assert np.abs(grid[68:132, 2:66].astype(int) - first).mean() > 1  # a reconstruction


def test_demo_data_is_deterministic_and_in_host_layouts(tmp_path):
    from peco_mm.utils import HELD_OUT_PHOTOS, make_demo_data
    a = make_demo_data(tmp_path / 'a', quick=True)
    make_demo_data(tmp_path / 'b', quick=True)
    fa = sorted(p.relative_to(tmp_path / 'a') for p in (tmp_path / 'a').rglob('*') if p.is_file())
    fb = sorted(p.relative_to(tmp_path / 'b') for p in (tmp_path / 'b').rglob('*') if p.is_file())
    assert fa == fb and len(fa) > 100
    for rel in fa[::17]:
        assert (tmp_path / 'a' / rel).read_bytes() == (tmp_path / 'b' / rel).read_bytes(), rel
    assert sorted(p.name for p in (a['imagenet'] / 'val').iterdir()) == sorted(HELD_OUT_PHOTOS)
    # the host datasets read them: mmseg ADE20K and mmdet COCO
    from mmdet.datasets import CocoDataset
    from mmseg.datasets import ADE20KDataset
    ade = ADE20KDataset(data_root=str(a['ade']), data_prefix=dict(
        img_path='images/validation', seg_map_path='annotations/validation'), pipeline=[])
    assert len(ade) == 4
    lab = np.asarray(Image.open(ade[0]['seg_map_path']))
    assert set(np.unique(lab)) <= {0, 1, 2, 3} and len(np.unique(lab)) > 1
    coco = CocoDataset(data_root=str(a['coco']), ann_file='annotations/instances_val2017.json',
                       data_prefix=dict(img='val2017/'), pipeline=[])
    assert len(coco) == 4 and all(len(coco[i]['instances']) == 2 for i in range(4))
    # shapes are painted on photos, not on flat noise: backgrounds vary a lot
    img = np.asarray(Image.open(ade[0]['img_path']))
    assert img[lab == 0].std() > 20
