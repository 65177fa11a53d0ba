"""Pre-flight check of the number of classes: the model's heads against the dataset's.

A head with fewer outputs than the dataset has classes fails late and bare (mmseg: `IndexError:
Target 88 is out of bounds` after the first batches), or not at all (mmdet trains a head of
the wrong size without a word); an ImageNet subset with fewer class folders than mmpretrain's
1000 ImageNet classes stops in mmpretrain's assertion with no fix named. `problems(cfg,
datasets, make)` compares, before anything is built,

- the dataset's classes: its `metainfo.classes` / `classes` (a list, or a file with one name a
  line), else the class folders of a folder-layout classification set, else the host's
  default (mmpretrain's ImageNet 1000, mmseg's ADE20K 150, mmdet's COCO 80);
- with every classifier head's `num_classes`: mmpretrain's `model.head` of an
  ImageClassifier (and `data_preprocessor.num_classes` where Mixup / CutMix or one-hot
  targets read it), mmseg's
  `decode_head` / `auxiliary_head`, mmdet's `roi_head.bbox_head` / `mask_head`;

and names the keys to change. Standard library only (run by the launcher before torch).
"""
from __future__ import annotations

import os
import os.path as osp

HOST_CLASSES = {'ImageNet': 1000, 'ADE20KDataset': 150, 'CocoDataset': 80}


def head_counts(cfg) -> list[tuple[str, int]]:
    """(config key, num_classes) of every classifier head of the model."""
    model = cfg.get('model') or {}
    out = []
    if cfg.get('default_scope') == 'mmpretrain':
        if str(model.get('type', '')).split('.')[-1] == 'ImageClassifier':
            out.append(('model.head', (model.get('head') or {}).get('num_classes')))
            prep = cfg.get('data_preprocessor') or {}
            if uses_one_hot(model, prep):  # else its num_classes is never read
                out.append(('data_preprocessor', prep.get('num_classes')))
    elif cfg.get('default_scope') == 'mmseg':
        out += [(f'model.{k}', (model.get(k) or {}).get('num_classes'))
                for k in ('decode_head', 'auxiliary_head') if isinstance(model.get(k), dict)]
    elif cfg.get('default_scope') == 'mmdet':
        roi = model.get('roi_head') or {}
        for name in ('bbox_head', 'mask_head'):
            heads = roi.get(name)
            for i, head in enumerate(heads if isinstance(heads, (list, tuple)) else [heads]):
                key = f'model.roi_head.{name}' + (f'.{i}' if isinstance(heads, (list, tuple))
                                                  else '')
                out.append((key, head.get('num_classes') if isinstance(head, dict) else None))
    return [(f'{k}.num_classes', n) for k, n in out if isinstance(n, int)]


def uses_one_hot(model, prep) -> bool:
    """Whether mmpretrain's ClsDataPreprocessor makes one-hot targets of `num_classes`: with
    batch augments (Mixup / CutMix, from `model.train_cfg.augments` or its own) or
    `to_onehot`."""
    augments = (model.get('train_cfg') or {}).get('augments') or prep.get('batch_augments')
    return bool(augments or prep.get('to_onehot'))


def declared_classes(ds) -> int | None:
    """The number of classes a dataset config names itself (None when it names none)."""
    classes = (ds.get('metainfo') or {}).get('classes') or ds.get('classes')
    if isinstance(classes, (list, tuple)):
        return len(classes)
    if isinstance(classes, str) and osp.isfile(classes):
        with open(classes) as f:
            return sum(1 for line in f if line.strip())
    return None


def folder_classes(folder: str) -> int:
    with os.scandir(folder) as it:
        return sum(1 for e in it if e.is_dir())


def problems(cfg, datasets, make) -> list:
    """One problem per head whose num_classes differs from a dataset's class count, and one
    per folder-layout ImageNet whose class folders are not mmpretrain's 1000. `datasets`:
    (loader, dataset dict, kind, class folder or None); `make(key, message, details, path)`
    builds a problem."""
    heads, out = head_counts(cfg), []
    for loader, ds, kind, folder in datasets:
        declared = declared_classes(ds)
        found = folder_classes(folder) if folder and osp.isdir(folder) else None
        n = declared or found or HOST_CLASSES.get(kind)
        where = (f'{folder!r} has {found} class folders' if not declared and found else
                 f'the {kind or "dataset"} classes number {n}')
        if kind == 'ImageNet' and not declared and found and found != 1000:
            out.append(make(f'{loader}.dataset.classes', f'{loader}: {where}, but mmpretrain\'s '
                            'ImageNet lists 1000 classes',
                            ['Fix (a subset): list the folders in a file, e.g. ls '
                             f'{folder} > classes.txt, and --cfg-options '
                             + ' '.join(f'{k}.dataset.classes=classes.txt' for k in (
                                 'train_dataloader', 'val_dataloader', 'test_dataloader')
                                        if cfg.get(k))
                             + ''.join(f' {k}={found}' for k, _ in heads)], 'classes:ImageNet'))
            continue
        wrong = [k for k, m in heads if n and m != n]
        if wrong:
            out.append(make(wrong[0], f'{loader}: {where}, but ' + ', '.join(
                f'{k}={m}' for k, m in heads if m != n), [
                f'Fix: --cfg-options {" ".join(f"{k}={n}" for k in wrong)}, or give the '
                f'dataset the classes of the model ({loader}.dataset.metainfo.classes)'],
                f'classes:{wrong[0]}'))
    return out
