#!/usr/bin/env python3
"""Adversarial robustness of a fine-tuned classifier (PeCo appendix, Table 11): top-1 on the
test set, clean and under BIM and MI-FGSM with an L-inf budget of eps = 2/255, 20 iterations.

The attacks work on the pixels as loaded (0..255, RGB after the data preprocessor's channel
swap), so eps = 2 means 2/255 of the image range whatever the normalisation; every step is
clipped to the eps-ball around the clean image and to [0, 255].
- BIM (Kurakin et al. 2017): x <- clip(x + alpha * sign(grad)), alpha = eps / iters by default
  (the budget is reachable in `iters` steps).
- MI-FGSM (Dong et al. 2018): g <- mu * g + grad / ||grad||_1, x <- clip(x + alpha * sign(g)),
  mu = 1.0.
The model runs in eval mode (no dropout / drop path); gradients go to the input only.
Under torchrun each process attacks its own share of the test set (no image twice) and the
counts are summed; a progress bar shows the batches and the running accuracies.
"""
from __future__ import annotations

import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

ATTACKS = ('bim', 'mifgsm')
EPILOG = """examples:
  tools/adversarial_eval.py configs/peco/finetune_vitb_in1k.py finetuned.pth --out adv.json
  torchrun --nproc_per_node 8 tools/adversarial_eval.py configs/peco/finetune_vitb_in1k.py \
      finetuned.pth --out adv.json                     # one share of the test set per GPU
  tools/adversarial_eval.py CONFIG CKPT --eps 4 --iters 10 --max-batches 20   # a quick look
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config', help='an mmpretrain classification config (e.g. '
                   'configs/peco/finetune_vitb_in1k.py)')
    p.add_argument('checkpoint')
    p.add_argument('--eps', type=float, default=2.0, help='L-inf budget in 0..255 units '
                   '(default 2, i.e. 2/255)')
    p.add_argument('--iters', type=int, default=20)
    p.add_argument('--alpha', type=float, default=None, help='step size (default eps/iters)')
    p.add_argument('--momentum', type=float, default=1.0, help='MI-FGSM decay mu')
    p.add_argument('--max-batches', type=int, default=None,
                   help='stop after N test batches (per process)')
    p.add_argument('--out', help='write the results as JSON here')
    p.add_argument('--device', help='cpu or cuda (default: cuda when available; under '
                   'torchrun cuda:LOCAL_RANK)')
    args = p.parse_args(argv)
    if args.eps < 0 or args.iters < 1:
        p.error(f'--eps must be >= 0 and --iters >= 1 (got {args.eps}, {args.iters})')
    return args


# ---- attacks ---------------------------------------------------------------------------------
def attack(logits_fn, x, y, method: str, eps: float, iters: int, alpha: float | None = None,
           momentum: float = 1.0):
    """L-inf attack on pixels x (B, 3, H, W) in [0, 255] with labels y (B,); returns x_adv,
    |x_adv - x| <= eps."""
    import torch
    import torch.nn.functional as F
    if method not in ATTACKS:
        raise ValueError(f'attack {method!r}; allowed: {ATTACKS}')
    alpha = eps / iters if alpha is None else alpha
    x = x.detach()
    x_adv = x.clone()
    g = torch.zeros_like(x)
    for _ in range(iters):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(logits_fn(x_adv), y)
        (grad, ) = torch.autograd.grad(loss, x_adv)
        if method == 'mifgsm':
            l1 = grad.abs().flatten(1).sum(1).clamp_min(1e-12).view(-1, 1, 1, 1)
            g = momentum * g + grad / l1
            step = g.sign()
        else:
            step = grad.sign()
        x_adv = x_adv.detach() + alpha * step
        x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0, 255)
    return x_adv.detach()


# ---- model and data --------------------------------------------------------------------------
def build(config: str, checkpoint: str, device: str):
    """The classifier (eval mode, frozen) and a test loader over this process's share."""
    import peco_mm  # noqa: F401
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner, load_checkpoint

    from peco_mm.checkpoint import checkpoints_through_gate
    if not osp.isfile(config):
        raise SystemExit(f'adversarial_eval.py: config {config!r} not found')
    if not osp.isfile(checkpoint):
        raise SystemExit(f'adversarial_eval.py: checkpoint {checkpoint!r} not found')
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    from mmpretrain.registry import MODELS
    if cfg.get('data_preprocessor') is not None:  # as mmengine's Runner does
        cfg.model.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = MODELS.build(cfg.model)
    with checkpoints_through_gate():  # the file and its init_cfg read weights-only
        load_checkpoint(model, checkpoint, map_location='cpu', logger='silent')
    model.to(device).eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
    loader_cfg = cfg.test_dataloader.copy()
    # each process its own images, none twice (the default sampler pads to equal shares)
    loader_cfg.sampler = dict(type='DefaultSampler', shuffle=False, round_up=False)
    return model, Runner.build_dataloader(loader_cfg)


def pixels_and_labels(model, data: dict):
    """(x in 0..255 RGB float (B, 3, H, W), labels, normalise fn) for one test batch."""
    import torch
    pre = model.data_preprocessor
    batch = pre(data, False)
    inputs, samples = batch['inputs'], batch['data_samples']
    if getattr(pre, '_enable_normalize', False):
        mean, std = pre.mean.to(inputs), pre.std.to(inputs)  # (3, 1, 1) on 0..255
    else:  # no normalisation configured: the model sees 0..255
        mean, std = inputs.new_zeros(3, 1, 1), inputs.new_ones(3, 1, 1)
    x = inputs * std + mean
    y = torch.cat([s.gt_label for s in samples]).to(inputs.device)
    return x, y, lambda z: (z - mean) / std


def evaluate(model, loader, eps: float, iters: int, alpha: float | None, momentum: float,
             max_batches: int | None = None, progress: bool = True) -> dict:
    """Top-1 (%) clean and under each attack, summed over all processes."""
    import torch
    from mmengine.dist import all_reduce_dict
    from tqdm import tqdm

    correct = dict(clean=0, bim=0, mifgsm=0)
    total = 0
    n = len(loader) if max_batches is None else min(max_batches, len(loader))
    bar = tqdm(total=n, desc='adversarial eval', unit='batch', disable=not progress)
    for i, data in enumerate(loader):
        if i >= n:
            break
        x, y, norm = pixels_and_labels(model, data)

        def logits(z):
            return model(norm(z), mode='tensor')

        with torch.no_grad():
            correct['clean'] += int((logits(x).argmax(1) == y).sum())
        for m in ATTACKS:
            xa = attack(logits, x, y, m, eps, iters, alpha, momentum)
            with torch.no_grad():
                correct[m] += int((logits(xa).argmax(1) == y).sum())
        total += len(y)
        bar.update()
        bar.set_postfix({k: f'{100 * v / total:.1f}%' for k, v in correct.items()})
    bar.close()
    summed = {k: torch.tensor(v) for k, v in dict(total=total, **correct).items()}  # int64
    all_reduce_dict(summed, op='sum')  # over all processes (a no-op in one)
    total = int(summed.pop('total'))
    correct = {k: int(v) for k, v in summed.items()}
    if total == 0:
        raise SystemExit('adversarial_eval.py: the test set is empty')
    return dict(images=total, eps=eps, iters=iters,
                **{f'top1_{k}': 100.0 * v / total for k, v in correct.items()})


def main(argv=None) -> dict:
    args = parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    from peco_mm.tooling.tool_runs import save_json
    from peco_mm.supervisor.distributed import finish, init_from_env
    rank, world, device = init_from_env(args.device)
    model, loader = build(args.config, args.checkpoint, device)
    res = evaluate(model, loader, args.eps, args.iters, args.alpha, args.momentum,
                   args.max_batches, progress=rank == 0)
    res['processes'] = world
    finish()
    if rank != 0:
        return res
    print(f"{res['images']} images, eps {args.eps:g}/255, {args.iters} iterations: top-1 clean "
          f"{res['top1_clean']:.2f} %, BIM {res['top1_bim']:.2f} %, "
          f"MI-FGSM {res['top1_mifgsm']:.2f} %")
    save_json(args.out, res, indent=2)
    return res


if __name__ == '__main__':
    main()
