#!/usr/bin/env python3
"""Decode every image and label map of a config's datasets and report every bad file.

Builds the datasets of the chosen splits exactly as training would (same data_root, ann_file,
data_prefix), then reads each sample's image (and segmentation label map) in --workers
processes: empty or unreadable files, images that do not decode (corrupt, truncated), label
maps that are RGB or not the size of their image. Prints one line per bad file with the reason
and exits with status 1 if there is any (0 when all are good). A progress bar goes to stderr.

Missing files of a COCO annotation file, and categories that do not match the config's
classes, are reported when the dataset is built; boxes the dataset drops (zero or negative
size, NaN, unknown category, outside the image) are counted in one NOTE line per file.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/check_dataset.py configs/peco/pretrain_vitb_in1k_300e.py --workers 16
  tools/check_dataset.py configs/peco/upernet_vitb_ade20k.py --split train val
  tools/check_dataset.py CONFIG --cfg-options train_dataloader.dataset.data_root=data/imagenet
to train past a few bad files instead, put in the config:
  bad_samples = dict(policy='skip', max_skips=20)
"""
SPLITS = ('train', 'val', 'test')


def parse_args(argv=None):
    from mmengine.config import DictAction  # light: no torch
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config', help='config file path')
    p.add_argument('--split', nargs='+', choices=SPLITS, default=None,
                   help='which dataloaders to check (default: every one the config has)')
    p.add_argument('--workers', type=int, default=4, help='decoding processes (4); 0 = none')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                   help='override config keys, e.g. train_dataloader.dataset.data_root=DIR')
    args = p.parse_args(argv)
    if args.workers < 0:
        p.error(f'--workers must be >= 0, got {args.workers}')
    return args


def leaf_datasets(dataset):
    """The datasets that hold files (unwrapping Concat/Repeat/ClassBalanced wrappers)."""
    if getattr(dataset, 'datasets', None):
        return [leaf for d in dataset.datasets for leaf in leaf_datasets(d)]
    if getattr(dataset, 'dataset', None) is not None:
        return leaf_datasets(dataset.dataset)
    return [dataset]


def collect_samples(cfg, splits):
    """{split: [(image path, label path or None), ...]}, [(what, why)] for build errors, and
    the datasets' notes (e.g. dropped COCO boxes)."""
    from mmengine.registry import DATASETS
    samples, errors, notes = {}, [], []
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if not loader or not loader.get('dataset'):
            continue
        try:
            dataset = DATASETS.build(loader.dataset)
            if hasattr(dataset, 'full_init'):
                dataset.full_init()
        except Exception as e:  # noqa: BLE001 (a missing annotation or image, a bad folder)
            errors.append((f'{split}_dataloader.dataset', f'{type(e).__name__}: {e}'))
            continue
        pairs = []
        for ds in leaf_datasets(dataset):
            if getattr(ds, 'dropped_report', None):
                notes.append(ds.dropped_report)
            for i in range(len(ds)):
                info = ds.get_data_info(i)
                pairs.append((info.get('img_path'), info.get('seg_map_path')))
        samples[split] = list(dict.fromkeys(pairs))  # a file shared by two splits: once each
    return samples, errors, list(dict.fromkeys(notes))


def check(pairs, workers: int):
    """Every (file, reason) found, with a progress bar on stderr."""
    from mmengine.utils import ProgressBar

    from peco_mm.datasets.file_checks import sample_problems
    bar = ProgressBar(len(pairs), file=sys.stderr)
    bad = []
    if workers == 0:
        results = map(sample_problems, pairs)
        for res in results:
            bad += res
            bar.update()
    else:
        import multiprocessing
        with multiprocessing.get_context('fork').Pool(workers) as pool:
            for res in pool.imap_unordered(sample_problems, pairs, chunksize=8):
                bad += res
                bar.update()
    sys.stderr.write('\n')
    return sorted(bad)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not osp.isfile(args.config):
        raise SystemExit(f'check_dataset.py: config file {args.config!r} not found')
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))  # run from any folder
    from mmengine.registry import init_default_scope

    import peco_mm  # noqa: F401  (registers peco_mm types)
    from peco_mm.engine.launch import check_dataset_paths, load_config, sync_with_model
    cfg = load_config(args.config, args.cfg_options)
    try:  # e.g. a label check whose classes differ from the model's
        sync_with_model(cfg)
    except ValueError as e:
        raise SystemExit(f'check_dataset.py: {e}')
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    splits = args.split or [s for s in SPLITS if cfg.get(f'{s}_dataloader')]
    try:  # a missing data_root / ann_file: one line with the expected layout
        check_dataset_paths(cfg, phases=tuple(splits))
    except FileNotFoundError as e:
        raise SystemExit(f'check_dataset.py: {e}')
    samples, bad, notes = collect_samples(cfg, splits)
    pairs = list(dict.fromkeys(p for split in samples.values() for p in split))
    n_img = len({p[0] for p in pairs if p[0]})
    n_seg = len({p[1] for p in pairs if p[1]})
    print(f'checking {n_img} images' + (f' and {n_seg} label maps' if n_seg else '')
          + f' of {", ".join(samples) or "no split"} with {args.workers} workers', flush=True)
    bad += check(pairs, args.workers)
    for note in notes:
        print(f'NOTE {note}')
    for path, reason in bad:
        print(f'BAD {path}: {reason}')
    print(f'{len(bad)} bad file(s)' if bad else 'all files are good')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
