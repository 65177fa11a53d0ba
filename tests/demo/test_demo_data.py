"""The photo and shape data the toy configs of configs/demo/ read (tools/make_demo_data.py):
deterministic, and in the layouts the host datasets read."""
import numpy as np
from PIL import Image


def test_demo_data_is_deterministic_and_in_host_layouts(tmp_path):
    from peco_mm.tooling.demo_data import HELD_OUT_PHOTOS, make_demo_data
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
