"""The number of classes of a config's `CheckSegLabels` transforms, taken from its model.

`set_label_check_classes(cfg)` (called by the launcher before anything is built, and by
tools/check_dataset.py) sets `num_classes` of every `CheckSegLabels` in the dataloaders to
`model.decode_head.num_classes`, so a config that changes the head's classes checks its label
maps against the new number; `label_checks(cfg)` finds those transforms, with their keys.
"""
from __future__ import annotations


def set_label_check_classes(cfg) -> None:
    """Set `num_classes` of every CheckSegLabels in the config's dataloaders to the model's
    `decode_head.num_classes`; raise ValueError naming both keys when one set in a pipeline
    differs from it, or when neither is known."""
    head = (cfg.get('model') or {}).get('decode_head')
    heads = head if isinstance(head, (list, tuple)) else [head]
    model_classes = next((h.get('num_classes') for h in heads
                          if isinstance(h, dict) and h.get('num_classes')), None)
    for key, check in label_checks(cfg):
        own = check.get('num_classes')
        if own is None and model_classes is None:
            raise ValueError(f'{key}: CheckSegLabels needs num_classes and the config has no '
                             'model.decode_head.num_classes to take it from')
        if own is not None and model_classes is not None and own != model_classes:
            raise ValueError(f'{key}.num_classes={own} but model.decode_head.num_classes='
                             f'{model_classes}: labels would be checked against the wrong '
                             f'number of classes; drop {key}.num_classes (it follows the '
                             'model) or make them equal')
        check['num_classes'] = own if own is not None else model_classes


def label_checks(cfg):
    """(config key, dict) of every CheckSegLabels transform in the dataloaders' datasets."""
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        stack = [(f'{loader}.dataset', (cfg.get(loader) or {}).get('dataset'))]
        while stack:
            key, ds = stack.pop()
            if not isinstance(ds, dict):
                continue
            for i, t in enumerate(ds.get('pipeline') or []):
                if isinstance(t, dict) and str(t.get('type')).split('.')[-1] == 'CheckSegLabels':
                    yield f'{key}.pipeline.{i}', t
            inner = ds.get('dataset')
            stack += [(f'{key}.dataset.{j}', d) for j, d in enumerate(inner)] if isinstance(
                inner, list) else [(f'{key}.dataset', inner)]
            stack += [(f'{key}.datasets.{j}', d) for j, d in enumerate(ds.get('datasets') or [])]
