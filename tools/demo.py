"""`make demo`: the whole PeCo pipeline end to end on embedded data, with a Markdown report.

    python tools/demo.py [--work-dir work_dirs/demo] [--quick]

Every stage is a shipped config under configs/demo/ (each a toy-size child of a configs/peco/
recipe) run by mmengine's Runner exactly as tools/train.py / tools/test.py run it:

  0. data       scikit-image's photos -> ImageNet-layout crops (train photos / held-out
                photos), shapes on photo crops in ADEChallengeData2016 and COCO layouts
  1. MoCo v3    mmpretrain's MoCo v3 trains a toy ViT on the crops (the perceptual network),
                tools/convert_checkpoint.py turns it into PeCoViT weights
  2. tokenizer  the PeCo VQ-VAE with (lambda = 1) and without (lambda = 0) the perceptual loss
  3. PeCo MIM   a toy PeCoViT learns to predict the perceptual tokenizer's codes
  4. dense      UperNet (ADE layout) and Mask R-CNN (COCO layout) from the PeCo weights and
                from scratch
  5. evaluate   kNN probe of the perceptual ViT, tokenizer PSNR / SSIM / usage / codeword probe,
                masked-token accuracy, mIoU, box / mask AP
  6. report     <work-dir>/report.md with tables and PNGs

`--quick` runs a few iterations per stage (about 2 minutes on 2 CPU cores); the default
takes about 15 minutes there.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import os.path as osp
import sys
import time
from pathlib import Path

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / 'configs' / 'demo'
# iterations (epochs for Mask R-CNN) per stage: full demo / --quick
SCHEDULE = dict(mocov3=(200, 3), tokenizer=(200, 4), pretrain=(200, 4), upernet=(100, 3),
                mask_rcnn=(4, 1))
QUICK_BATCH = 8  # --quick: images per step in stages 1-3
# the paper's numbers for ViT-B (Tables 1-4), quoted in the report
PAPER = dict(in1k=84.5, ade=48.5, box=47.8, mask=42.6, probe_percep=29.7, probe_pixel=10.2)
T0 = time.time()


def stage(msg: str) -> None:
    print(f'\n==> [{time.time() - T0:6.0f} s] {msg}', flush=True)


# ---- running configs the way tools/train.py does ----------------------------------------------
def run_config(config: str, work_dir: Path, options: dict, test: bool = False):
    """Train `config` (+ test with its test_evaluator): returns (runner, test metrics)."""
    from mmengine.config import Config
    from mmengine.runner import Runner

    from peco_mm.engine.launch import (apply_cli, check_dataset_paths, check_pretrained_paths,
                                       setup_cpu_distributed)
    cfg = Config.fromfile(str(CFG / config))
    cfg.merge_from_dict(options)
    cfg = apply_cli(cfg, str(work_dir), config, None, False, 'none')
    if cfg.get('visualizer'):  # the hosts' runtimes name it 'visualizer': one per run here
        cfg.visualizer.name = f'{work_dir.name}_{time.time():.0f}'
    check_pretrained_paths(cfg)
    check_dataset_paths(cfg, phases=('train', 'val') if cfg.get('val_cfg') else ('train',))
    setup_cpu_distributed(cfg)
    runner = Runner.from_cfg(cfg)
    runner.train()
    metrics = runner.test() if test else None
    return runner, metrics


def scalars(work_dir: Path) -> list[dict]:
    """Records mmengine wrote to <work_dir>/<timestamp>/vis_data/scalars.json (newest run)."""
    files = sorted(work_dir.glob('*/vis_data/scalars.json'))
    if not files:
        raise FileNotFoundError(f'no vis_data/scalars.json under {work_dir}')
    return [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]


def series(recs: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r['iter'] if 'iter' in r else r.get('step', i), r[key])
           for i, r in enumerate(recs) if key in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def last_val(recs: list[dict]) -> dict:
    vals = [r for r in recs if 'loss' not in r and 'lr' not in r]
    return vals[-1] if vals else {}


def iters(name: str, quick: bool) -> int:
    return SCHEDULE[name][1 if quick else 0]


# ---- stages ----------------------------------------------------------------------------------
def stage_data(wd: Path, quick: bool) -> dict:
    from peco_mm.utils import make_demo_data
    return make_demo_data(wd / 'data', quick=quick)


def stage_mocov3(wd: Path, data: dict, quick: bool) -> dict:
    from mmengine.config import ConfigDict
    n = iters('mocov3', quick)
    out = wd / 'mocov3'
    opts = {'train_dataloader.dataset.data_root': str(data['imagenet']),
            'train_cfg.max_iters': n, 'default_hooks.checkpoint.interval': n,
            'param_scheduler': [
                ConfigDict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0,
                           end=max(1, n // 10)),
                ConfigDict(type='CosineAnnealingLR', by_epoch=False, begin=max(1, n // 10),
                           end=n)]}
    if quick:
        opts.update({'default_hooks.logger.interval': 1,
                     'train_dataloader.batch_size': QUICK_BATCH})
    run_config('mocov3_vit_tiny_photos.py', out, opts)
    # the converter, as a user runs it
    import convert_checkpoint
    pecovit = out / 'mocov3_vit_tiny_pecovit.pth'
    with contextlib.redirect_stdout(io.StringIO()) as log:
        convert_checkpoint.main([str(out / f'iter_{n}.pth'), str(pecovit), '--num-heads', '4'])
    print(log.getvalue().strip().splitlines()[-2])
    recs = scalars(out)
    return dict(ckpt=str(pecovit), loss=series(recs, 'loss'),
                knn=knn_probe(str(pecovit), data['imagenet'] / 'val'))


def knn_probe(pecovit_ckpt: str, folder: Path) -> dict:
    """Leave-one-out 1-NN accuracy (cosine, mean-pooled last-block features) over the held-out
    photos' crops, labelled by photo: the MoCo v3 ViT against the same ViT randomly
    initialised (a randomly initialised network is not a perceptual network)."""
    import numpy as np
    import torch
    from PIL import Image

    from peco_mm.models.convert import load_pretrained_vit
    from peco_mm.models.vit import PeCoViT
    files = sorted(folder.glob('*/*.png'))
    classes = sorted({f.parent.name for f in files})
    y = torch.tensor([classes.index(f.parent.name) for f in files])
    x = torch.from_numpy(np.stack([np.asarray(Image.open(f).convert('RGB')) for f in files]))
    x = (x.permute(0, 3, 1, 2).float() / 255 - torch.tensor([0.485, 0.456, 0.406])[:, None, None]
         ) / torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    res = {}
    trained = load_pretrained_vit(pecovit_ckpt, num_heads=4, out_type='avg_featmap')
    torch.manual_seed(0)
    kw = dict(arch=dict(embed_dims=64, num_layers=4, num_heads=4), img_size=64, patch_size=8,
              out_type='avg_featmap')
    rand = PeCoViT(**kw)
    rand.init_weights()
    for name, net in (('MoCo v3 (stage 1)', trained), ('random init', rand)):
        with torch.no_grad():
            f = torch.nn.functional.normalize(net.eval()(x)[-1], dim=1)  # (N, C)
        sim = f @ f.T
        sim.fill_diagonal_(-2)
        res[name] = float((y[sim.argmax(1)] == y).float().mean() * 100)
    res['chance'] = 100.0 / len(classes)
    res['n'] = len(files)
    return res


def stage_tokenizers(wd: Path, data: dict, moco: dict, quick: bool) -> dict:
    n = iters('tokenizer', quick)
    root = str(data['imagenet'])
    out = {}
    for key, config in (('perceptual', 'tokenizer_tiny_photos.py'),
                        ('pixel', 'tokenizer_tiny_photos_lambda0.py')):
        opts = {'train_dataloader.dataset.data_root': root,
                'test_dataloader.dataset.data_root': root,
                'model.perceptual_cfg.checkpoint': moco['ckpt'],
                'test_evaluator.perceptual.checkpoint': moco['ckpt'],
                'train_cfg.max_iters': n, 'default_hooks.checkpoint.interval': n,
                'param_scheduler.0.end': max(1, n // 10),
                'custom_hooks.1.interval': n}
        if quick:
            opts.update({'default_hooks.logger.interval': 2, 'custom_hooks.0.interval': 2,
                         'train_dataloader.batch_size': QUICK_BATCH,
                         'test_evaluator.probe_epochs': 50})
        stage(f'2. tokenizer, {key} ({"lambda = 1" if key == "perceptual" else "lambda = 0"}, '
              f'{n} iterations)')
        work = wd / f'tokenizer_{key}'
        runner, metrics = run_config(config, work, opts, test=True)
        recs = scalars(work)
        out[key] = dict(ckpt=str(work / f'iter_{n}.pth'), metrics=metrics,
                        loss_pixel=series(recs, 'loss_pixel'),
                        usage=series(recs, 'codebook_usage'),
                        perplexity=series(recs, 'codebook_perplexity'),
                        model=runner.model.eval())
    return out


def stage_pretrain(wd: Path, data: dict, toks: dict, quick: bool) -> dict:
    n = iters('pretrain', quick)
    work = wd / 'pretrain'
    opts = {'train_dataloader.dataset.data_root': str(data['imagenet']),
            'model.target_generator.checkpoint': toks['perceptual']['ckpt'],
            'train_cfg.max_iters': n, 'default_hooks.checkpoint.interval': n,
            'param_scheduler.0.end': max(1, n // 10), 'param_scheduler.1.begin': max(1, n // 10),
            'param_scheduler.1.end': n}
    if quick:
        opts.update({'default_hooks.logger.interval': 2,
                     'train_dataloader.batch_size': QUICK_BATCH})
    runner, _ = run_config('pretrain_tiny_photos.py', work, opts)
    recs = scalars(work)
    ckpt = work / f'iter_{n}.pth'
    # the masked-token predictions decoded by the tokenizer's decoder (tools/visualize_mim.py)
    import visualize_mim
    vis = wd / 'report_files' / 'mim'
    imgs = sorted((data['imagenet'] / 'val').glob('*/0000.png'))[:3]
    with contextlib.redirect_stdout(io.StringIO()):
        visualize_mim.main([str(CFG / 'pretrain_tiny_photos.py'), str(ckpt), *map(str, imgs),
                            '--out', str(vis), '--device', 'cpu',
                            '--tokenizer', toks['perceptual']['ckpt']])
    acc = series(recs, 'mim_acc')[1]
    return dict(ckpt=str(ckpt), loss=series(recs, 'loss'), mim_acc=series(recs, 'mim_acc'),
                final_acc=sum(acc[-10:]) / len(acc[-10:]),
                majority=majority_code_rate(toks['perceptual']['model'], data['imagenet']),
                grid=vis / 'grid.png')


def majority_code_rate(tok, root: Path) -> float:
    """Accuracy of always predicting the most frequent code on the training crops: the
    baseline masked-token accuracy has to beat."""
    import numpy as np
    import torch
    from PIL import Image
    files = sorted((root / 'train').glob('*/*.png'))[::2]
    x = torch.from_numpy(np.stack([np.asarray(Image.open(f).convert('RGB')) for f in files]))
    x = x.permute(0, 3, 1, 2).float() / 127.5 - 1
    with torch.no_grad():
        codes = tok.encode(x)
    return float(torch.bincount(codes.flatten()).max() / codes.numel())


def stage_dense(wd: Path, data: dict, pre: dict, quick: bool) -> dict:
    ade, coco = str(data['ade']), str(data['coco']) + '/'
    res = {}
    n_seg, n_det = iters('upernet', quick), iters('mask_rcnn', quick)
    for init in ('PeCo', 'scratch'):
        ckpt = {'model.backbone.init_cfg.checkpoint': pre['ckpt']} if init == 'PeCo' else {
            'model.backbone.init_cfg': None}
        stage(f'4. UperNet (ADE20K layout), {init}, {n_seg} iterations')
        work = wd / f'upernet_{init.lower()}'
        opts = {f'{s}_dataloader.dataset.data_root': ade for s in ('train', 'val', 'test')}
        opts.update(ckpt, **{'train_cfg.max_iters': n_seg, 'train_cfg.val_interval': n_seg,
                             'default_hooks.checkpoint.interval': n_seg})
        run_config('upernet_tiny_shapes.py', work, opts)
        recs = scalars(work)
        res[f'upernet_{init}'] = dict(val=last_val(recs), loss=series(recs, 'loss'))

        stage(f'4. Mask R-CNN (COCO layout), {init}, {n_det} epochs')
        work = wd / f'mask_rcnn_{init.lower()}'
        ann = coco + 'annotations/instances_val2017.json'
        opts = {f'{s}_dataloader.dataset.data_root': coco for s in ('train', 'val', 'test')}
        opts.update(ckpt, **{'train_cfg.max_epochs': n_det, 'train_cfg.val_interval': n_det,
                             'default_hooks.checkpoint.interval': n_det,
                             'val_evaluator.ann_file': ann, 'test_evaluator.ann_file': ann})
        run_config('mask_rcnn_tiny_shapes.py', work, opts)
        recs = scalars(work)
        res[f'mask_rcnn_{init}'] = dict(val=last_val(recs), loss=series(recs, 'loss'))
    return res


# ---- report ----------------------------------------------------------------------------------
def plot_lines(path: Path, title: str, curves: dict, ylabel: str) -> Path:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    for label, (x, y) in curves.items():
        if y:
            ax.plot(x, y, label=label, marker='.' if len(y) < 20 else None)
    ax.set_title(title)
    ax.set_xlabel('iteration')
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def reconstruction_grid(path: Path, toks: dict, folder: Path, n: int = 6) -> Path:
    """Rows: held-out originals | pixel-only reconstructions | perceptual reconstructions."""
    import numpy as np
    import torch
    from PIL import Image
    files = sorted(folder.glob('*/*.png'))
    files = files[::max(1, len(files) // n)][:n]
    x = torch.from_numpy(np.stack([np.asarray(Image.open(f).convert('RGB')) for f in files]))
    x = x.permute(0, 3, 1, 2).float() / 127.5 - 1
    rows = [x]
    with torch.no_grad():
        for key in ('pixel', 'perceptual'):
            tok = toks[key]['model']
            rows.append(tok.decode(tok.encode(x)).clamp(-1, 1))
    s, pad = x.shape[-1], 2
    grid = np.full((3 * (s + pad) + pad, n * (s + pad) + pad, 3), 255, np.uint8)
    for r, row in enumerate(rows):
        for c, img in enumerate(row):
            a = ((img + 1) * 127.5).round().clamp(0, 255).byte().permute(1, 2, 0).numpy()
            y0, x0 = pad + r * (s + pad), pad + c * (s + pad)
            grid[y0:y0 + s, x0:x0 + s] = a
    big = Image.fromarray(grid).resize((grid.shape[1] * 2, grid.shape[0] * 2), Image.NEAREST)
    path.parent.mkdir(parents=True, exist_ok=True)
    big.save(path)
    return path


def fmt(v, digits=2, scale=1.0) -> str:
    return '—' if v is None else f'{v * scale:.{digits}f}'


def write_report(wd: Path, quick: bool, r: dict, seconds: dict) -> Path:
    files = wd / 'report_files'
    toks, pre, dense, moco = r['tokenizers'], r['pretrain'], r['dense'], r['mocov3']
    img = dict(
        recon=reconstruction_grid(files / 'reconstructions.png', toks,
                                  r['data']['imagenet'] / 'val'),
        usage=plot_lines(files / 'codebook_usage.png', 'codebook usage (training windows)',
                         {k: toks[k]['usage'] for k in ('perceptual', 'pixel')},
                         'fraction of K used'),
        loss=plot_lines(files / 'loss_curves.png', 'training losses', {
            'MoCo v3': moco['loss'],
            'tokenizer pixel loss, lambda=1': toks['perceptual']['loss_pixel'],
            'tokenizer pixel loss, lambda=0': toks['pixel']['loss_pixel'],
            'PeCo MIM cross-entropy': pre['loss']}, 'loss'),
        dense=plot_lines(files / 'dense_loss_curves.png', 'dense fine-tuning losses',
                         {k: v['loss'] for k, v in dense.items()}, 'loss'),
        mim=pre['grid'])
    tm = {k: toks[k]['metrics'] for k in ('perceptual', 'pixel')}
    knn = moco['knn']

    def tok_row(k, name):
        m = tm[k]
        return (f"| {name} | {fmt(m.get('tokenizer/psnr'))} | {fmt(m.get('tokenizer/ssim'), 3)} |"
                f" {fmt(m.get('tokenizer/perceptual'), 4)} |"
                f" {fmt(m.get('tokenizer/usage'), 1, 100)} % |"
                f" {fmt(m.get('tokenizer/perplexity'), 1)} |"
                f" {fmt(m.get('tokenizer/codeword_probe_acc'), 1)} |")

    def dense_row(init):
        s, d = dense[f'upernet_{init}']['val'], dense[f'mask_rcnn_{init}']['val']
        return (f"| {init} | {fmt(s.get('mIoU'), 1)} | {fmt(s.get('aAcc'), 1)} | "
                f"{fmt(d.get('coco/bbox_mAP'), 1, 100)} |"
                f" {fmt(d.get('coco/bbox_mAP_50'), 1, 100)} |"
                f" {fmt(d.get('coco/segm_mAP'), 1, 100)} |")

    rel = lambda p: osp.relpath(p, wd)  # noqa: E731
    n = {k: iters(k, quick) for k in SCHEDULE}
    total = sum(seconds.values())
    text = f"""# peco_mm demo report{' (--quick)' if quick else ''}

**This is a toy-scale run.** Every stage uses the shipped recipe (configs/demo/*.py, each a
child of a configs/peco/*.py config) with a width-64, 4-block ViT on 64 px crops of a dozen
photos that ship with scikit-image, trained for minutes on a CPU. It shows that the pipeline
works end to end and that each stage learns something; its numbers **cannot be compared**
with the paper's (ViT-B, ImageNet-1K, hundreds of GPU-days). Where the paper's figures are
quoted below, they are for orientation only.

Total time {total / 60:.1f} min ({', '.join(f'{k} {v:.0f} s' for k, v in seconds.items())}).

## Data

- photo crops in the ImageNet folder layout: `{rel(r['data']['imagenet'])}` (train: crops of
  the training photos; val: crops of held-out photos never seen in training)
- shapes composited on photo crops: ADEChallengeData2016 layout `{rel(r['data']['ade'])}`,
  COCO layout `{rel(r['data']['coco'])}`

## 1. Perceptual network: MoCo v3 ViT (configs/demo/mocov3_vit_tiny_photos.py)

{n['mocov3']} iterations of mmpretrain's MoCo v3, converted with tools/convert_checkpoint.py.
Leave-one-out 1-NN accuracy on {knn['n']} held-out crops labelled by source photo:

| features | 1-NN accuracy |
|---|---|
| MoCo v3 (stage 1) | {knn['MoCo v3 (stage 1)']:.1f} % |
| same ViT, random init | {knn['random init']:.1f} % |
| chance | {knn['chance']:.1f} % |

## 2. Tokenizer with and without the perceptual loss (configs/demo/tokenizer_tiny_photos*.py)

{n['tokenizer']} iterations each; tools/test.py's TokenizerMetric on the held-out photos.
The codeword probe is cross-validated over the held-out crops (3 photos: chance 33 %), a proxy
of the paper's Table 4 ImageNet codeword probe ({PAPER['probe_percep']} % with vs
{PAPER['probe_pixel']} % without the perceptual loss).

| tokenizer | PSNR (dB) | SSIM | perceptual dist. | usage | perplexity | codeword probe (%) |
|---|---|---|---|---|---|---|
{tok_row('pixel', 'pixel only (lambda = 0)')}
{tok_row('perceptual', 'PeCo (lambda = 1)')}

Originals (top), pixel-only reconstructions (middle), perceptual reconstructions (bottom),
held-out photos:

![reconstructions]({rel(img['recon'])})

Codebook usage over training (CodebookHealthHook):

![codebook usage]({rel(img['usage'])})

## 3. PeCo masked image modeling (configs/demo/pretrain_tiny_photos.py)

{n['pretrain']} iterations. Masked-token accuracy (mean of the last 10 logged windows):
**{pre['final_acc'] * 100:.1f} %**, against {pre['majority'] * 100:.1f} % for always predicting
the most frequent code and {100 / 128:.1f} % chance (K = 128).

Masked-token predictions decoded (tools/visualize_mim.py): original | masked input |
the tokenizer's decoding of the predicted codes (visible patches keep their own codes):

![masked-token predictions]({rel(img['mim'])})

## Loss curves

![loss curves]({rel(img['loss'])})

## 4. Dense fine-tuning from PeCo weights and from scratch

UperNet ({n['upernet']} iterations, configs/demo/upernet_tiny_shapes.py) and Mask R-CNN
({n['mask_rcnn']} epochs, configs/demo/mask_rcnn_tiny_shapes.py), scored by mmseg's IoUMetric
and mmdet's CocoMetric on the validation split. Paper (ViT-B, 800 epochs): ADE20K
{PAPER['ade']} mIoU, COCO {PAPER['box']} AP box / {PAPER['mask']} AP mask.

| backbone init | mIoU | aAcc | AP box | AP50 box | AP mask |
|---|---|---|---|---|---|
{dense_row('PeCo')}
{dense_row('scratch')}

![dense losses]({rel(img['dense'])})

## Where these numbers stand

- The paper's headline numbers come from ViT-B trained 800 epochs on 1.28 M images
  (ImageNet-1K {PAPER['in1k']} top-1, ADE20K {PAPER['ade']} mIoU, COCO {PAPER['box']} /
  {PAPER['mask']} AP). This run has ~0.2 M parameters per ViT and a few hundred crops: its
  numbers test the machinery, not the method. docs/reproduce.md lists the configs and the
  compute for the paper's tables.
- At this scale, PeCo-vs-scratch and perceptual-vs-pixel differences can go either way from
  seed to seed; they are not evidence for or against the paper's claims.

Work directories (logs, checkpoints, configs): `{wd}`
"""
    report = wd / 'report.md'
    report.write_text(text)
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--work-dir', default='work_dirs/demo')
    p.add_argument('--quick', action='store_true',
                   help='a few iterations per stage (about 2 minutes), for tests')
    args = p.parse_args(argv)
    os.environ.setdefault('PYTHONWARNINGS', 'ignore')
    sys.path.insert(0, str(ROOT / 'tools'))
    import warnings
    warnings.filterwarnings('ignore')
    import peco_mm  # noqa: F401

    wd = Path(args.work_dir).resolve()
    wd.mkdir(parents=True, exist_ok=True)
    r, seconds = {}, {}

    def timed(name, fn, *a):
        t = time.time()
        out = fn(*a)
        seconds[name] = time.time() - t
        return out

    stage('0. demo data: scikit-image photos -> ImageNet / ADE20K / COCO layouts')
    r['data'] = timed('data', stage_data, wd, args.quick)
    stage(f"1. MoCo v3 ViT on the photo crops ({iters('mocov3', args.quick)} iterations)")
    r['mocov3'] = timed('mocov3', stage_mocov3, wd, r['data'], args.quick)
    r['tokenizers'] = timed('tokenizers', stage_tokenizers, wd, r['data'], r['mocov3'],
                            args.quick)
    stage(f"3. PeCo pretraining ({iters('pretrain', args.quick)} iterations)")
    r['pretrain'] = timed('pretrain', stage_pretrain, wd, r['data'], r['tokenizers'],
                          args.quick)
    r['dense'] = timed('dense', stage_dense, wd, r['data'], r['pretrain'], args.quick)
    stage('5. evaluation (tokenizers by tools/test.py, dense models by their val loops)')
    tm = r['tokenizers']
    print(f"MoCo v3 1-NN {r['mocov3']['knn']['MoCo v3 (stage 1)']:.1f} % "
          f"(random {r['mocov3']['knn']['random init']:.1f} %); tokenizer PSNR "
          f"{tm['pixel']['metrics'].get('tokenizer/psnr', 0):.2f} (pixel) / "
          f"{tm['perceptual']['metrics'].get('tokenizer/psnr', 0):.2f} (perceptual) dB; "
          f"MIM acc {r['pretrain']['final_acc'] * 100:.1f} %")
    for k, v in r['dense'].items():
        print(f"{k}: " + ', '.join(f'{m} {x:.3f}' for m, x in v['val'].items()
                                   if isinstance(x, float) and m not in ('data_time', 'time')))
    stage('6. report')
    report = write_report(wd, args.quick, r, seconds)
    print(f'total {time.time() - T0:.0f} s')
    print(f'report: {report}')
    return report


if __name__ == '__main__':
    main()
