#!/usr/bin/env python3
"""`make demo`: the whole PeCo pipeline end to end on embedded data, with a Markdown report.

Every stage trains a shipped config of configs/demo/ through the same launcher as
tools/train.py, with the schedule the config states; the demo only moves the configs'
work_dirs/demo/ paths under --work-dir and sets the seed:

  0. data       scikit-image's photos -> ImageNet-layout crops (train photos / held-out
                photos), shapes on photo crops in ADEChallengeData2016 and COCO layouts
  1. MoCo v3    mmpretrain's MoCo v3 trains a toy ViT on the crops (the perceptual network);
                tools/convert_checkpoint.py turns it into PeCoViT weights; view retrieval
                against the same ViT randomly initialised
  2. tokenizer  the PeCo VQ-VAE with (lambda = 1) and without (lambda = 0) the perceptual
                loss, --seeds seeds each, tested by tools/test.py's TokenizerMetric
  3. PeCo MIM   a toy PeCoViT learns to predict the seed-0 perceptual tokenizer's codes
  4. dense      UperNet (ADE layout) and Mask R-CNN (COCO layout) from the PeCo weights and
                from scratch, --seeds seeds each
  5. evaluate   the numbers of stages 1-4 in one place
  6. report     <work-dir>/report.md (from tools/demo_report.md) with tables and PNGs

`--quick` cuts every schedule to 4 iterations (1 epoch) and the batches to 8, for the tests.
"""
import argparse
import os.path as osp
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs' / 'demo'
TEMPLATE = ROOT / 'tools' / 'demo_report.md'
CONFIG_ROOT = 'work_dirs/demo'  # where configs/demo/* read and write; moved to --work-dir
QUICK = dict(iters=4, epochs=1, batch=8)
# seconds per run of each stage in the full demo (docs/benchmarks.md), for the ETA
COST = dict(mocov3=93, tokenizer=61, pretrain=74, upernet=12, mask_rcnn=12)
CHECKPOINT = re.compile(r'(iter|epoch)_\d+\.pth')  # what mmengine's CheckpointHook writes
# the paper's numbers for ViT-B (Tables 1-4), quoted in the report
PAPER = dict(in1k=84.5, ade=48.5, box=47.8, mask=42.6, probe_percep=29.7, probe_pixel=10.2)
EPILOG = """examples:
  make demo                                      # = tools/demo.py --work-dir work_dirs/demo
  tools/demo.py --work-dir /tmp/demo --seeds 5   # more seeds for the spread
  tools/demo.py --quick --work-dir /tmp/quick    # every stage for a few steps (tests)
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--work-dir', default=CONFIG_ROOT,
                   help=f'everything goes here: data, runs, report.md ({CONFIG_ROOT})')
    p.add_argument('--seeds', type=int, default=3,
                   help='seeds of the tokenizer and dense runs, for the spread (3)')
    p.add_argument('--quick', action='store_true',
                   help=f"{QUICK['iters']} iterations ({QUICK['epochs']} epoch) per run, "
                   f"batches of {QUICK['batch']}: the tests' check of every stage")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f'--seeds must be >= 1, got {args.seeds}')
    return args


# ---- configs and runs -------------------------------------------------------------------------
class Demo:
    """Where the demo writes, and how it turns configs/demo/* into runs."""

    def __init__(self, work_dir: str, quick: bool, seeds: int) -> None:
        self.wd = Path(work_dir).resolve()
        self.quick, self.seeds = quick, list(range(seeds))
        self.t0 = time.time()
        self.seconds: dict[str, float] = {}
        self.last_checkpoint: dict[str, str] = {}  # run folder -> its last checkpoint
        self.plan = self.make_plan()
        self.plan.t0 = self.t0  # one clock for the stage and the run lines

    def make_plan(self):
        """The runs in the order they train (folder, description, cost): the console's
        'run k of N' lines and overall ETA."""
        from peco_mm.engine.console import RunPlan
        runs = [('mocov3', 'MoCo v3 ViT', COST['mocov3'])]
        for seed in self.seeds:
            sfx = f'_seed{seed}' if seed else ''
            runs += [(f'tokenizer{sfx}', f'tokenizer lambda = 1, seed {seed}', COST['tokenizer']),
                     (f'tokenizer_lambda0{sfx}', f'tokenizer lambda = 0, seed {seed}',
                      COST['tokenizer'])]
        runs.append(('pretrain', 'PeCo pretraining', COST['pretrain']))
        for seed in self.seeds:
            sfx = f'_seed{seed}' if seed else ''
            runs += [(f'{task}_{init}{sfx}', f'{task} from {init}, seed {seed}', COST[task])
                     for task in ('upernet', 'mask_rcnn') for init in ('peco', 'scratch')]
        return RunPlan(runs)

    def announce(self, msg: str) -> None:
        print(f'\n==> [{int(time.time() - self.t0):6d} s] {msg}', flush=True)

    def config(self, name: str, seed: int = 0, scratch: bool = False):
        """configs/demo/<name>: its work_dirs/demo/ paths moved to the work dir, the seed set,
        the backbone's pretrained weights dropped for `scratch`, --quick's short schedule."""
        from mmengine.config import Config

        from peco_mm.tooling.tool_runs import move_root, walk_strings
        cfg = Config.fromfile(str(CONFIGS / name))
        root = str(self.wd)
        move_root(cfg, CONFIG_ROOT, root)
        walk_strings(cfg, lambda s: self.checkpoint_of(s, name))
        cfg.randomness = dict(cfg.get('randomness', {}), seed=seed)
        if scratch:  # the configs' documented way: --cfg-options model.backbone.init_cfg=None
            cfg.model.backbone.init_cfg = None
        if self.quick:
            shorten_schedule(cfg, QUICK['iters'], QUICK['epochs'], QUICK['batch'])
        return cfg

    def checkpoint_of(self, path: str, config: str) -> str:
        """A config's path to another stage's checkpoint: the one that stage wrote. The full
        demo checks that they agree (a config reading a checkpoint its producer's schedule
        never writes is an error); --quick's short runs write earlier ones."""
        folder, file = osp.split(path)
        written = self.last_checkpoint.get(folder)
        if written is None or not CHECKPOINT.fullmatch(file) or path == written:
            return path
        if not self.quick:
            raise ValueError(f'configs/demo/{config} reads {path}, but that stage wrote '
                             f'{written}: the two configs disagree on the schedule')
        return written

    def train(self, name: str, run_dir: str, seed: int = 0, scratch: bool = False) -> dict:
        """Train a demo config as tools/train.py does; returns the run's folder, config file
        (`self.config(...)` as run), last checkpoint and log records. The run's console
        output goes to <run>/console.log; the console gets 'run k of N' and the ETA."""
        from peco_mm.engine.console import output_to
        from peco_mm.engine.launch import run
        from peco_mm.tooling.logs import read_scalars
        cfg = self.config(name, seed, scratch)
        work = self.wd / run_dir
        work.mkdir(parents=True, exist_ok=True)
        cfg.dump(str(work / name))
        self.plan.start(run_dir)
        t = time.time()
        with output_to(work / 'console.log'):
            run(str(work / name), work_dir=str(work), mode='train')
        self.plan.finish(run_dir, time.time() - t)
        ckpt = (work / 'last_checkpoint').read_text().strip()
        self.last_checkpoint[str(work)] = ckpt
        return dict(work=work, config=work / name, ckpt=ckpt, cfg=cfg, recs=read_scalars(work))

    def test(self, r: dict) -> dict:
        """tools/test.py on a trained run: the metrics of the config's test_evaluator (its
        console output appended to the run's console.log)."""
        from peco_mm.engine.console import output_to
        from peco_mm.engine.launch import run
        with output_to(r['work'] / 'console.log'):
            return run(str(r['config']), work_dir=str(r['work']), mode='test',
                       checkpoint=r['ckpt']).metrics

    def schedule(self, r: dict) -> int:
        tc = r['cfg'].train_cfg
        return tc.get('max_iters') or tc.get('max_epochs')


def shorten_schedule(cfg, iters: int, epochs: int, batch: int) -> None:
    """--quick: `iters` iterations (or `epochs` epochs), the iteration-based LR schedule
    scaled to fit, checkpoints, validation and hooks at the end, batches of at most `batch`."""
    tc = cfg.train_cfg
    if 'max_iters' in tc:
        scale, tc.max_iters, n = iters / tc.max_iters, iters, iters
        scheds = cfg.get('param_scheduler') or []
        for s in scheds if isinstance(scheds, list) else [scheds]:
            if not s.get('by_epoch', True):
                for key in ('begin', 'end'):
                    if key in s:
                        s[key] = min(iters, max(int(key == 'end'), round(s[key] * scale)))
    else:
        tc.max_epochs, n = epochs, epochs
    if 'val_interval' in tc:
        tc.val_interval = n
    cfg.default_hooks.checkpoint.interval = n
    cfg.default_hooks.logger.interval = 1
    for hook in cfg.get('custom_hooks') or []:
        if 'interval' in hook:
            hook.interval = min(hook.interval, n)
    cfg.train_dataloader.batch_size = min(cfg.train_dataloader.batch_size, batch)


# ---- stages -------------------------------------------------------------------------------------
def stage_data(demo: Demo) -> dict:
    from peco_mm.tooling.demo_data import make_demo_data
    return make_demo_data(demo.wd / 'data', quick=demo.quick)


def stage_mocov3(demo: Demo, data: dict) -> dict:
    """MoCo v3, converted to PeCoViT at the path the tokenizer config reads, and checked."""
    from peco_mm.tooling.demo_checks import trained_and_random, view_retrieval
    from peco_mm.utils.image import find_images, read_rgb
    from peco_mm.tooling.tool_runs import call_tool
    r = demo.train('mocov3_vit_tiny_photos.py', 'mocov3')
    tok_cfg = demo.config('tokenizer_tiny_photos.py')
    pecovit = tok_cfg.model.perceptual_cfg.checkpoint  # where stage 2 expects the network
    heads = tok_cfg.model.perceptual_cfg.vit_cfg.num_heads
    rc, log = call_tool('convert_checkpoint', [r['ckpt'], pecovit, '--num-heads', heads])
    if rc != 0:
        raise RuntimeError(f'tools/convert_checkpoint.py {r["ckpt"]} failed:\n{log}')

    trained, randoms = trained_and_random(pecovit, heads)  # random: as initialised for training
    views = next(t for t in r['cfg'].train_pipeline if t['type'] == 'MultiView')['transforms']
    images = [read_rgb(f) for f in find_images(data['imagenet'] / 'val')]

    def retrieval(net):
        return view_retrieval(lambda x: net(x)[-1], images, views)

    return dict(r, pecovit=pecovit, n_views=len(images), iters=demo.schedule(r),
                retrieval=dict(trained=retrieval(trained),
                               random=[retrieval(net) for net in randoms]))


def stage_tokenizers(demo: Demo) -> dict:
    """Per seed: the perceptual (lambda = 1) and the pixel-only (lambda = 0) tokenizer, tested.
    Seed 0 trains where configs/demo/pretrain_tiny_photos.py reads its tokenizer."""
    out = {'perceptual': [], 'pixel': []}
    for seed in demo.seeds:
        for key, name, run_dir in (('perceptual', 'tokenizer_tiny_photos.py', 'tokenizer'),
                                   ('pixel', 'tokenizer_tiny_photos_lambda0.py',
                                    'tokenizer_lambda0')):
            run_dir += f'_seed{seed}' if seed else ''
            demo.announce(f'2. tokenizer, {key}, seed {seed}')
            r = demo.train(name, run_dir, seed)
            r['metrics'] = demo.test(r)
            out[key].append(r)
    return out


def stage_pretrain(demo: Demo, data: dict, toks: dict) -> dict:
    import statistics

    from peco_mm.tokenizer import PeCoTokenizer
    from peco_mm.tooling.demo_checks import majority_code_rate
    from peco_mm.utils.image import find_images
    from peco_mm.tooling.logs import series
    from peco_mm.tooling.tool_runs import call_tool
    r = demo.train('pretrain_tiny_photos.py', 'pretrain')
    tok = toks['perceptual'][0]
    grid_dir = demo.wd / 'report_files' / 'mim'
    imgs = sorted((data['imagenet'] / 'val').glob('*/0000.png'))[:3]
    call_tool('visualize_mim', [r['config'], r['ckpt'], *imgs, '--out', grid_dir,
                                '--device', 'cpu', '--tokenizer', tok['ckpt']])
    acc = series(r['recs'], 'mim_acc')[1]
    model = PeCoTokenizer.from_checkpoint(tok['ckpt'])
    train_files = find_images(data['imagenet'] / 'train')[::2]
    return dict(r, iters=demo.schedule(r), mim_acc=statistics.mean(acc[-10:]),
                majority=majority_code_rate(model, train_files),
                num_codes=model.num_embeddings, grid=grid_dir / 'grid.png')


def stage_dense(demo: Demo) -> dict:
    """Per seed: UperNet and Mask R-CNN from the PeCo weights and from scratch."""
    from peco_mm.tooling.logs import last_metrics
    out = {}
    for seed in demo.seeds:
        for task, name in (('upernet', 'upernet_tiny_shapes.py'),
                           ('mask_rcnn', 'mask_rcnn_tiny_shapes.py')):
            for init in ('peco', 'scratch'):
                demo.announce(f'4. {task}, {init}, seed {seed}')
                r = demo.train(name, f'{task}_{init}' + (f'_seed{seed}' if seed else ''), seed,
                               scratch=init == 'scratch')
                r['metrics'] = last_metrics(r['recs'])
                out.setdefault((task, init), []).append(r)
    return out


# ---- report -------------------------------------------------------------------------------------
def spread(values, digits: int = 2, scale: float = 1.0) -> str:
    """'mean ± std (v1, v2, ...)' over seeds; '—' for missing values."""
    import statistics
    vals = [v * scale for v in values if v is not None]
    if not vals:
        return '—'
    if len(vals) == 1:
        return f'{vals[0]:.{digits}f}'
    each = ', '.join(f'{v:.{digits}f}' for v in vals)
    return f'{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f} ({each})'


def differences(a: list, b: list, key: str, digits: int = 2, scale: float = 1.0) -> str:
    """'+x, -y, +z (higher in 2 of 3)': a - b per seed, from per-seed metrics dicts."""
    d = [(x.get(key), y.get(key)) for x, y in zip(a, b)]
    d = [(x - y) * scale for x, y in d if x is not None and y is not None]
    if not d:
        return '—'
    wins = sum(v > 0 for v in d)
    return f"{', '.join(f'{v:+.{digits}f}' for v in d)} (higher in {wins} of {len(d)})"


# report columns: template name -> (metric key, digits, scale)
TOKENIZER_COLUMNS = dict(psnr=('tokenizer/psnr', 2, 1), ssim=('tokenizer/ssim', 3, 1),
                         percep=('tokenizer/perceptual', 4, 1), usage=('tokenizer/usage', 1, 100),
                         perplexity=('tokenizer/perplexity', 1, 1),
                         probe=('tokenizer/codeword_probe_acc', 1, 1))
DENSE_COLUMNS = dict(miou=('mIoU', 1, 1), aacc=('aAcc', 1, 1), box=('coco/bbox_mAP', 1, 100),
                     box50=('coco/bbox_mAP_50', 1, 100), mask=('coco/segm_mAP', 1, 100))


def report_images(demo: Demo, res: dict) -> dict:
    """The report's PNGs, drawn with tools/plot_logs.py's functions."""
    import torch

    from peco_mm.tokenizer import PeCoTokenizer
    from peco_mm.utils.image import find_images, image_grid, load_images, save_png
    from peco_mm.tooling.logs import plot_curves, plot_panel, series
    files_dir = demo.wd / 'report_files'
    toks, pre, dense = res['tokenizers'], res['pretrain'], res['dense']
    seed0 = {k: toks[k][0] for k in ('perceptual', 'pixel')}
    held_out = find_images(res['data']['imagenet'] / 'val')
    x = load_images(held_out[::max(1, len(held_out) // 6)][:6])  # (6, 3, 64, 64) in [-1, 1]
    rows = [x]
    for key in ('pixel', 'perceptual'):
        tok = PeCoTokenizer.from_checkpoint(seed0[key]['ckpt'], with_decoder=True)
        with torch.no_grad():
            rows.append(tok.decode(tok.encode(x)))
    runs = {f'lambda={1 if k == "perceptual" else 0}': seed0[k]['recs'] for k in seed0}
    return dict(
        recon=save_png(image_grid(rows), files_dir / 'reconstructions.png', scale=2),
        usage=plot_panel(files_dir / 'codebook_usage.png', runs, ['codebook_usage'],
                         'codebook usage', 'fraction of K used'),
        perplexity=plot_panel(files_dir / 'codebook_perplexity.png', runs,
                              ['codebook_perplexity'], 'codebook perplexity', 'exp(entropy)'),
        accuracy=plot_panel(files_dir / 'accuracy.png', {'PeCo': pre['recs']}, ['mim_acc'],
                            'masked-token accuracy', 'accuracy'),
        loss=plot_curves(files_dir / 'loss_curves.png', {
            'MoCo v3': series(res['mocov3']['recs'], 'loss'),
            'tokenizer pixel loss, lambda=1': series(seed0['perceptual']['recs'], 'loss_pixel'),
            'tokenizer pixel loss, lambda=0': series(seed0['pixel']['recs'], 'loss_pixel'),
            'PeCo MIM cross-entropy': series(pre['recs'], 'loss')}, 'training losses', 'loss'),
        dense=plot_curves(files_dir / 'dense_loss_curves.png',
                          {f'{t} {i}': series(runs_[0]['recs'], 'loss')
                           for (t, i), runs_ in dense.items()},
                          'dense fine-tuning losses (seed 0)', 'loss'),
        mim=pre['grid'])


def report_values(demo: Demo, res: dict) -> dict:
    """Stage 5: every number tools/demo_report.md shows, by its template name."""
    toks, dense, moco, pre = res['tokenizers'], res['dense'], res['mocov3'], res['pretrain']
    metrics = {k: [r['metrics'] for r in runs] for k, runs in toks.items()}
    for init in ('peco', 'scratch'):  # one dict per seed: UperNet's and Mask R-CNN's metrics
        metrics[init] = [dict(seg['metrics'], **det['metrics']) for seg, det in
                         zip(dense[('upernet', init)], dense[('mask_rcnn', init)])]
    values = {}
    for columns, rows in ((TOKENIZER_COLUMNS, ('perceptual', 'pixel')),
                          (DENSE_COLUMNS, ('peco', 'scratch'))):
        for col, (key, digits, scale) in columns.items():
            for row in rows:
                values[f'{row}_{col}'] = spread([m.get(key) for m in metrics[row]], digits,
                                                scale)
            values[f'diff_{col}'] = differences(metrics[rows[0]], metrics[rows[1]], key,
                                                digits, scale)
    retrieval = moco['retrieval']
    for k in ('top1', 'top5'):
        values[f'retrieval_{k}'] = f"{retrieval['trained'][k]:.1f} %"
        values[f'retrieval_random_{k}'] = spread([r[k] for r in retrieval['random']], 1)
    total = sum(demo.seconds.values())
    return dict(
        values, quick_title=' (--quick)' if demo.quick else '', total_min=f'{total / 60:.1f}',
        stage_times=', '.join(f'{k} {v:.0f} s' for k, v in demo.seconds.items()),
        seeds=', '.join(map(str, demo.seeds)), n_seeds=len(demo.seeds),
        mocov3_iters=moco['iters'], n_views=moco['n_views'],
        chance_top1=f"{100 / moco['n_views']:.1f}", chance_top5=f"{500 / moco['n_views']:.1f}",
        tokenizer_iters=demo.schedule(toks['perceptual'][0]), pretrain_iters=pre['iters'],
        mim_acc=f"{pre['mim_acc'] * 100:.1f}", majority=f"{pre['majority'] * 100:.1f}",
        chance_code=f"{100 / pre['num_codes']:.1f}", num_codes=pre['num_codes'],
        upernet_iters=demo.schedule(dense[('upernet', 'peco')][0]),
        mask_rcnn_epochs=demo.schedule(dense[('mask_rcnn', 'peco')][0]),
        work_dir=demo.wd, **{f'paper_{k}': v for k, v in PAPER.items()},
        **{f'data_{k}': osp.relpath(v, demo.wd) for k, v in res['data'].items()})


def write_report(demo: Demo, res: dict, values: dict) -> Path:
    """Stage 6: the PNGs, and tools/demo_report.md filled in as <work-dir>/report.md."""
    from string import Template
    images = {f'img_{k}': osp.relpath(v, demo.wd) for k, v in report_images(demo, res).items()}
    report = demo.wd / 'report.md'
    report.write_text(Template(TEMPLATE.read_text()).substitute(values, **images))
    return report


def main(argv=None) -> Path:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import warnings
    warnings.filterwarnings('ignore')
    import peco_mm  # noqa: F401
    demo = Demo(args.work_dir, args.quick, args.seeds)
    demo.wd.mkdir(parents=True, exist_ok=True)
    res = {}

    def timed(key: str, msg: str, fn, *a):
        demo.announce(msg)
        t = time.time()
        res[key] = fn(demo, *a)
        demo.seconds[key] = time.time() - t

    timed('data', '0. demo data: scikit-image photos -> ImageNet / ADE20K / COCO layouts',
          stage_data)
    timed('mocov3', '1. MoCo v3 ViT on the photo crops', stage_mocov3, res['data'])
    timed('tokenizers', f'2. tokenizers, lambda = 1 and 0, {args.seeds} seed(s)',
          stage_tokenizers)
    timed('pretrain', '3. PeCo pretraining', stage_pretrain, res['data'], res['tokenizers'])
    timed('dense', f'4. dense fine-tuning, PeCo and scratch, {args.seeds} seed(s)', stage_dense)
    demo.announce('5. evaluation')
    values = report_values(demo, res)
    print(f"view retrieval top-1: MoCo v3 {values['retrieval_top1']}, random init "
          f"{values['retrieval_random_top1']} %\n"
          f"perceptual minus pixel-only: PSNR {values['diff_psnr']}, codeword probe "
          f"{values['diff_probe']}\nPeCo minus scratch: mIoU {values['diff_miou']}, AP box "
          f"{values['diff_box']}")
    demo.announce('6. report')
    report = write_report(demo, res, values)
    print(f'total {time.time() - demo.t0:.0f} s')
    print(f'report: {report}')
    return report


if __name__ == '__main__':
    main()
