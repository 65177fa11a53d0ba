"""Class labels of classification and video datasets, checked against the model's classes.

mmaction2's VideoDataset reads `file label` lines: a line with only the file name gives label
-1, and a label at or above the head's `num_classes` trains until the loss fails with
`Target -1 is out of bounds` / `Target 7 is out of bounds`, naming no file; in validation
such labels are scored silently, and an empty list ends the first validation with numpy's
`need at least one array to concatenate`. mmpretrain's datasets read `gt_label` the same way
from an annotation file. `label_problems` names each such sample's file and what was
expected; the launcher (`check_dataset_labels`) stops before training, and
tools/check_dataset.py lists every one.
"""
from __future__ import annotations

from ..datasets.bad_samples import FILE_KEYS

LABEL_KEYS = ('gt_label', 'label')  # mmpretrain, mmaction2
# the classifiers whose head learns the dataset's labels, and their head's key (a MIM head's
# num_classes is the codebook size: its dataset's labels are not learned)
CLASSIFIER_HEADS = {'ImageClassifier': 'head', 'Recognizer2D': 'cls_head',
                    'Recognizer3D': 'cls_head'}


def classifier_classes(cfg) -> tuple[str, int] | None:
    """('model.<head>.num_classes', n) of a classification / video model config, else None."""
    model = cfg.get('model') or {}
    key = CLASSIFIER_HEADS.get(str(model.get('type', '')).split('.')[-1].split('::')[-1])
    head = model.get(key) if key else None
    if isinstance(head, dict) and isinstance(head.get('num_classes'), int):
        return f'model.{key}.num_classes', head['num_classes']
    return None


def leaf_datasets(dataset) -> list:
    """The datasets that hold files (unwrapping Concat/Repeat/ClassBalanced wrappers and
    BadSampleGuard)."""
    if getattr(dataset, 'datasets', None):
        return [leaf for d in dataset.datasets for leaf in leaf_datasets(d)]
    if getattr(dataset, 'dataset', None) is not None:
        return leaf_datasets(dataset.dataset)
    return [dataset]


def label_problem(label, num_classes: int, classes_key: str) -> str | None:
    """Why a sample's class label (an int, or a list of ints for multi-label) cannot be
    learned by a head of `num_classes` classes, or None."""
    if getattr(label, 'is_floating_point', lambda: False)():
        return None  # mmaction2's multi-class one-hot vector: no index to check
    values = label.tolist() if hasattr(label, 'tolist') else label
    values = values if isinstance(values, (list, tuple)) else [values]
    if values == [-1]:
        return (f'no label (its annotation line names only the file); expected a class index '
                f'0..{num_classes - 1}')
    bad = [v for v in values if not isinstance(v, int) or not 0 <= v < num_classes]
    if not bad:
        return None
    return (f'label {bad[0]} is outside the {num_classes} classes of {classes_key} (allowed: '
            f'0..{num_classes - 1})')


def label_problems(dataset, num_classes: int, classes_key: str) -> list[tuple[str, str]]:
    """[(sample's file, why), ...] for every sample of `dataset` (wrappers unwrapped) whose
    label is missing or outside the model's classes; samples without a label key pass."""
    out = []
    for ds in leaf_datasets(dataset):
        for i in range(len(ds)):
            info = ds.get_data_info(i)
            label = next((info[k] for k in LABEL_KEYS if k in info), None)
            problem = None if label is None else label_problem(label, num_classes, classes_key)
            if problem:
                where = next((str(info[k]) for k in FILE_KEYS if info.get(k)), f'sample {i}')
                out.append((where, problem))
    return out


def describe_problems(what: str, problems: list[tuple[str, str]]) -> str:
    """One message for the first few (file, why) of a dataset."""
    shown = '; '.join(f'{f}: {why}' for f, why in problems[:3])
    more = f' (and {len(problems) - 3} more)' if len(problems) > 3 else ''
    return (f'{what}: {len(problems)} sample(s) with a label the model cannot learn: {shown}'
            f'{more}. Fix the annotation file (one "file label" line per sample) or the '
            "head's num_classes; tools/check_dataset.py CONFIG lists them all.")
