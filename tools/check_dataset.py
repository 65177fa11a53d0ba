#!/usr/bin/env python3
"""Decode every image, label map and video of a config's datasets and report every bad file.

Builds the datasets of the chosen splits exactly as training would (same data_root, ann_file,
data_prefix), then reads each sample's image (and segmentation label map) or video in
--workers processes: empty or unreadable files, images and videos that do not decode
(corrupt, truncated), label maps that are RGB or not the size of their image, or hold values
outside the model's classes (`model.decode_head.num_classes`, after `reduce_zero_label`) or
above 255 (a 16-bit map, which mmseg reads as 8 bits). Class labels of classification and
video datasets are checked against `model.head.num_classes` / `model.cls_head.num_classes`
(a missing label, -1, or one outside the classes). Prints one line per bad file with the
reason and exits with status 1 if there is any (0 when all are good). A progress bar goes to
stderr.

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
  tools/check_dataset.py configs/peco/timesformer_vitb_k400.py --split train val
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


def collect_samples(cfg, splits):
    """{split: [Sample, ...]}, [(what, why)] for build errors and bad class labels, and the
    datasets' notes (e.g. dropped COCO boxes)."""
    from mmengine.registry import DATASETS

    from peco_mm.supervisor.label_checks import classifier_classes, label_problems, leaf_datasets
    samples, errors, notes = {}, [], []
    classes = classifier_classes(cfg)
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
        if classes:
            errors += label_problems(dataset, classes[1], classes[0])
        rule = seg_rule(cfg)
        found = []
        for ds in leaf_datasets(dataset):
            if getattr(ds, 'dropped_report', None):
                notes.append(ds.dropped_report)
            found += [sample_of(ds.get_data_info(i), rule) for i in range(len(ds))]
        samples[split] = list(dict.fromkeys(found))  # a file shared by two splits: once each
    return samples, list(dict.fromkeys(errors)), list(dict.fromkeys(notes))


def seg_rule(cfg):
    """How label maps' values are checked: the model's decode_head classes and the label
    check's ignore_index (None without a decode head)."""
    from peco_mm.supervisor.file_checks import SegRule
    from peco_mm.supervisor.seg_classes import label_checks
    head = (cfg.get('model') or {}).get('decode_head')
    head = head[0] if isinstance(head, (list, tuple)) and head else head
    if not isinstance(head, dict) or not isinstance(head.get('num_classes'), int):
        return None
    ignore = next((c.get('ignore_index', 255) for _, c in label_checks(cfg)), 255)
    return SegRule(head['num_classes'], ignore)


def sample_of(info: dict, rule):
    """The Sample (files, label rule) of one data info."""
    from peco_mm.supervisor.file_checks import Sample
    seg = info.get('seg_map_path')
    if seg and rule is not None:
        rule = rule._replace(reduce_zero_label=bool(info.get('reduce_zero_label')))
    video = info.get('filename') if isinstance(info.get('filename'), str) else None
    return Sample(info.get('img_path'), seg, video, rule if seg else None)


def check(pairs, workers: int):
    """Every (file, reason) found, with a progress bar on stderr."""
    from mmengine.utils import ProgressBar

    from peco_mm.supervisor.file_checks import sample_problems
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
    from peco_mm.supervisor.launch import check_dataset_paths, load_config, sync_with_model
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
    counts = [(len({p[i] for p in pairs if p[i]}), what) for i, what in
              enumerate(('images', 'label maps', 'videos'))]
    shown = ' and '.join(f'{n} {what}' for n, what in counts if n) or '0 images'
    print(f'checking {shown} of {", ".join(samples) or "no split"} with {args.workers} '
          'workers', flush=True)
    bad += check(pairs, args.workers)
    for note in notes:
        print(f'NOTE {note}')
    for path, reason in bad:
        print(f'BAD {path}: {reason}')
    print(f'{len(bad)} bad file(s)' if bad else 'all files are good')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
