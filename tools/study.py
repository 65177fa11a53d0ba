#!/usr/bin/env python3
"""The paper's comparisons on the shape world (peco_mm/tooling/shape_world.py), replicated, in
one command that resumes where it stopped; `make demo` runs its `demo` profile.

Each replicate r redraws everything: its own world (seed r; the ten classes split into A and
B), its own networks, tokenizers, pretraining and fine-tuning, all with seed r, under
<work-dir>/rep<r>/ (peco_mm/tooling/study_runs.py plans the runs, study_stages.py runs them):

  tuning         the scratch rows' lr: each lr of the profile's grid trained once on a world
                 no replicate uses (seed 1000, <work-dir>/tuning/), scored on its tuning half;
                 the best is every replicate's (peco_mm/tooling/study_tuning.py)
  0. world       make_world(seed=r): unlabeled images, labelled splits of A (the perceptual
                 network's) and of B (the judge's; few-label and segmentation splits with a
                 tuning half and a test half), geometry-matched pairs of B
  1. networks    the perceptual loss's network (supervised on A; --perceptual mocov3: MoCo v3
                 without labels), its randomly initialised twin (the control), and the judge,
                 a ResNet trained on its own labelled split of B
  2. tokenizers  lambda = 0 and 1 (and the profile's others), and lambda = 1 against the
                 random network; each scored on B's test half: PSNR, SSIM, codeword probe, the
                 judge on the reconstructions, code agreement of the geometry-matched pairs
  3. pretrain    masked image modeling on the lambda = 1 codes (PeCo), the lambda = 0 codes
                 (pixel codebook) and, where the profile has the row, the control's codes
  4. downstream  few-label classification and UperNet segmentation from each, from scratch
                 with its own recipe and compute-matched from scratch, on B's test half
  5. report      <work-dir>/report.md (checked by study_report.check_report: the command fails
                 when a sentence disagrees with its numbers) and <work-dir>/endpoints.json

Each finished run leaves <run>/result.json; a rerun skips it (delete the file to redo a run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the study's parts, imported on first use (`--help` imports neither peco_mm nor torch)
PARTS = {'peco_mm.tooling.study_runs': ('INITS', 'Study', 'set_schedule'),
         'peco_mm.tooling.study_stages': ('run_replicate', 'stage_world', 'stage_networks',
                                          'stage_tokenizers', 'stage_pretrain',
                                          'stage_downstream'),
         'peco_mm.tooling.study_tables': ('T4', 'T10', 'T23', 'report_tables', 'write_report'),
         'peco_mm.tooling.study_tuning': ('TUNING_SEED', 'stage_tuning')}
__all__ = ['COST', 'PROFILES', *(n for names in PARTS.values() for n in names)]


def read_profiles():
    """peco_mm/tooling/study_profiles.py (plain data, standard library only) read as a file,
    not through the peco_mm package, whose import brings torch."""
    import importlib.util
    path = ROOT / 'peco_mm' / 'tooling' / 'study_profiles.py'
    spec = importlib.util.spec_from_file_location('peco_mm_study_profiles', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROFILE_DATA = read_profiles()
CONFIG_ROOT, COST, PERCEPTUAL, PROFILES = (PROFILE_DATA.CONFIG_ROOT, PROFILE_DATA.COST,
                                           PROFILE_DATA.PERCEPTUAL, PROFILE_DATA.PROFILES)


def __getattr__(name: str):
    """The study's parts (Study, the stages, the report) as attributes of this tool."""
    import importlib
    for module, names in PARTS.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f'tools/study.py has no attribute {name!r}')


EPILOG = """examples:
  tools/study.py                                  # the full profile, work_dirs/study
  tools/study.py --profile demo --work-dir work_dirs/demo    # what `make demo` runs
  tools/study.py --profile quick --work-dir /tmp/q            # every stage for 2 steps (tests)
  tools/study.py --replicates 12                  # more replicates; finished runs are kept
  OMP_NUM_THREADS=2 tools/study.py --device cuda --jobs 8     # one GPU and 16 cores
  tools/study.py --knn-networks pairs             # + a self-supervised network's 1-NN check
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--work-dir', default=CONFIG_ROOT, help=f'everything goes here ({CONFIG_ROOT})')
    p.add_argument('--profile', default='full', choices=sorted(PROFILES),
                   help='world size, replicates, lambdas and schedules (full)')
    p.add_argument('--replicates', type=int, default=None,
                   help="replicates, each with its own world and runs (the profile's)")
    p.add_argument('--n-pretrain', type=int, default=None,
                   help="unlabeled world images (the profile's: full 5000, demo 2000)")
    p.add_argument('--labels-per-class', type=int, default=None,
                   help="labelled images per held-out class for few-label fine-tuning and "
                   "segmentation (every profile's: 10)")
    p.add_argument('--val-per-class', type=int, default=None,
                   help="tuning and test images per held-out class (full 30, demo 20)")
    p.add_argument('--rotation', action=argparse.BooleanOptionalAction, default=None,
                   help='draw each shape at a random angle, or (--no-rotation, every '
                   "profile's) upright. MoCo v3 learns shape here only upright: rotation is "
                   'not among its augmentations')
    p.add_argument('--iters', default=None, metavar='STAGE=N[,STAGE=N]',
                   help="iterations of stages instead of the profile's, e.g. tokenizer=400; "
                   f'stages: {", ".join(COST)}')
    p.add_argument('--title', default='study', help='the report title')
    p.add_argument('--perceptual', default=None, choices=PERCEPTUAL,
                   help="the perceptual loss's network: supervised (every profile's: a ViT "
                   "trained on the labelled split of the classes A, as the paper's "
                   'supervised-VGG row), mocov3 (self-supervised, no labels) or pairs (MoCo '
                   'v3 whose two views are a geometry-matched pair: same shape and pose, '
                   'nuisances redrawn)')
    p.add_argument('--knn-networks', default=None, metavar='NAME[,NAME]',
                   help='self-supervised networks (mocov3, pairs) each replicate also trains, '
                   'only for their 1-NN shape accuracy beside the perceptual loss network\'s '
                   "in the report's stage checks (none in the full and demo profiles: MoCo v3 "
                   "trains minutes per replicate on 2 cores); '' for none")
    add_run_args(p)
    args = p.parse_args(argv)
    if args.replicates is not None and args.replicates < 1:
        p.error(f'--replicates must be >= 1, got {args.replicates}')
    if args.jobs < 1:
        p.error(f'--jobs must be >= 1, got {args.jobs}')
    try:
        args.iters = parse_iters(args.iters)
        args.only_replicates = parse_replicates(args.only_replicates)
        args.knn_networks = parse_networks(args.knn_networks)
    except ValueError as e:
        p.error(str(e))
    return args


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Where the runs go and what is kept: device, jobs, results, the plan."""
    p.add_argument('--bf16-targets', action='store_true',
                   help='also pretrain PeCo with its frozen targets encoded in bf16 and '
                   "fine-tune from it: a row 'PeCo, bf16 targets' beside the fp32 one")
    p.add_argument('--device', default='cpu', choices=('cpu', 'cuda'),
                   help='cpu (hides any GPU) or cuda (every run on the GPU)')
    p.add_argument('--jobs', type=int, default=1,
                   help='replicates trained as this many parallel processes (then the '
                   'report); on one GPU, e.g. --device cuda --jobs 8')
    p.add_argument('--only-replicates', default=None, metavar='R[,R]',
                   help='train only these replicates and write no report (what --jobs '
                   'starts; a plain call on the same --work-dir then writes the report)')
    p.add_argument('--results', default=None, metavar='DIR',
                   help='keep small results here (e.g. docs/results/NAME, to commit): each '
                   'replicate\'s metrics as it finishes, and a replicate already there is read, '
                   'not run again; then the report, endpoints.json and run.json')
    p.add_argument('--tuning-only', action='store_true',
                   help='train the tuning world only and print what it chose and how well its '
                   'perceptual network learned shape: the figures a plan states before the '
                   'replicates run (needs no plan)')
    p.add_argument('--plan', default=None, metavar='FILE',
                   help='the plan fixed before the runs (docs/plans/*.md): its endpoints, '
                   "planned columns and rows and equivalence margins give every line's role; "
                   "the report names its sha256 (the profile's plan when it has one; 'none' "
                   'for none)')


def parse_iters(text: str | None) -> dict[str, int]:
    """'perceptual=900,tokenizer=400' -> {'perceptual': 900, 'tokenizer': 400}."""
    out = {}
    for item in filter(None, (text or '').split(',')):
        stage, _, n = item.partition('=')
        if stage not in COST or not n.isdigit() or int(n) < 1:
            raise ValueError(f'--iters {item!r}: expected STAGE=N with N >= 1 and STAGE one '
                             f'of {", ".join(COST)}')
        out[stage] = int(n)
    return out


def parse_networks(text: str | None) -> tuple[str, ...] | None:
    """'mocov3,pairs' -> ('mocov3', 'pairs'); '' -> (); None -> None (the profile's)."""
    if text is None:
        return None
    names = tuple(filter(None, text.split(',')))
    bad = [n for n in names if n not in PERCEPTUAL or n == 'supervised']
    if bad:
        raise ValueError(f'--knn-networks {text!r}: expected names among mocov3, pairs')
    return names


def parse_replicates(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        reps = [int(v) for v in text.split(',')]
    except ValueError:
        reps = [-1]
    if not reps or min(reps) < 0:
        raise ValueError(f'--only-replicates {text!r}: expected replicate numbers R[,R] >= 0')
    return reps


def use_device(device: str) -> None:
    """cpu: hide every GPU from this process and the runs it trains; cuda: require one."""
    if device == 'cpu':
        os.environ['CUDA_VISIBLE_DEVICES'] = ''
        return
    import torch
    if not torch.cuda.is_available():
        raise SystemExit('--device cuda: torch sees no CUDA device')


def run_jobs(argv: list[str], replicates: list[int], jobs: int) -> None:
    """The replicates split over `jobs` processes of this tool (--only-replicates), run in
    parallel; raises SystemExit naming the first that failed and its log."""
    groups = [replicates[i::jobs] for i in range(jobs) if replicates[i::jobs]]
    procs = []
    for group in groups:
        only = ','.join(map(str, group))
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, '--jobs', '1',
               '--only-replicates', only]
        print(f'job: replicates {only}', flush=True)
        procs.append((only, subprocess.Popen(cmd)))
    failed = [only for only, proc in procs if proc.wait() != 0]
    if failed:
        raise SystemExit(f'tools/study.py: the jobs of replicates {"; ".join(failed)} failed '
                         '(their output is above, each run\'s in <run>/console.log)')


def strip_jobs(argv: list[str]) -> list[str]:
    """argv without --jobs N (the parallel processes get --jobs 1)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == '--jobs':
            skip = True
        elif not a.startswith('--jobs='):
            out.append(a)
    return out


def study_plan(path: str | None, profile: dict):
    """The plan the report is held to: `path`, else the profile's (none for 'none')."""
    from peco_mm.tooling.study_plan import REPO, read_plan
    path = path or profile.get('plan')
    if not path or path == 'none':
        return None
    full = Path(path) if Path(path).is_absolute() or Path(path).exists() else REPO / path
    if not full.is_file():
        raise SystemExit(f'--plan {path}: no such plan file (expected a docs/plans/*.md)')
    try:
        plan = read_plan(full)
    except ValueError as err:
        raise SystemExit(f'--plan: {err}') from None
    if plan.design.get('status', 'fixed') != 'fixed':
        raise SystemExit(f'{path}: a plan with status {plan.design["status"]!r} governs no '
                         'run; fix its figures from --tuning-only, set "status": "fixed" and '
                         'commit it before the replicates run')
    return plan


def main(argv=None) -> Path:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    use_device(args.device)
    import warnings
    warnings.filterwarnings('ignore')
    import peco_mm  # noqa: F401
    from peco_mm.supervisor.console import fmt_time
    from peco_mm.tooling.study_runs import Study
    from peco_mm.tooling.study_tables import write_report
    study = Study(args.work_dir, args.profile, args.replicates, args.perceptual,
                  args.bf16_targets)
    study.change(n_pretrain=args.n_pretrain, val_per_class=args.val_per_class,
                 per_class=args.labels_per_class,
                 iters=args.iters, rotate=args.rotation, knn_networks=args.knn_networks)
    if args.only_replicates is not None:
        study.only(args.only_replicates)
    study.prereg = None if args.tuning_only else study_plan(args.plan, study.p)
    study.wd.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    tuning(study, args.results)  # the rows' lr, once, before the replicates
    if args.tuning_only:
        return tuning_report(study)
    if args.jobs > 1 and args.only_replicates is None:
        run_jobs(strip_jobs(argv), study.replicates, args.jobs)
        study.plan = study.make_plan()  # the runs are kept now: the report's call
    print(f'{args.title}: profile {args.profile}, replicates {study.replicates}, '
          f'{len(study.plan.runs)} runs, work dir {study.wd}', flush=True)
    res = {r: replicate(study, r, args.results) for r in study.replicates}
    if args.only_replicates is not None:
        print(f'[{fmt_time(time.time() - study.t0)}] replicates {study.replicates} done',
              flush=True)
        return study.wd
    load = dict(start=load0, end=os.getloadavg(), cpus=os.cpu_count())
    # checked as written (study_report.write_checked): exits non-zero on a contradiction
    report = write_report(study, res, args.title, time.time() - study.t0, load)
    print(f'[{fmt_time(time.time() - study.t0)}] report: {report} (checked)', flush=True)
    if args.results:
        from peco_mm.tooling.study_results import publish
        print(f'results: {publish(study, args.results, argv, load)}', flush=True)
    return report


def tuning(study, results: str | None) -> None:
    """The tuning world's choices: read from `results` where a run kept them, else trained
    (and kept there)."""
    from peco_mm.tooling.study_tuning import stage_tuning
    kept = Path(results or '') / 'tuning.json'
    def grid(v):  # JSON keys back to numbers
        return dict(v, scores={float(k): s for k, s in v['scores'].items()})
    if results and kept.is_file():
        data = json.loads(kept.read_text())
        study.scratch_lr = {t: grid(v) for t, v in data['scratch'].items()}
        study.row_lr = {t: {i: grid(v) for i, v in rows.items()}
                        for t, rows in data['rows'].items()}
        study.matched_iters = data.get('matched_iters', {})
        study.plan = study.make_plan()
        return
    stage_tuning(study)
    if results:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(dict(scratch=study.scratch_lr, rows=study.row_lr,
                                        matched_iters=study.matched_iters), indent=1) + '\n')


def tuning_report(study) -> Path:
    """Print (and write to <work dir>/tuning.md) the tuning world's choices and its
    perceptual network's 1-NN shape accuracy on B's tuning half."""
    from peco_mm.tooling.study_runs import TUNING_SEED
    from peco_mm.tooling.study_stages import stage_networks
    from peco_mm.tooling.study_tuning import row_tuning_line, tuning_line
    m = stage_networks(study, TUNING_SEED)['perceptual']['metrics']
    lines = [f'- Perceptual network ({study.perceptual}) on the tuning world (seed '
             f'{TUNING_SEED}): 1-NN shape accuracy on B\'s tuning half {m["trained"]:.1f} %, the '
             f'same ViT randomly initialised {sum(m["random"]) / len(m["random"]):.1f} % '
             f'(chance {100 / 5:.1f} %).', tuning_line(study.scratch_lr),
             row_tuning_line(study.row_lr)]
    if study.matched_iters:
        from peco_mm.tooling.study_tables import matched_words
        lines.append(f'- Compute-matched scratch: {matched_words(study)}.')
    out = study.wd / 'tuning.md'
    out.write_text('\n'.join(filter(None, lines)) + '\n')
    print(out.read_text(), flush=True)
    return out


def replicate(study, r: int, results: str | None) -> dict:
    """Replicate r's results: its kept record in `results`, else its runs (then kept)."""
    from peco_mm.tooling.study_results import load_replicate, save_replicate
    from peco_mm.tooling.study_stages import run_replicate
    res = load_replicate(results, r) if results else None
    if res is not None:
        print(f'rep{r}: read from {results} (finished earlier)', flush=True)
        return res
    res = run_replicate(study, r)
    if results:
        save_replicate(results, r, res)
    return res


if __name__ == '__main__':
    main()
