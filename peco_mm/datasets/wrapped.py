"""A data loader's dataset config read through dataset wrappers.

A config's `train_dataloader.dataset` may wrap the dataset that holds the pipeline: mmengine's
`RepeatDataset` / `ClassBalancedDataset`, the launcher's `BadSampleGuard` (which every config a
training run dumps into its work dir carries), or any wrapper of the same shape. They all keep
the wrapped dataset under `dataset` (a `ConcatDataset`, under `datasets`: its first one is
read), so a reader follows that key, whatever the wrapper's type, to the dataset config that
has a `pipeline`.
"""
from __future__ import annotations

from collections.abc import Mapping


def inner_dataset(loader, key: str = 'train_dataloader') -> tuple[str, Mapping | None]:
    """(dotted key, config) of the dataset inside `loader` (a data loader config) that holds a
    pipeline, through wrappers; (the key searched last, None) when there is none."""
    name, node = f'{key}.dataset', loader.get('dataset') if isinstance(loader, Mapping) else None
    while isinstance(node, Mapping):
        if 'pipeline' in node:
            return name, node
        if isinstance(node.get('datasets'), (list, tuple)) and node['datasets']:
            name, node = f'{name}.datasets.0', node['datasets'][0]
        else:
            name, node = f'{name}.dataset', node.get('dataset')
    return name, None


def dataset_pipeline(cfg: Mapping, key: str = 'train_dataloader') -> list:
    """The pipeline (a list of transform configs) of `cfg[key]`'s dataset, through dataset
    wrappers; ValueError naming the key when the config has none."""
    name, dataset = inner_dataset(cfg.get(key), key)
    if dataset is None:
        raise ValueError(f'{key}.dataset: the config has no dataset with a pipeline (looked '
                         f'through dataset wrappers down to {name})')
    pipeline = dataset['pipeline']
    if not isinstance(pipeline, (list, tuple)):
        raise ValueError(f'{name}.pipeline is {type(pipeline).__name__}, expected a list of '
                         'transform configs')
    return list(pipeline)
