"""What a training run does with a sample that cannot be loaded.

One corrupt JPEG kills a 100-epoch run mid-epoch with mmcv's `failed to load image`, a
zero-byte PNG with an OpenCV assertion that names no file, and a truncated video with
decord's `Error reading N bytes`. `BadSampleGuard` wraps the
training dataset (tools/train.py wraps every run's) and either stops at once naming the file
and the reason (the default), or logs the file and takes the next sample, up to a limit.
`tools/check_dataset.py CONFIG` finds every bad file before a run starts. An error raised in
a pipeline step after the file was read (a transform's settings, a library version) is named
as that step's, not the file's.
"""
from __future__ import annotations

import logging

from mmengine.logging import print_log

from ..registry import DATASETS

POLICIES = ('raise', 'skip')


@DATASETS.register_module()
class BadSampleGuard:
    """A dataset wrapper: loading errors name the file; optionally skip bad samples.

    Args:
        dataset: the dataset or its config.
        policy: 'raise' (default): stop at the first sample that fails to load, naming its
            files; 'skip': log it and use the next sample instead.
        max_skips: with policy='skip', stop once more than this many samples were skipped
            (counted per data-loader worker process).

    Every other attribute (metainfo, get_data_info, ...) is the wrapped dataset's.
    Set it from a config with `bad_samples = dict(policy='skip', max_skips=100)`.
    """

    def __init__(self, dataset, policy: str = 'raise', max_skips: int = 100,
                 lazy_init: bool = False) -> None:
        if policy not in POLICIES:
            raise ValueError(f'BadSampleGuard: policy={policy!r}; allowed: {POLICIES}')
        if not isinstance(max_skips, int) or max_skips < 0:
            raise ValueError(f'BadSampleGuard: max_skips={max_skips!r}; allowed: an int >= 0')
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset
        self.policy = policy
        self.max_skips = max_skips
        self.skipped = 0
        if not lazy_init and hasattr(self.dataset, 'full_init'):
            self.dataset.full_init()

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name):
        if name == 'dataset':  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)

    @property
    def metainfo(self) -> dict:
        return self.dataset.metainfo

    def full_init(self) -> None:
        if hasattr(self.dataset, 'full_init'):
            self.dataset.full_init()

    def __getitem__(self, idx: int):
        while True:
            try:
                return self.dataset[idx]
            except Exception as e:  # noqa: BLE001 (any loading error: decode, transform)
                where = sample_files(self.dataset, idx)
                reason = f'{type(e).__name__}: {str(e).strip() or repr(e)}'
                step = failing_step(e)
                if step is not None and not step.startswith(FILE_READERS):
                    if self.policy == 'raise':  # the file was read: not a bad file
                        raise RuntimeError(
                            f'{where}: training sample {idx} was read, then the pipeline step '
                            f'{step} failed on it ({reason}). Check that step\'s settings and '
                            'the installed versions; tools/check_dataset.py checks the files, '
                            'not the transforms.') from e
                    reason += f', raised in the pipeline step {step}'
                if self.policy == 'raise':
                    raise RuntimeError(
                        f'{where}: training sample {idx} failed to load ({reason}). Find every '
                        'bad file with tools/check_dataset.py CONFIG, or skip such samples '
                        "with bad_samples = dict(policy='skip', max_skips=N) in the config."
                    ) from e
                self.skipped += 1
                if self.skipped > self.max_skips:
                    raise RuntimeError(
                        f'{where}: more than bad_samples.max_skips={self.max_skips} samples '
                        f'failed to load; the last: {reason}. Run tools/check_dataset.py '
                        'CONFIG to list them all.') from e
                print_log(f'skipped bad sample {where} ({reason}); {self.skipped} of '
                          f'max_skips={self.max_skips}', logger='current', level=logging.WARNING)
                idx = (idx + 1) % len(self.dataset)


# pipeline steps that read the sample's file: an error in one of them is the file's
FILE_READERS = ('Load', 'Decord', 'PyAV', 'OpenCVInit', 'RawFrameDecode')


def failing_step(err: BaseException) -> str | None:
    """The class name of the innermost pipeline transform in `err`'s traceback (None: the
    error came from outside every transform, e.g. the dataset's own indexing)."""
    from mmcv.transforms import BaseTransform
    name = None
    tb = err.__traceback__
    while tb is not None:
        if isinstance(tb.tb_frame.f_locals.get('self'), BaseTransform):
            name = type(tb.tb_frame.f_locals['self']).__name__
        tb = tb.tb_next
    return name


# where a sample's files are in its data info: image, label map (mmpretrain, mmdet, mmseg);
# video file, frame folder (mmaction2)
FILE_KEYS = ('img_path', 'seg_map_path', 'filename', 'frame_dir')


def sample_files(dataset, idx: int) -> str:
    """The files of sample `idx` (image, label map, video), as far as the dataset says."""
    try:
        info = dataset.get_data_info(idx)
    except Exception:  # noqa: BLE001
        return f'sample {idx}'
    files = [str(info[k]) for k in FILE_KEYS if isinstance(info.get(k), str) and info[k]]
    return ', '.join(files) or f'sample {idx}'
