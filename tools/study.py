#!/usr/bin/env python3
"""The paper's comparisons on the shape world (peco_mm/tooling/shape_world.py), seeds and all,
in one command that resumes where it stopped; `make demo` runs its `demo` profile.

Every run trains a shipped config of configs/study/ through the launcher of tools/train.py
(the configs' work_dirs/study/ paths moved under --work-dir, the seed set, the profile's
schedule, and the checkpoint each run reads set to the one its producer wrote):

  0. world       tools/make_world.py's splits (unlabeled, judge, few-label, ADE20K layout)
  1. networks    MoCo v3 twice (seed 0: the perceptual loss's network; seed 1: the network
                 that only measures), converted to PeCoViT; a supervised judge on clean images.
                 --perceptual supervised (the demo profile's default): the loss's network is a
                 supervised ViT instead (the judge's recipe and data, seed 1; the paper's
                 supervised-VGG row), and the judge measures the perceptual distance
  2. tokenizers  the VQ-VAE at every lambda of the profile, per seed; tools/test.py's
                 TokenizerMetric: PSNR, SSIM, perceptual distance (measuring network),
                 codeword probe, the judge's accuracy on the reconstructions (Tables 4, 10)
  3. pretrain    masked image modeling on the lambda = 1 codes (PeCo) and on the lambda = 0
                 codes (pixel codebook), per seed (Table 2's comparison); --bf16-targets adds
                 PeCo with its frozen targets encoded in bf16
  4. downstream  few-label classification and UperNet segmentation from PeCo, from the pixel
                 codebook and from scratch, per seed (Tables 2-3)
  5. report      <work-dir>/report.md: tables (mean ± std, per-seed values) and conclusions
                 written from them (peco_mm/tooling/study_report.py)

Each finished run leaves <run>/result.json; a rerun skips it (delete the file to redo a run).
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import sys
import time
from pathlib import Path
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs' / 'study'
CONFIG_ROOT = 'work_dirs/study'  # where configs/study/* read and write; moved to --work-dir
# per profile: world sizes, seeds, lambdas, and iterations per stage
PROFILES = {
    # the world upright: rotation is a nuisance none of MoCo v3's augmentations removes, so
    # its views share an angle other images lack, a shortcut that keeps it from the shape
    'full': dict(seeds=3, lambdas=(0.0, 0.3, 1.0, 3.0), perceptual='mocov3', n_pretrain=20000,
                 val_per_class=30, judge_per_class=300, rotate=False,
                 iters=dict(mocov3=900, judge=600, tokenizer=400, pretrain=600, cls=240,
                            seg=200)),
    # `make demo`: the supervised perceptual network (MoCo v3 learns little shape at this scale)
    'demo': dict(seeds=3, lambdas=(0.0, 1.0), perceptual='supervised', n_pretrain=5000,
                 val_per_class=20, judge_per_class=300,
                 iters=dict(mocov3=150, judge=600, tokenizer=120, pretrain=130, cls=240,
                            seg=200)),
    'quick': dict(seeds=2, lambdas=(0.0, 1.0), perceptual='mocov3', n_pretrain=200,
                  val_per_class=4, judge_per_class=4,
                  iters=dict(mocov3=2, judge=2, tokenizer=2, pretrain=2, cls=2, seg=2)),
}
# relative seconds per iteration of each stage, for the ETA before any run has finished
COST = dict(mocov3=1.0, judge=0.35, tokenizer=1.0, pretrain=0.8, cls=0.2, seg=0.35)
INITS = ('peco', 'pixel', 'scratch')
PERCEPTUAL = ('mocov3', 'supervised')
EPILOG = """examples:
  tools/study.py                                  # the full study, work_dirs/study
  tools/study.py --profile demo --work-dir work_dirs/demo    # what `make demo` runs
  tools/study.py --profile quick --work-dir /tmp/q            # every stage for 2 steps (tests)
  tools/study.py --seeds 5                        # more seeds; finished runs are kept
  tools/study.py --rotation --iters mocov3=300    # the rotated world of the first runs
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--work-dir', default=CONFIG_ROOT, help=f'everything goes here ({CONFIG_ROOT})')
    p.add_argument('--profile', default='full', choices=sorted(PROFILES),
                   help='world size, seeds, lambdas and schedules (full)')
    p.add_argument('--seeds', type=int, default=None, help="seeds per row (the profile's)")
    p.add_argument('--n-pretrain', type=int, default=None,
                   help="unlabeled world images (the profile's: full 20000, demo 5000)")
    p.add_argument('--val-per-class', type=int, default=None,
                   help="validation images per class (the profile's: full 30, demo 20)")
    p.add_argument('--rotation', action=argparse.BooleanOptionalAction, default=None,
                   help="draw each shape at a random angle, or (--no-rotation) upright; the "
                   "profile's by default (full: upright, demo: rotated). MoCo v3 learns shape "
                   'here only upright: rotation is not among its augmentations')
    p.add_argument('--iters', default=None, metavar='STAGE=N[,STAGE=N]',
                   help="iterations of stages instead of the profile's, e.g. mocov3=900; "
                   f'stages: {", ".join(COST)}')
    p.add_argument('--title', default='study', help='the report title')
    p.add_argument('--perceptual', default=None, choices=PERCEPTUAL,
                   help="the perceptual loss's network: mocov3 (the paper's default, "
                   'self-supervised) or supervised (a ViT trained on the labelled judge split '
                   'with seed 1, as the paper\'s supervised-VGG row); the profile\'s by '
                   'default (full: mocov3, demo: supervised)')
    p.add_argument('--bf16-targets', action='store_true',
                   help='also pretrain PeCo with its frozen targets encoded in bf16 '
                   "(encode_bf16=True) and fine-tune from it: a row 'PeCo, bf16 targets' "
                   'against the fp32-target PeCo, per seed')
    p.add_argument('--only-seeds', default=None,
                   help='comma-separated seeds: train only their runs (and the shared ones '
                   'no other process is training), write no report; several processes with '
                   'different seeds share one work dir, then a plain call writes the report')
    args = p.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        p.error(f'--seeds must be >= 1, got {args.seeds}')
    try:
        args.iters = parse_iters(args.iters)
    except ValueError as e:
        p.error(f'--iters {e}')
    return args


def parse_iters(text: str | None) -> dict[str, int]:
    """'mocov3=900,tokenizer=400' -> {'mocov3': 900, 'tokenizer': 400}; stages of COST."""
    out = {}
    for item in filter(None, (text or '').split(',')):
        stage, _, n = item.partition('=')
        if stage not in COST or not n.isdigit() or int(n) < 1:
            raise ValueError(f'{item!r}: expected STAGE=N with N >= 1 and STAGE one of '
                             f'{", ".join(COST)}')
        out[stage] = int(n)
    return out


def set_schedule(cfg, iters: int) -> None:
    """An iteration-based config cut (or stretched) to `iters`: its iteration-based LR
    schedule scaled to fit, checkpoint and validation at the end, hooks at most every
    `iters`."""
    tc = cfg.train_cfg
    scale, tc.max_iters = iters / tc.max_iters, iters
    scheds = cfg.get('param_scheduler') or []
    for s in scheds if isinstance(scheds, list) else [scheds]:
        for key in ('begin', 'end'):
            if key in s and not s.get('by_epoch', True):
                s[key] = min(iters, max(int(key == 'end'), round(s[key] * scale)))
    if 'val_interval' in tc:
        tc.val_interval = iters
    cfg.default_hooks.checkpoint.interval = iters
    cfg.default_hooks.logger.interval = max(1, min(cfg.default_hooks.logger.interval,
                                                   iters // 5))
    for hook in cfg.get('custom_hooks') or []:
        if 'interval' in hook:
            hook.interval = max(1, min(hook.interval, iters // 5))


# ---- the plan ----------------------------------------------------------------------------------
class Study:
    """The runs of a profile, where they write, and the console's progress and ETA."""

    def __init__(self, work_dir: str, profile: str, seeds: int | None = None,
                 perceptual: str | None = None, bf16_targets: bool = False) -> None:
        perceptual = perceptual or PROFILES[profile]['perceptual']
        if perceptual not in PERCEPTUAL:
            raise ValueError(f'perceptual={perceptual!r}; allowed: {PERCEPTUAL}')
        self.perceptual = perceptual
        self.inits = INITS + (('peco_bf16', ) if bf16_targets else ())
        self.targets = tuple(i for i in self.inits if i != 'scratch')  # pretraining runs
        self.wd = Path(work_dir).resolve()
        self.profile = profile
        self.p = PROFILES[profile]
        self.seeds = list(range(seeds if seeds is not None else self.p['seeds']))
        self.lambdas = tuple(self.p['lambdas'])
        self.plan = self.make_plan()
        self.t0 = time.time()

    def change(self, iters: dict[str, int] | None = None, **settings) -> None:
        """The profile with `settings` (n_pretrain, val_per_class, rotate; None keeps the
        profile's) and the stages' `iters` replaced; the plan follows."""
        self.p = dict(self.p, **{k: v for k, v in settings.items() if v is not None},
                      iters={**self.p['iters'], **(iters or {})})
        self.plan = self.make_plan()

    def make_plan(self):
        """The RunPlan (console progress and ETA) of the runs: (run folder, description,
        cost units) in the order they run."""
        from peco_mm.engine.console import RunPlan
        it = self.p['iters']
        run_dir, desc, _, stage, _ = self.loss_network_run()
        plan = [(run_dir, desc, stage)]
        if self.measure_run() == 'mocov3_measure':
            plan.append(('mocov3_measure', 'MoCo v3 (measuring network), seed 1', 'mocov3'))
        plan.append(('judge', 'supervised judge on clean images', 'judge'))
        for s in self.seeds:
            plan += [(self.tok_dir(lam, s), f'tokenizer lambda={lam:g}, seed {s}', 'tokenizer')
                     for lam in self.lambdas]
        for s in self.seeds:
            plan += [(f'pretrain_{t}_seed{s}', f'{t} MIM pretraining, seed {s}', 'pretrain')
                     for t in self.targets]
        for s in self.seeds:
            plan += [(f'{task}_{init}_seed{s}', f'{task} from {init}, seed {s}', task)
                     for task in ('cls', 'seg') for init in self.inits]
        return RunPlan([(d, desc, it[stage] * COST[stage]) for d, desc, stage in plan])

    def loss_network_run(self) -> tuple[str, str, str, str, int]:
        """(run folder, description, config, stage, seed) of the perceptual loss's network."""
        if self.perceptual == 'supervised':
            return ('supervised', 'supervised ViT (perceptual loss network), seed 1',
                    'judge_vit_tiny_world.py', 'judge', 1)
        return ('mocov3', 'MoCo v3 (perceptual loss network), seed 0',
                'mocov3_vit_tiny_world.py', 'mocov3', 0)

    def measure_run(self) -> str:
        """The run whose network measures the tokenizers' perceptual distance, never the
        loss's own: MoCo v3 with seed 1 beside a MoCo v3 loss network; the judge beside a
        supervised one (a MoCo v3 that learned no shape would measure nothing here)."""
        return 'judge' if self.perceptual == 'supervised' else 'mocov3_measure'

    def tok_dir(self, lam: float, seed: int) -> str:
        return f'tokenizer_lambda{lam:g}_seed{seed}'.replace('.', 'p')

    def progress(self, run_dir: str, note: str = '') -> None:
        self.plan.start(run_dir, note)

    # configs and runs ---------------------------------------------------------------------------
    def config(self, name: str, stage: str, seed: int, options: dict | None = None):
        """configs/study/<name>: work_dirs/study paths under the work dir, the seed, the
        profile's schedule, `options` (dotted keys) merged last."""
        from mmengine.config import Config

        from peco_mm.tooling.tool_runs import move_root
        cfg = Config.fromfile(str(CONFIGS / name))
        root = str(self.wd)
        move_root(cfg, CONFIG_ROOT, root)
        cfg.randomness = dict(cfg.get('randomness', {}), seed=seed)
        set_schedule(cfg, self.p['iters'][stage])
        if options:
            cfg.merge_from_dict(options)
        return cfg

    def result_file(self, run_dir: str) -> Path:
        return self.wd / run_dir / 'result.json'

    def claim(self, run_dir: str) -> bool:
        """Take <run>/.lock for this process; False when another live process holds it."""
        lock = self.wd / run_dir / '.lock'
        lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text() or 0)
                os.kill(pid, 0)
                return pid == os.getpid()
            except (ValueError, ProcessLookupError):  # a dead process's lock
                lock.unlink(missing_ok=True)
                return self.claim(run_dir)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True

    def wait_for(self, run_dir: str) -> dict:
        """The result of a run another process is training, once it is written."""
        while not self.result_file(run_dir).is_file():
            if self.claim(run_dir):  # its process died: ours now
                return {}
            time.sleep(5)
        return json.loads(self.result_file(run_dir).read_text())

    def run(self, run_dir: str, name: str, stage: str, seed: int, options: dict | None = None,
            evaluate=None, wait: bool = True) -> dict | None:
        """Train (and evaluate) one run unless its result.json exists; returns the result:
        the checkpoint, the config file as run, the seconds and `evaluate(result)`'s
        metrics. The run's console output goes to <run>/console.log."""
        out = self.result_file(run_dir)
        if out.is_file():
            self.progress(run_dir, ': finished earlier, kept')
            return json.loads(out.read_text())
        if not self.claim(run_dir):
            if not wait:
                return None
            print(f'{run_dir}: another process trains it; waiting', flush=True)
            res = self.wait_for(run_dir)
            if res:
                self.progress(run_dir, ': trained by another process')
                return res
        self.progress(run_dir)
        from peco_mm.engine.console import output_to
        from peco_mm.engine.launch import run
        t = time.time()
        work = self.wd / run_dir
        work.mkdir(parents=True, exist_ok=True)
        cfg = self.config(name, stage, seed, options)
        cfg.dump(str(work / name))
        res = dict(config=str(work / name), seed=seed)
        with output_to(work / 'console.log'):
            run(str(work / name), work_dir=str(work), mode='train')
            res['ckpt'] = (work / 'last_checkpoint').read_text().strip()
            res['metrics'] = evaluate(res) if evaluate else {}
        res['seconds'] = time.time() - t
        self.plan.finish(run_dir, res['seconds'])
        out.write_text(json.dumps(res, indent=1))
        (work / '.lock').unlink(missing_ok=True)
        return res

    def test(self, res: dict) -> dict:
        """tools/test.py on a trained run: its test_evaluator's metrics."""
        from peco_mm.engine.launch import run
        return run(res['config'], work_dir=str(Path(res['config']).parent), mode='test',
                   checkpoint=res['ckpt']).metrics


# ---- stages -------------------------------------------------------------------------------------
def stage_world(study: Study) -> dict:
    from peco_mm.tooling.shape_world import make_world
    done = study.wd / 'world' / 'done.json'
    p = study.p
    args = dict(n_pretrain=p['n_pretrain'], val_per_class=p['val_per_class'],
                judge_per_class=p['judge_per_class'])
    if not p.get('rotate', True):  # written into done.json only when set: older worlds match
        args['rotate'] = False
    if done.is_file() and json.loads(done.read_text()) == args:
        print('world: written earlier, kept', flush=True)
    else:
        t = time.time()
        make_world(study.wd / 'world', **args)
        done.write_text(json.dumps(args))
        print(f'world: {p["n_pretrain"]} unlabeled images in {time.time() - t:.0f} s',
              flush=True)
    return args


def stage_networks(study: Study) -> dict:
    """The perceptual loss's network (MoCo v3, or a supervised ViT with --perceptual
    supervised), the measuring network (`Study.measure_run`) and the judge, with its accuracy
    on clean cls/val images. The loss's and the measuring network are converted to PeCoViT
    and checked by 1-NN shape accuracy on cls/val against the same ViT randomly initialised.
    'loss_net' and 'measure' name those two runs' results."""
    from peco_mm.tooling.logs import last_metrics, read_scalars
    from peco_mm.tooling.tool_runs import call_tool
    loss_dir, _, loss_config, loss_stage, loss_seed = study.loss_network_run()
    measure_dir = study.measure_run()

    def accuracy(res):
        return last_metrics(read_scalars(Path(res['ckpt']).parent))

    def convert_and_check(run_dir, with_accuracy):
        def evaluate(res):
            target = str(study.wd / run_dir / 'vit_tiny_pecovit.pth')
            rc, log = call_tool('convert_checkpoint', [res['ckpt'], target, '--num-heads', 4])
            if rc != 0:
                raise RuntimeError(f'tools/convert_checkpoint.py {res["ckpt"]} failed:\n{log}')
            out = dict(shape_knn(study, target), pecovit=target)
            return dict(out, **accuracy(res)) if with_accuracy else out
        return evaluate

    runs = {loss_dir: (loss_config, loss_stage, loss_seed), 'judge': (
        'judge_vit_tiny_world.py', 'judge', 0)}
    if measure_dir == 'mocov3_measure':
        runs['mocov3_measure'] = ('mocov3_vit_tiny_world.py', 'mocov3', 1)
    out = {}
    for wait in (False, True):  # first the runs no other process holds, then the others
        for run_dir, (name, stage, seed) in runs.items():
            if out.get(run_dir) is None:
                evaluate = convert_and_check(run_dir, with_accuracy=stage == 'judge') \
                    if run_dir in (loss_dir, measure_dir) else accuracy
                out[run_dir] = study.run(run_dir, name, stage, seed, evaluate=evaluate,
                                         wait=wait)
    out['loss_net'], out['measure'] = out[loss_dir], out[measure_dir]
    return out


def shape_knn(study: Study, pecovit: str) -> dict:
    """Leave-one-out 1-NN shape accuracy (%) on cls/val of a PeCoViT's mean-pooled features,
    and of the same ViT randomly initialised (3 inits)."""
    import torch

    from peco_mm.tooling.demo_checks import knn_accuracy, trained_and_random
    from peco_mm.utils.image import IMAGENET_MEAN, IMAGENET_STD, find_images, load_images
    files = find_images(study.wd / 'world' / 'cls' / 'val')
    from peco_mm.tooling.shape_world import CLASSES
    labels = torch.tensor([CLASSES.index(Path(f).parent.name) for f in files])
    x = load_images(files, mean=IMAGENET_MEAN, std=IMAGENET_STD)  # (N, 3, 32, 32), as MoCo v3
    trained, randoms = trained_and_random(pecovit, num_heads=4)
    with torch.no_grad():
        out = dict(trained=knn_accuracy(trained(x)[-1], labels),
                   random=[knn_accuracy(net(x)[-1], labels) for net in randoms])
    return out


def stage_tokenizers(study: Study, nets: dict) -> dict:
    judge = nets['judge']
    options = {'test_evaluator.classifier.checkpoint': judge['ckpt'],
               'test_evaluator.classifier.config': judge['config'],
               'model.perceptual.checkpoint': nets['loss_net']['metrics']['pecovit'],
               'test_evaluator.perceptual.checkpoint': nets['measure']['metrics']['pecovit']}
    out = {}
    for seed in study.seeds:
        for lam in study.lambdas:
            name = 'tokenizer_world.py' if lam == 1 else \
                f'tokenizer_world_lambda{lam:g}.py'.replace('.', 'p').replace('ppy', '.py')
            out[(lam, seed)] = study.run(study.tok_dir(lam, seed), name, 'tokenizer', seed,
                                         options=options, evaluate=study.test)
    return out


def stage_pretrain(study: Study, toks: dict) -> dict:
    import statistics

    from peco_mm.tooling.logs import read_scalars, series
    out = {}

    def mim_acc(res):
        acc = series(read_scalars(Path(res['ckpt']).parent), 'mim_acc')[1]
        return dict(mim_acc=100 * statistics.mean(acc[-3:]))
    for seed in study.seeds:
        for target in study.targets:
            lam = 0.0 if target == 'pixel' else 1.0
            opts = {'model.target_generator.checkpoint': toks[(lam, seed)]['ckpt']}
            if target == 'peco_bf16':  # the same run with the frozen encoder in bf16
                opts['model.target_generator.encode_bf16'] = True
            out[(target, seed)] = study.run(
                f'pretrain_{target}_seed{seed}',
                f'pretrain_{"pixel" if lam == 0 else "peco"}_world.py', 'pretrain', seed,
                options=opts, evaluate=mim_acc)
    return out


def stage_downstream(study: Study, pre: dict) -> dict:
    from peco_mm.tooling.logs import last_metrics, read_scalars
    out = {}
    for seed in study.seeds:
        for task, name in (('cls', 'finetune_vit_tiny_world.py'),
                           ('seg', 'upernet_vit_tiny_world.py')):
            for init in study.inits:
                opts = ({'model.backbone.init_cfg': None} if init == 'scratch' else
                        {'model.backbone.init_cfg.checkpoint': pre[(init, seed)]['ckpt']})
                out[(task, init, seed)] = study.run(
                    f'{task}_{init}_seed{seed}', name, task, seed, options=opts,
                    evaluate=lambda r: last_metrics(read_scalars(Path(r['ckpt']).parent)))
    return out


# ---- report -------------------------------------------------------------------------------------
TOK_COLUMNS = [  # (column, metric key, digits, scale, the paper's direction for lambda > 0)
    ('PSNR (dB)', 'tokenizer/psnr', 2, 1, 0), ('SSIM', 'tokenizer/ssim', 3, 1, 0),
    ('perceptual dist. (measuring net)', 'tokenizer/perceptual', 3, 1, -1),
    ('codeword probe (%)', 'tokenizer/codeword_probe_acc', 1, 1, 1),
    ('judge on reconstructions (%)', 'tokenizer/recon_cls_acc', 1, 1, 1),
    ('codebook usage (%)', 'tokenizer/usage', 1, 100, 0)]
DOWN_COLUMNS = [('MIM accuracy (%)', 'mim_acc', 1, 1),
                ('few-label top-1 (%)', 'accuracy/top1', 1, 1), ('mIoU (%)', 'mIoU', 1, 1)]
DOWN_ROWS = dict(peco='PeCo (lambda = 1 codes)', pixel='pixel codebook (lambda = 0 codes)',
                 scratch='scratch', peco_bf16='PeCo, targets encoded in bf16',
                 chance='chance (a model that learned nothing)')
T4, T10, T23 = ('Table 4: tokenizers', 'Table 10: lambda sweep',
                'Tables 2-3: pretraining and downstream')
PRIMARY = {  # the endpoints fixed before the runs (docs/reproduce.md): row 1 minus row 2
    (T4, 'codeword probe (%)', 'lambda = 1 (PeCo)', 'lambda = 0 (pixel only)'): 'P1',
    (T23, 'few-label top-1 (%)', DOWN_ROWS['peco'], DOWN_ROWS['pixel']): 'P2',
    (T23, 'mIoU (%)', DOWN_ROWS['peco'], DOWN_ROWS['pixel']): 'P3'}


def lam_row(lam: float) -> str:
    return f'lambda = {lam:g}' + {0.0: ' (pixel only)', 1.0: ' (PeCo)'}.get(lam, '')


def report_tables(study: Study, res: dict, chance: dict) -> tuple[list[str], list[str]]:
    """(Markdown tables, conclusion lines), both from the runs' metrics; the downstream
    table has a chance row, and every trained row is compared with it (did it learn?)."""
    from peco_mm.tooling.study_report import cell, comparison, conclusion_block, markdown_table
    toks, pre, down = res['tokenizers'], res['pretrain'], res['downstream']

    def tok_vals(lam, key, scale):
        return [None if toks[(lam, s)]['metrics'].get(key) is None else
                toks[(lam, s)]['metrics'][key] * scale for s in study.seeds]

    tables, conclusions = [], []
    sweep = len(study.lambdas) > 2
    for title, lams in ((T4, (0.0, 1.0)), (T10, study.lambdas)):
        if title == T10 and not sweep:
            continue
        rows = {lam_row(lam): [cell(tok_vals(lam, k, sc), d) for _, k, d, sc, _ in TOK_COLUMNS]
                for lam in lams}
        tables.append(markdown_table(title, [c[0] for c in TOK_COLUMNS], rows))
        for lam in lams:
            if lam == 0.0 or (title == T10 and lam == 1.0):
                continue
            for col, key, d, sc, expect in TOK_COLUMNS:
                a, b = tok_vals(lam, key, sc), tok_vals(0.0, key, sc)
                if None not in a + b:
                    conclusions.append(comparison(title, col, lam_row(lam), lam_row(0.0),
                                                  a, b, expect, d))

    def down_vals(init, key):
        if init == 'chance':
            return [chance[key]] * len(study.seeds)
        if key == 'mim_acc':
            return [pre[(init, s)]['metrics']['mim_acc'] for s in study.seeds] \
                if init != 'scratch' else []
        task = 'cls' if key.startswith('accuracy') else 'seg'
        return [down[(task, init, s)]['metrics'].get(key) for s in study.seeds]

    rows = {DOWN_ROWS[i]: [cell(down_vals(i, k), d) for _, k, d, _ in DOWN_COLUMNS]
            for i in study.inits + ('chance', )}
    tables.append(markdown_table(T23, [c[0] for c in DOWN_COLUMNS], rows))
    for init in study.inits:  # did it learn? (MIM accuracy: scratch has none)
        for col, key, d, _ in DOWN_COLUMNS[init == 'scratch':]:
            conclusions.append(comparison(T23, col, DOWN_ROWS[init], DOWN_ROWS['chance'],
                                          down_vals(init, key), down_vals('chance', key), 1, d))
    pairs = [('peco', 'pixel', 1), ('peco', 'scratch', 1), ('pixel', 'scratch', 1)]
    if 'peco_bf16' in study.inits:  # the paper makes no claim on the targets' precision
        pairs.append(('peco_bf16', 'peco', 0))
    for a, b, expect in pairs:
        # MIM accuracy compares only runs predicting the same codes (fp32 against bf16 targets)
        for col, key, d, _ in DOWN_COLUMNS[b != 'peco':]:
            conclusions.append(comparison(T23, col, DOWN_ROWS[a], DOWN_ROWS[b],
                                          down_vals(a, key), down_vals(b, key), expect, d))
    return tables, conclusion_block(conclusions, PRIMARY)


def chance_levels(study: Study) -> dict:
    """What a model that learned nothing scores, keyed like DOWN_COLUMNS: top-1 of one
    class, the mIoU of predicting background everywhere on the validation masks, and MIM
    accuracy of a uniform guess among the codebook's K codes."""
    import numpy as np
    from PIL import Image

    from peco_mm.tooling.shape_world import CLASSES
    ann = study.wd / 'world' / 'ade' / 'ADEChallengeData2016' / 'annotations' / 'validation'
    labels = np.stack([np.asarray(Image.open(f)) for f in sorted(ann.glob('*.png'))])
    k = study.config('tokenizer_world.py', 'tokenizer', 0).model.quantizer.num_embeddings
    return {'accuracy/top1': 100 / len(CLASSES), 'mim_acc': 100 / k,
            'mIoU': 100 * float((labels == 1).mean()) / (len(CLASSES) + 1)}


def reconstruction_grid(study: Study, res: dict) -> Path:
    """Originals (top), lambda = 0 (middle) and lambda = 1 (bottom) reconstructions of ten
    cls/val images, one per class, seed 0."""
    import torch

    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.utils.image import image_grid, load_images, save_png
    val = study.wd / 'world' / 'cls' / 'val'
    files = [sorted(d.glob('*.png'))[0] for d in sorted(val.iterdir())]
    x = load_images(files)  # (10, 3, 32, 32) in [-1, 1]
    rows = [x]
    for lam in (0.0, 1.0):
        tok = FrozenPeCoTokenizer(res['tokenizers'][(lam, study.seeds[0])]['ckpt'],
                                  with_decoder=True)
        with torch.no_grad():
            rows.append(tok.decode(tok.encode(x)))
    return save_png(image_grid(rows), study.wd / 'report_files' / 'reconstructions.png',
                    scale=3)


def write_report(study: Study, res: dict, title: str, seconds: float, load: dict) -> Path:
    """<work-dir>/report.md: what ran, the stage checks, the tables, the conclusions."""
    from peco_mm.tooling.study_report import CONCLUSIONS_INTRO, cell, write_checked
    chance = chance_levels(study)
    tables, conclusions = report_tables(study, res, chance)
    nets, it = res['nets'], study.p['iters']
    loss, measure = nets['loss_net']['metrics'], nets['measure']['metrics']
    judge = nets['judge']['metrics'].get('accuracy/top1')
    from peco_mm.tooling.shape_world import CLASSES
    from peco_mm.utils.image import find_images
    few = len(find_images(study.wd / 'world' / 'cls' / 'train')) // len(CLASSES)  # as written
    if study.perceptual == 'supervised':
        loss_line = (
            '- Perceptual loss network: a supervised ViT (the judge\'s recipe and data, seed 1), '
            f'{loss.get("accuracy/top1", float("nan")):.1f} % top-1 on clean cls/val, 1-NN '
            f'shape accuracy {loss["trained"]:.1f} % (randomly initialised '
            f'{cell(loss["random"])} %). It stands for the paper\'s supervised-VGG row: '
            'MoCo v3 learns little shape at this scale (docs/reproduce.md). The judge shares its '
            'training data and recipe, so the judge\'s accuracy on the reconstructions and '
            'the perceptual distance (measured with the judge) are not independent measures '
            'here; the codeword probe is.')
        measure_line = (
            f'- Measuring network (perceptual distance): the judge, 1-NN shape accuracy '
            f'{measure["trained"]:.1f} %, randomly initialised {cell(measure["random"])} %; '
            f'chance {chance["accuracy/top1"]:.1f} %.')
    else:
        loss_line = (
            f'- MoCo v3 (perceptual loss network), 1-NN shape accuracy on cls/val '
            f'(mean-pooled features): {loss["trained"]:.1f} %, the same ViT randomly '
            f'initialised {cell(loss["random"])} %.')
        measure_line = (
            f'- MoCo v3 (measuring network), 1-NN shape accuracy: {measure["trained"]:.1f} %, '
            f'randomly initialised {cell(measure["random"])} %; chance '
            f'{chance["accuracy/top1"]:.1f} %.')
    lines = [
        f'# peco_mm {title}: PeCo\'s comparisons on the shape world', '',
        f'Profile `{study.profile}` of `tools/study.py`: {len(study.plan.runs)} runs, seeds '
        f'{", ".join(map(str, study.seeds))}, lambdas {", ".join(f"{v:g}" for v in study.lambdas)}'
        f'. Wall time {seconds / 60:.1f} min on {load["cpus"]} CPU cores (load average '
        f'{load["start"][0]:.1f} at the start, {load["end"][0]:.1f} at the end; finished runs '
        'of an earlier call are kept and not counted).', '',
        f'World: {res["world"]["n_pretrain"]} unlabeled 32 px images, {len(CLASSES)} shape '
        'classes, '
        f'{"drawn upright" if res["world"].get("rotate") is False else "each at a random angle"}; '
        f'few-label splits of {few} images per class, validation '
        f'{res["world"]["val_per_class"]} per class (peco_mm/tooling/shape_world.py). '
        'Iterations: ' +
        ', '.join(f'{k} {v}' for k, v in it.items()
                  if k != 'mocov3' or study.perceptual == 'mocov3') +
        '. Each cell: mean ± standard deviation over the seeds, the seeds\' values in '
        'brackets. The perceptual loss\'s network, the measuring network and the judge are '
        'trained once.', '',
        '## Stage checks', '', loss_line, measure_line,
        f'- Judge (supervised on clean images): {judge:.1f} % top-1 on clean cls/val images.'
        if judge is not None else '- Judge: no accuracy recorded.',
        '- Downstream chance levels: the last row of the pretraining and downstream table.', '']
    lines += [t + '\n' for t in tables]
    lines += ['## Conclusions', '', CONCLUSIONS_INTRO, '']
    lines += conclusions
    grid = reconstruction_grid(study, res)
    lines += ['', '## Reconstructions', '',
              'Originals (top), lambda = 0 (middle) and lambda = 1 (bottom), seed '
              f'{study.seeds[0]}, one validation image per class:', '',
              f'![reconstructions]({osp.relpath(grid, study.wd)})', '',
              f'Work directories (configs as run, logs, checkpoints, each run\'s console.log): '
              f'`{study.wd}`.']
    # checked as written: exits non-zero when a sentence disagrees with its numbers
    return write_checked(study.wd / 'report.md', '\n'.join(lines) + '\n')


def main(argv=None) -> Path:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import warnings
    warnings.filterwarnings('ignore')
    import peco_mm  # noqa: F401
    from peco_mm.engine.console import fmt_time
    study = Study(args.work_dir, args.profile, args.seeds, args.perceptual, args.bf16_targets)
    if args.only_seeds:
        study.seeds = [int(v) for v in args.only_seeds.split(',')]
    study.change(n_pretrain=args.n_pretrain, val_per_class=args.val_per_class,
                 iters=args.iters, rotate=args.rotation)
    study.wd.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    print(f'{args.title}: profile {args.profile}, seeds {study.seeds}, lambdas '
          f'{study.lambdas}, {len(study.plan.runs)} runs, work dir {study.wd}', flush=True)
    res = dict(world=stage_world(study))
    res['nets'] = stage_networks(study)
    res['tokenizers'] = stage_tokenizers(study, res['nets'])
    res['pretrain'] = stage_pretrain(study, res['tokenizers'])
    res['downstream'] = stage_downstream(study, res['pretrain'])
    if args.only_seeds:
        print(f'[{fmt_time(time.time() - study.t0)}] seeds {args.only_seeds} done', flush=True)
        return study.wd
    load = dict(start=load0, end=os.getloadavg(), cpus=os.cpu_count())
    report = write_report(study, res, args.title, time.time() - study.t0, load)
    print(f'[{fmt_time(time.time() - study.t0)}] report: {report}', flush=True)
    return report


if __name__ == '__main__':
    main()
