"""The study's runs (tools/study.py, `make demo`): its profiles, the plan of every run of every
replicate, where each run writes, and how one run is trained, resumed or waited for.

Replicate r owns the folder `<work dir>/rep<r>/`: its world (drawn with seed r, class split
included), its perceptual network, judge, tokenizers, pretrainings and downstream runs, each
trained with seed r. No run reads a file of another replicate, so the replicates are
independent draws of the whole study and can train as parallel processes.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .tool_runs import plain_number
from .study_profiles import CONFIG_ROOT, COST, PERCEPTUAL, PROFILES  # noqa: F401 (re-exported)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / 'configs' / 'study'
# downstream rows: pretrained on a tokenizer's codes (which one), or from scratch. clsloss:
# Table 6's control, a tokenizer trained with lambda = 0 and a classification loss on its
# codewords (labels of the classes A only: configs/study/tokenizer_world_clsloss.py); dvae:
# Table 2's dVAE baseline (Gumbel-softmax codes: configs/study/tokenizer_world_dvae.py)
TARGETS = dict(peco='lambda1', pixel='lambda0', random='random', peco_bf16='lambda1',
               clsloss='clsloss', dvae='dvae')
INITS = ('peco', 'pixel', 'random', 'clsloss', 'dvae', 'scratch', 'scratch_matched',
         'peco_bf16')
# the perceptual networks: config and stage (iterations) of each kind
LOSS_NETS = dict(supervised=('perceptual_vit_tiny_world.py', 'perceptual'),
                 mocov3=('mocov3_vit_tiny_world.py', 'mocov3'),
                 pairs=('mocov3_pairs_vit_tiny_world.py', 'mocov3'))
TASK_CONFIGS = dict(cls=('finetune_vit_tiny_world.py', 'finetune_vit_tiny_world_scratch.py'),
                    seg=('upernet_vit_tiny_world.py', 'upernet_vit_tiny_world_scratch.py'))
# the tuning world's seed (study_tuning.py trains the scratch lr grid on it); replicates are
# 0, 1, ..., below it
TUNING_SEED = 1000


def tuning_runs(study) -> list[tuple[str, str, str, int]]:
    """(run folder, config, stage, iterations) of each lr of the grid, both tasks; [] when
    the study has no scratch row or the profile no grid. With a grid for every row
    (`row_lr`): the tuning world's whole chain up to pretraining, then each row at each lr."""
    if study.p.get('row_lr'):
        it, grid = study.p['iters'], study.p['row_lr']
        upstream = [x for x in study.replicate_runs(TUNING_SEED) if x[2] not in TASK_CONFIGS]
        return upstream + [
            (f'tuning/{task}_{init}_lr{lr:g}', TASK_CONFIGS[task][init not in TARGETS], task,
             study.iterations(task, init))
            for task in TASK_CONFIGS for init in study.inits for lr in grid[task]]
    grid = study.p.get('scratch_lr')
    if not grid or not {'scratch', 'scratch_matched'} & set(study.inits):
        return []
    return [(f'tuning/{task}_scratch_lr{lr:g}', TASK_CONFIGS[task][1], task,
             study.p['iters'][task]) for task in ('cls', 'seg') for lr in grid[task]]


def set_schedule(cfg, iters: int) -> None:
    """An iteration-based config cut (or stretched) to `iters`: its iteration-based LR
    schedule scaled to fit, checkpoint and validation at the end, hooks at most every
    `iters`, and a Gumbel quantizer's temperature annealed over the `iters`."""
    tc = cfg.train_cfg
    scale, tc.max_iters = iters / tc.max_iters, iters
    quantizer = cfg.get('model', {}).get('quantizer') or {}
    if 'anneal_iters' in quantizer:
        quantizer['anneal_iters'] = iters
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


def tok_key(lam: float) -> str:
    return f'lambda{lam:g}'.replace('.', 'p')


class Study:
    """The runs of a profile, where they write, and the console's progress and ETA."""

    def __init__(self, work_dir: str, profile: str, replicates: int | None = None,
                 perceptual: str | None = None, bf16_targets: bool = False) -> None:
        if profile not in PROFILES:
            raise ValueError(f'profile={profile!r}; known: {sorted(PROFILES)}')
        perceptual = perceptual or PROFILES[profile]['perceptual']
        if perceptual not in PERCEPTUAL:
            raise ValueError(f'perceptual={perceptual!r}; allowed: {PERCEPTUAL}')
        if replicates is not None and not 1 <= replicates <= TUNING_SEED:
            raise ValueError(f'replicates={replicates} must be >= 1 and <= {TUNING_SEED} '
                             f'(seed {TUNING_SEED} draws the tuning world)')
        self.perceptual = perceptual
        self.wd = Path(work_dir).resolve()
        self.profile = profile
        self.p = dict(PROFILES[profile])
        self.inits = tuple(self.p['inits']) + (('peco_bf16', ) if bf16_targets else ())
        self.replicates = list(range(replicates if replicates is not None
                                     else self.p['replicates']))
        self.scratch_lr: dict = {}  # the lr chosen on the tuning world per task (study_tuning)
        self.row_lr: dict = {}  # or per task and row, where the profile has `row_lr`
        self.matched_iters: dict = {}  # compute-matched scratch's, where FLOPs were counted
        self.prereg = None  # the plan fixed before the runs (study_plan.Plan), if any
        self.plan = self.make_plan()
        self.t0 = time.time()

    @property
    def lambdas(self) -> tuple[float, ...]:
        return tuple(self.p['lambdas'])

    @property
    def targets(self) -> tuple[str, ...]:
        """The downstream rows that pretrain (on a tokenizer's codes)."""
        return tuple(i for i in self.inits if i in TARGETS)

    @property
    def tokenizers(self) -> tuple[str, ...]:
        """Each replicate's tokenizers: one per lambda, and lambda = 1 against the randomly
        initialised perceptual network (the control: any perceptual loss, or this one's
        knowledge?), and those of the profile's other downstream rows (e.g. Table 6's
        control)."""
        keys = tuple(tok_key(lam) for lam in self.lambdas) + ('random', )
        return keys + tuple(dict.fromkeys(TARGETS[i] for i in self.inits if i in TARGETS
                                          and TARGETS[i] not in keys))

    @property
    def knn_networks(self) -> tuple[str, ...]:
        """Self-supervised networks trained besides the perceptual loss's network, only for
        their 1-NN shape accuracy in the stage checks (the profile's `knn_networks`, less the
        loss's own kind)."""
        return tuple(n for n in self.p.get('knn_networks', ()) if n != self.perceptual)

    def change(self, iters: dict[str, int] | None = None, **settings) -> None:
        """The profile with `settings` (n_pretrain, val_per_class, per_class, rotate,
        knn_networks; None keeps the profile's) and the stages' `iters` replaced; the plan
        follows."""
        self.p = dict(self.p, **{k: v for k, v in settings.items() if v is not None},
                      iters={**self.p['iters'], **(iters or {})})
        self.plan = self.make_plan()

    def only(self, replicates: list[int]) -> None:
        """Train only these replicates (another process trains the others)."""
        self.replicates = sorted(set(replicates))
        self.plan = self.make_plan()

    def rep(self, r: int, name: str = '') -> str:
        """A run folder of replicate r (r = TUNING_SEED: the tuning world's), relative to the
        work dir."""
        base = 'tuning' if r == TUNING_SEED else f'rep{r}'
        return f'{base}/{name}' if name else base

    def runs(self, r: int) -> list[tuple[str, str, str, int]]:
        """Replicate r's runs in the order they train: (run folder, config, stage,
        iterations); r = TUNING_SEED: the tuning world's runs (`tuning_runs`)."""
        return tuning_runs(self) if r == TUNING_SEED else self.replicate_runs(r)

    def replicate_runs(self, r: int) -> list[tuple[str, str, str, int]]:
        """The runs of one replicate's chain (`runs`)."""
        it = self.p['iters']
        nets = [('perceptual', *LOSS_NETS[self.perceptual]),
                ('judge', 'judge_resnet_world.py', 'judge')]
        nets += [(f'perceptual_{n}', *LOSS_NETS[n]) for n in self.knn_networks]
        out = [(self.rep(r, d), c, s, it[s]) for d, c, s in nets]
        for key in self.tokenizers:
            name = 'tokenizer_world.py' if key in ('lambda1', 'random') else \
                f'tokenizer_world_{key}.py'
            out.append((self.rep(r, f'tokenizer_{key}'), name, 'tokenizer', it['tokenizer']))
        for t in self.targets:
            name = 'pretrain_pixel_world.py' if t == 'pixel' else 'pretrain_peco_world.py'
            out.append((self.rep(r, f'pretrain_{t}'), name, 'pretrain', it['pretrain']))
        for task, (pretrained, scratch) in TASK_CONFIGS.items():
            for init in self.inits:
                n = self.iterations(task, init)
                name = pretrained if init in TARGETS else scratch
                out.append((self.rep(r, f'{task}_{init}'), name, task, n))
        return out

    def iterations(self, task: str, init: str) -> int:
        """Fine-tuning iterations of a downstream row: the profile's; compute-matched
        scratch's: pretraining plus fine-tuning iterations, or where the tuning world counted
        FLOPs (`study_tuning.matched_iterations`), as many as match PeCo's FLOPs."""
        it = self.p['iters']
        if init != 'scratch_matched':
            return it[task]
        return self.matched_iters.get(task) or it[task] + it['pretrain']

    def make_plan(self):
        """The RunPlan (console progress and ETA) of every replicate's runs."""
        from peco_mm.supervisor.console import RunPlan
        plan = [(d, f'{d} ({Path(c).stem}, {n} iterations)', n * COST[s])
                for r in [TUNING_SEED] + self.replicates for d, c, s, n in self.runs(r)]
        return RunPlan(plan)

    def progress(self, run_dir: str, note: str = '') -> None:
        self.plan.start(run_dir, note)

    # configs and runs ---------------------------------------------------------------------------
    def config(self, name: str, r: int, iters: int, options: dict | None = None):
        """configs/study/<name> for replicate r: work_dirs/study paths under rep<r>/, seed r,
        `iters` iterations, `options` (dotted keys) merged last."""
        from mmengine.config import Config

        from peco_mm.tooling.tool_runs import move_root
        cfg = Config.fromfile(str(CONFIGS / name))
        move_root(cfg, CONFIG_ROOT, str(self.wd / self.rep(r)))
        cfg.randomness = dict(cfg.get('randomness', {}), seed=r)
        set_schedule(cfg, iters)
        if options:
            cfg.merge_from_dict(options)
        return cfg

    def run_config(self, run_dir: str, options: dict | None = None):
        """The config `run` trains for one planned run folder."""
        top = run_dir.split('/')[0]
        r = TUNING_SEED if top == 'tuning' else int(top[3:])
        _, name, _, iters = next(x for x in self.runs(r) if x[0] == run_dir)
        return name, self.config(name, r, iters, options)

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

    def run(self, run_dir: str, options: dict | None = None, evaluate=None) -> dict:
        """Train (and evaluate) one planned run unless its result.json exists; returns the
        result: the checkpoint, the config file as run, the seconds and `evaluate(result)`'s
        metrics. The run's console output goes to <run>/console.log."""
        out = self.result_file(run_dir)
        if out.is_file():
            self.progress(run_dir, ': finished earlier, kept')
            return json.loads(out.read_text())
        if not self.claim(run_dir):
            print(f'{run_dir}: another process trains it; waiting', flush=True)
            res = self.wait_for(run_dir)
            if res:
                self.progress(run_dir, ': trained by another process')
                return res
        self.progress(run_dir)
        from peco_mm.supervisor.console import output_to
        from peco_mm.supervisor.launch import run
        t = time.time()
        work = self.wd / run_dir
        work.mkdir(parents=True, exist_ok=True)
        name, cfg = self.run_config(run_dir, options)
        cfg.dump(str(work / name))
        res = dict(config=str(work / name), seed=cfg.randomness.seed)
        with output_to(work / 'console.log'):
            run(str(work / name), work_dir=str(work), mode='train')
            res['ckpt'] = (work / 'last_checkpoint').read_text().strip()
            res['metrics'] = evaluate(res) if evaluate else {}
        res['seconds'] = time.time() - t
        self.plan.finish(run_dir, res['seconds'])
        out.write_text(json.dumps(res, indent=1, default=plain_number))
        (work / '.lock').unlink(missing_ok=True)
        return res

    def test(self, res: dict) -> dict:
        """tools/test.py on a trained run: its test_evaluator's metrics (the test half)."""
        from peco_mm.supervisor.launch import run
        return run(res['config'], work_dir=str(Path(res['config']).parent), mode='test',
                   checkpoint=res['ckpt']).metrics
