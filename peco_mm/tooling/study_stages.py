"""The stages of one replicate of the study (tools/study.py), each reading only what the stages
before it wrote in the same replicate's folder:

  world       make_world with seed r: classes split into A and B, every split of B with a
              tuning half and a test half, geometry-matched pairs under held-out nuisances
  networks    the perceptual loss's network (supervised on A, or MoCo v3 without labels),
              converted to PeCoViT and checked by 1-NN shape accuracy on B; the same ViT at
              random initialisation (the control's network); the judge, a ResNet trained on
              its own labelled split of B
  tokenizers  one per lambda and lambda = 1 against the random network, each tested on B's
              test half (PSNR, SSIM, codeword probe, judge on reconstructions) and by code
              agreement of the geometry-matched pairs
  pretrain    MIM on each tokenizer's codes the downstream rows need
  downstream  few-label classification and segmentation from each pretraining, from scratch
              with its own recipe and compute-matched from scratch, scored on the test half
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from peco_mm.tooling.study_runs import TARGETS, TUNING_SEED, Study, tok_key


def stage_world(study: Study, r: int, **sizes) -> dict:
    """Replicate r's world (seed r; `sizes` in place of the profile's), written unless the
    same settings wrote it before."""
    from peco_mm.tooling.shape_world import make_world, read_classes
    root = study.wd / study.rep(r, 'world')
    done = root / 'done.json'
    p = study.p
    keys = ('n_pretrain', 'per_class', 'val_per_class', 'judge_per_class', 'n_pairs',
            'held_out', 'rotate')
    args = dict(seed=r, **{k: p[k] for k in keys})
    if 'pairs' in (study.perceptual, *study.knn_networks):  # positive pairs: one per image
        args['n_train_pairs'] = p['n_pretrain']
    args.update(sizes)
    if done.is_file() and json.loads(done.read_text()) == args:
        print(f'{study.rep(r)} world: written earlier, kept', flush=True)
    else:
        t = time.time()
        make_world(root, **args)
        done.write_text(json.dumps(args))
        print(f'{study.rep(r)} world: {args["n_pretrain"]} unlabeled images in '
              f'{time.time() - t:.0f} s', flush=True)
    classes = read_classes(root)
    if len(classes['A']) != 5 or len(classes['B']) != 5:
        raise ValueError(f'{root}/classes.json: the study configs expect 5 classes in A and '
                         f'5 in B, got {len(classes["A"])} and {len(classes["B"])}')
    return dict(args, classes=classes)


def stage_networks(study: Study, r: int) -> dict:
    """The perceptual network (converted to PeCoViT, with its 1-NN shape accuracy on B's test
    half against the same ViT randomly initialised), its randomly initialised twin written
    as a PeCoViT file, the judge with its top-1 on B's test half, and the profile's other
    (self-supervised) networks, trained and checked alike for the 1-NN comparison only."""
    from peco_mm.tooling.logs import last_metrics, read_scalars
    from peco_mm.tooling.tool_runs import call_tool

    def convert_and_check(res):
        target = str(Path(res['config']).parent / 'vit_tiny_pecovit.pth')
        rc, log = call_tool('convert_checkpoint', [res['ckpt'], target, '--num-heads', 4])
        if rc != 0:
            raise RuntimeError(f'tools/convert_checkpoint.py {res["ckpt"]} failed:\n{log}')
        own = last_metrics(read_scalars(Path(res['ckpt']).parent))  # A's val (supervised)
        return dict(shape_knn(study, r, target), pecovit=target, **own)
    out = dict(perceptual=study.run(study.rep(r, 'perceptual'), evaluate=convert_and_check),
               judge=study.run(study.rep(r, 'judge'), evaluate=study.test))
    out['knn'] = {n: study.run(study.rep(r, f'perceptual_{n}'), evaluate=convert_and_check)
                  for n in study.knn_networks}  # for their 1-NN beside the loss network's
    random = study.wd / study.rep(r, 'perceptual_random') / 'vit_tiny_pecovit.pth'
    if not random.is_file():
        from peco_mm.tooling.demo_checks import save_random_twin
        save_random_twin(out['perceptual']['metrics']['pecovit'], str(random), seed=r)
    out['random'] = dict(metrics=dict(pecovit=str(random)))
    return out


def shape_knn(study: Study, r: int, pecovit: str) -> dict:
    """Leave-one-out 1-NN shape accuracy (%) on B's test half of a PeCoViT's mean-pooled
    features, and of the same ViT randomly initialised (3 inits)."""
    import torch

    from peco_mm.tooling.demo_checks import knn_accuracy, trained_and_random
    from peco_mm.utils.image import IMAGENET_MEAN, IMAGENET_STD
    from peco_mm.tooling.images import find_images, load_images
    half = 'val' if r == TUNING_SEED else 'test'  # the tuning world: its tuning half
    files = find_images(study.wd / study.rep(r, 'world') / 'cls' / half)
    names = sorted({Path(f).parent.name for f in files})
    labels = torch.tensor([names.index(Path(f).parent.name) for f in files])
    x = load_images(files, mean=IMAGENET_MEAN, std=IMAGENET_STD)  # (N, 3, 32, 32)
    trained, randoms = trained_and_random(pecovit, num_heads=4)
    with torch.no_grad():
        return dict(trained=knn_accuracy(trained(x)[-1], labels),
                    random=[knn_accuracy(net(x)[-1], labels) for net in randoms])


def pair_agreement(study: Study, r: int, res: dict) -> dict:
    """Code agreement (%) of a tokenizer on replicate r's geometry-matched pairs (same
    shape and pose, held-out nuisances redrawn), its floor over every re-pairing of the same
    images (`repairing_agreement`: what the tokenizer's code usage alone gives), and the
    matched pairs' agreement above that floor (the part a shared geometry explains)."""
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.tooling.code_agreement import paired_codes, repairing_agreement
    from peco_mm.tooling.images import find_images, load_images
    pairs = study.wd / study.rep(r, 'world') / 'pairs'
    a, b = (load_images(find_images(pairs / side)) for side in 'ab')
    ca, cb = paired_codes(FrozenPeCoTokenizer(res['ckpt']), a, b)
    matched = 100 * float((ca == cb).float().mean())
    floor = 100 * repairing_agreement(ca, cb)
    return dict(matched=matched, repaired=floor, above_floor=matched - floor)


def stage_tokenizers(study: Study, r: int, nets: dict) -> dict:
    """Each tokenizer of the replicate, keyed as `Study.tokenizers`."""
    judge = nets['judge']
    base = {'test_evaluator.classifier.checkpoint': judge['ckpt'],
            'test_evaluator.classifier.config': judge['config']}

    def evaluate(res):
        return dict(study.test(res), **{f'agreement/{k}': v for k, v in
                                        pair_agreement(study, r, res).items()})
    out = {}
    for key in study.tokenizers:
        net = nets['random' if key == 'random' else 'perceptual']['metrics']['pecovit']
        out[key] = study.run(study.rep(r, f'tokenizer_{key}'),
                             options=dict(base, **{'model.perceptual.checkpoint': net}),
                             evaluate=evaluate)
    return out


def stage_pretrain(study: Study, r: int, toks: dict) -> dict:
    """MIM on the codes of each downstream row's tokenizer (mean MIM accuracy of the last
    three logged iterations)."""
    import statistics

    from peco_mm.tooling.logs import read_scalars, series

    def mim_acc(res):
        acc = series(read_scalars(Path(res['ckpt']).parent), 'mim_acc')[1]
        return dict(mim_acc=100 * statistics.mean(acc[-3:]))
    out = {}
    for target in study.targets:
        opts = {'model.target_generator.checkpoint': toks[TARGETS[target]]['ckpt']}
        if target == 'peco_bf16':  # the same run with the frozen encoder in bf16
            opts['model.target_generator.encode_bf16'] = True
        out[target] = study.run(study.rep(r, f'pretrain_{target}'), options=opts,
                                evaluate=mim_acc)
    return out


def stage_downstream(study: Study, r: int, pre: dict) -> dict:
    """Few-label classification and segmentation of every downstream row, scored on the
    test half ((task, init) -> result); the scratch rows at the lr chosen on the tuning world
    (`study.scratch_lr`, where the profile has a grid), or every row at its own
    (`study.row_lr`)."""
    out = {}
    for task in ('cls', 'seg'):
        for init in study.inits:
            opts = {'model.backbone.init_cfg.checkpoint': pre[init]['ckpt']} \
                if init in TARGETS else {}
            lr = (study.row_lr.get(task, {}).get(init) or
                  (study.scratch_lr.get(task) if init not in TARGETS else None))
            if lr:  # chosen on the tuning world
                opts['optim_wrapper.optimizer.lr'] = lr['chosen']
            opts = opts or None
            out[(task, init)] = study.run(study.rep(r, f'{task}_{init}'), options=opts,
                                          evaluate=study.test)
    return out


def chance_levels(study: Study, r: int) -> dict:
    """What a model that learned nothing scores on replicate r's test half, keyed like
    DOWN_COLUMNS: top-1 of one class, the mIoU of predicting background everywhere, and MIM
    accuracy of a uniform guess among the codebook's K codes."""
    import numpy as np
    from PIL import Image

    from peco_mm.tooling.shape_world import read_classes
    world = study.wd / study.rep(r, 'world')
    n = len(read_classes(world)['B'])
    ann = world / 'ade' / 'ADEChallengeData2016' / 'annotations' / 'test'
    labels = np.stack([np.asarray(Image.open(f)) for f in sorted(ann.glob('*.png'))])
    k = study.config('tokenizer_world.py', r, 1).model.quantizer.num_embeddings
    return {'accuracy/top1': 100 / n, 'mim_acc': 100 / k,
            'mIoU': 100 * float((labels == 1).mean()) / (n + 1)}


def run_replicate(study: Study, r: int) -> dict:
    """Every stage of replicate r, in order."""
    res = dict(world=stage_world(study, r), nets=stage_networks(study, r))
    res['tokenizers'] = stage_tokenizers(study, r, res['nets'])
    res['pretrain'] = stage_pretrain(study, r, res['tokenizers'])
    res['downstream'] = stage_downstream(study, r, res['pretrain'])
    res['chance'] = chance_levels(study, r)  # kept with the replicate's record
    return res


__all__ = ['stage_world', 'stage_networks', 'stage_tokenizers', 'stage_pretrain',
           'stage_downstream', 'run_replicate', 'shape_knn', 'pair_agreement', 'tok_key',
           'chance_levels']
