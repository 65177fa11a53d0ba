"""COCO annotation checks that mmdet lacks.

mmdet's CocoDataset reads the JSON and finds a missing image only when a dataloader worker
first tries to open it, possibly hours into training. `CheckedCocoDataset` checks, once when
the annotation file is loaded, that every image it lists exists, and names the JSON and the
missing files.

It also checks the annotation file's categories against the config's classes. mmdet numbers
the labels by the position of each category among those whose name is in `classes`, in the
order of the JSON's `categories` list: a category renamed in the JSON (say `person` -> `human`)
drops its boxes and shifts every later category down by one label (bicycles train as class 0,
`person`), without a word. Here every JSON category must be one of the classes, at the label
mmdet gives it; otherwise the load stops with both lists named. Boxes that mmdet drops
(non-positive or non-finite size, unknown category id, outside the image) are counted and
reported in one line per load.
"""
from __future__ import annotations

import logging
import math
import os.path as osp

from mmdet.datasets import CocoDataset
from mmengine.logging import print_log

from ..registry import DATASETS


@DATASETS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class CheckedCocoDataset(CocoDataset):
    """mmdet's `CocoDataset` plus up-front checks of the annotation file: the listed images
    exist, its categories are the config's classes at the same labels, and dropped boxes are
    reported (`dropped_boxes`: reason -> count, `dropped_report`: the logged line or None).

    Args:
        check_images: stat every image once at load time (local files only; skipped for
            remote `backend_args`). About 1 s per 100k images on a local disk.
        (everything else: see mmdet's CocoDataset)
    """

    def __init__(self, *args, check_images: bool = True, **kwargs) -> None:
        self.check_images = check_images
        self.dropped_boxes: dict[str, int] = {}
        self.dropped_report: str | None = None
        super().__init__(*args, **kwargs)

    def load_data_list(self) -> list[dict]:
        self.dropped_boxes, self._dropped_example = {}, {}
        self._categories_checked = False
        data_list = super().load_data_list()
        self.report_dropped_boxes(len(data_list))
        remote = (self.backend_args or {}).get('backend', 'local') != 'local'
        if self.check_images and not remote:
            missing = [d['img_path'] for d in data_list if not osp.isfile(d['img_path'])]
            if missing:
                shown = ', '.join(missing[:3]) + (' ...' if len(missing) > 3 else '')
                raise FileNotFoundError(
                    f'{self.ann_file}: {len(missing)} of {len(data_list)} images it lists are '
                    f'missing: {shown}. Expected them under '
                    f"{self.data_prefix.get('img', self.data_root)!r} (COCO layout: "
                    'DATA_ROOT/annotations/instances_{train,val}2017.json and '
                    'DATA_ROOT/{train,val}2017/*.jpg).')
        return data_list

    def parse_data_info(self, raw_data_info: dict) -> dict | list[dict]:
        if not self._categories_checked:  # the first image: self.coco and cat_ids are set
            check_categories(self.ann_file, self.coco.dataset.get('categories') or [],
                             tuple(self.metainfo['classes']), self.cat2label)
            self._categories_checked = True
        img = raw_data_info['raw_img_info']
        for ann in raw_data_info['raw_ann_info']:
            reason = self.drop_reason(ann, img)
            if reason:
                self.dropped_boxes[reason] = self.dropped_boxes.get(reason, 0) + 1
                self._dropped_example.setdefault(
                    reason, f"annotation {ann.get('id')} of {img.get('file_name')}")
        return super().parse_data_info(raw_data_info)

    def drop_reason(self, ann: dict, img: dict) -> str | None:
        """Why mmdet's `parse_data_info` drops this box (None: kept, or marked `ignore`)."""
        if ann.get('ignore', False):
            return None
        box = ann.get('bbox') or []
        if len(box) != 4 or not all(isinstance(v, (int, float)) and math.isfinite(v)
                                    for v in box):
            return 'non-finite or malformed bbox'
        x, y, w, h = box
        if w < 1 or h < 1 or not ann.get('area', 0) > 0:
            return 'zero or negative size (w or h < 1, or area <= 0)'
        if ann.get('category_id') not in self.cat2label:
            return 'unknown category id'
        if min(x + w, img['width']) <= max(x, 0) or min(y + h, img['height']) <= max(y, 0):
            return 'outside the image'
        return None

    def report_dropped_boxes(self, n_images: int) -> None:
        if not self.dropped_boxes:
            self.dropped_report = None
            return
        total = sum(self.dropped_boxes.values())
        parts = [f'{n} {why} (e.g. {self._dropped_example[why]})'
                 for why, n in sorted(self.dropped_boxes.items())]
        self.dropped_report = (f'{self.ann_file}: {total} boxes of {n_images} images dropped: '
                               + '; '.join(parts))
        print_log(self.dropped_report, logger='current', level=logging.WARNING)


def check_categories(ann_file: str, categories: list[dict], classes: tuple,
                     cat2label: dict) -> None:
    """Raise ValueError naming both lists unless every category of the annotation file is one
    of `classes` and mmdet's label for it (`cat2label`) is that class's index."""
    in_file = [(c.get('id'), c.get('name')) for c in categories]
    unknown = [name for _, name in in_file if name not in classes]
    shifted = [(name, cat2label.get(cid), classes.index(name)) for cid, name in in_file
               if name in classes and cat2label.get(cid) != classes.index(name)]
    if not unknown and not shifted:
        return
    if unknown:
        why = f'categories {unknown} are not among the classes (their boxes would be dropped)'
    else:
        name, got, want = shifted[0]
        why = (f"'{name}' would train as label {got} ({classes[got]!r}) instead of {want}: "
               "mmdet numbers the labels in the file's category order")
    shown = classes if len(classes) <= 20 else classes[:20] + ('...', )
    raise ValueError(
        f'{ann_file}: its categories do not match the config\'s classes: {why}. Categories '
        f'(id, name) in the file: {in_file}; classes of the config ({len(classes)}): '
        f'{list(shown)}. Set the dataset\'s metainfo=dict(classes=(...)) to the file\'s '
        'category names in id order (and the heads\' num_classes), or fix the file.')
