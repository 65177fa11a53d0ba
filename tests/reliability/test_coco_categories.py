"""A COCO annotation file whose categories do not match the config's classes is refused with
both lists named (mmdet would shift every label silently), and boxes mmdet drops are counted
and reported once."""
import json
import math

import pytest

from tests.dense.conftest import TINY_MASK_RCNN, write_cfg
from tests.reliability.test_bad_data import check_dataset

CLASSES = ('person', 'bicycle', 'car')


def edit_json(coco_root, edit, split='train2017'):
    path = coco_root / 'annotations' / f'instances_{split}.json'
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return str(path)


def build(coco_root, classes=CLASSES):
    from peco_mm.datasets.coco_checks import CheckedCocoDataset
    return CheckedCocoDataset(data_root=str(coco_root), ann_file='annotations/'
                              'instances_train2017.json', data_prefix=dict(img='train2017/'),
                              metainfo=dict(classes=classes), pipeline=[])


def instances(ds):
    return [i for k in range(len(ds)) for i in ds.get_data_info(k)['instances']]


def test_renamed_category_is_refused(coco_root):
    def rename(data):
        data['categories'][0]['name'] = 'human'
    ann = edit_json(coco_root, rename)
    with pytest.raises(ValueError) as err:
        build(coco_root)
    msg = str(err.value)
    assert msg.startswith(f"{ann}: its categories do not match the config's classes: "
                          "categories ['human'] are not among the classes")
    assert "in the file: [(1, 'human'), (2, 'bicycle'), (3, 'car')]" in msg
    assert "classes of the config (3): ['person', 'bicycle', 'car']" in msg


def test_shifted_labels_are_refused(coco_root):
    def drop_person(data):  # bicycle would become label 0 ('person')
        data['categories'] = data['categories'][1:]
        data['annotations'] = [a for a in data['annotations'] if a['category_id'] != 1]
    edit_json(coco_root, drop_person)
    with pytest.raises(ValueError, match=r"'bicycle' would train as label 0 \('person'\) "
                       r"instead of 1"):
        build(coco_root)
    ds = build(coco_root, classes=CLASSES[1:])  # the classes the file has: accepted
    labels = {i['bbox_label'] for i in instances(ds)}
    assert labels == {0, 1}


def test_matching_categories_load_all_boxes(coco_root):
    ds = build(coco_root)
    assert ds.dropped_boxes == {} and ds.dropped_report is None
    assert len(instances(ds)) == 12  # 6 images x 2 shapes
    build(coco_root, classes=ds.METAINFO['classes'])  # the 80 COCO names, same first three


def test_dropped_boxes_are_counted_and_reported_once(coco_root):
    import logging

    from mmengine.logging import MMLogger

    def damage(data):
        anns = data['annotations']
        anns[0]['bbox'][2] = -5.0  # negative width
        anns[1]['bbox'][3] = 0.0  # zero height
        anns[2]['bbox'][0] = math.nan
        anns[3]['category_id'] = 7  # not a category of the file
        anns[4]['bbox'][:2] = [500.0, 500.0]  # outside the 128x96 image
    ann = edit_json(coco_root, damage)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        ds = build(coco_root)
    finally:
        logger.removeHandler(handler)
    assert ds.dropped_boxes == {'non-finite or malformed bbox': 1, 'outside the image': 1,
                                'unknown category id': 1,
                                'zero or negative size (w or h < 1, or area <= 0)': 2}
    assert len(instances(ds)) == 12 - 5
    lines = [r.getMessage() for r in records if 'boxes of' in r.getMessage()]
    assert lines == [ds.dropped_report]  # logged once, as a warning
    assert lines[0].startswith(f'{ann}: 5 boxes of 6 images dropped: ')
    assert '1 unknown category id (e.g. annotation 4 of 000000000002.jpg)' in lines[0]


def test_check_dataset_reports_categories_and_dropped_boxes(tmp_path, coco_root,
                                                            isolated_mmengine, capsys):
    cfg = write_cfg(tmp_path / 'mrcnn.py', TINY_MASK_RCNN, data=coco_root, lr=1e-3, epochs=1)
    args = [cfg, '--split', 'train', '--workers', '0', '--cfg-options',
            'train_dataloader.dataset.metainfo.classes=[person,bicycle,car]']

    def zero_box(data):
        data['annotations'][0]['bbox'][2] = 0.0
    edit_json(coco_root, zero_box)
    status, out = check_dataset(args, capsys)
    assert status == 0 and 'NOTE ' in out and '1 boxes of 6 images dropped: 1 zero' in out

    def rename(data):
        data['categories'][0]['name'] = 'human'
    edit_json(coco_root, rename)
    status, out = check_dataset(args, capsys)
    assert status == 1 and 'all files are good' not in out
    assert "BAD train_dataloader.dataset: ValueError: " in out and "['human']" in out
