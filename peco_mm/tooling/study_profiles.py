"""The study's profiles (tools/study.py, `make demo`) as plain data: their replicates, world
sizes, lambdas, downstream rows and iterations per stage, the stages' relative costs and the
perceptual networks. Standard library only and no import of its own, so that `tools/study.py
--help` can read it as a file without importing peco_mm (and torch); study_runs.py re-exports
every name.
"""
CONFIG_ROOT = 'work_dirs/study'  # where configs/study/* read and write; moved per replicate

_WORLD = dict(per_class=10, held_out=5, rotate=False)
# the scratch rows' lr grid per task, each trained once on the tuning world (study_tuning.py)
SCRATCH_LR = dict(cls=(1e-3, 2e-3, 5e-3), seg=(5e-4, 1e-3, 2e-3))
# per profile: replicates, world sizes, lambdas, the downstream rows, iterations per stage;
# knn_networks: self-supervised networks trained only for their 1-NN shape accuracy beside the
# perceptual loss's network (tools/study.py --knn-networks; only the quick profile's tests
# train one by default: at 900 iterations MoCo v3 costs minutes per replicate on 2 cores)
# what the full and demo profiles share: every row, the supervised perceptual network
# the plan each profile's report is held to (docs/plans/; tools/study.py --plan)
SUPERVISED_PLAN = 'docs/plans/shape_world_supervised.md'
_ROWS = dict(_WORLD, lambdas=(0.0, 1.0), perceptual='supervised', judge_per_class=300,
             plan=SUPERVISED_PLAN,
             inits=('peco', 'pixel', 'clsloss', 'dvae', 'scratch', 'scratch_matched'),
             scratch_lr=SCRATCH_LR)
PROFILES = {
    'full': dict(_ROWS, replicates=8, n_pretrain=5000, val_per_class=30, n_pairs=200,
                 iters=dict(perceptual=600, mocov3=900, judge=400, tokenizer=200,
                            pretrain=250, cls=240, seg=200)),
    # the demo: the rows of the primary endpoints and scratch (Table 6's control and the dVAE,
    # about 3 of its minutes on 2 cores, run in the full profile)
    'demo': dict(_ROWS, replicates=3, n_pretrain=2000, val_per_class=20, n_pairs=100,
                 inits=('peco', 'pixel', 'scratch', 'scratch_matched'),
                 iters=dict(perceptual=400, mocov3=150, judge=200, tokenizer=60,
                            pretrain=80, cls=160, seg=120)),
    'quick': dict(_WORLD, replicates=2, lambdas=(0.0, 1.0), perceptual='supervised',
                  n_pretrain=40, val_per_class=2, judge_per_class=2, n_pairs=6, per_class=2,
                  # every pretrained row and scratch at the lr of a 2-point grid; the
                  # compute-matched row: tests of the plan
                  inits=('peco', 'pixel', 'clsloss', 'dvae', 'scratch'),
                  scratch_lr=dict(cls=(1e-3, 2e-3), seg=(1e-3, 2e-3)), knn_networks=('pairs', ),
                  iters=dict(perceptual=2, mocov3=2, judge=2, tokenizer=2, pretrain=2, cls=2,
                             seg=2)),
}
# the label-free design (docs/plans/): the perceptual network learns without any label (MoCo v3
# on the unlabeled images), the random network's tokenizer is carried downstream, and every
# downstream row's fine-tuning lr is chosen from one grid on a tuning world that runs the
# whole chain once (seed 1000; `row_lr`, study_tuning.py), shared by the replicates
ROW_LR = dict(cls=(1e-3, 2e-3, 5e-3), seg=(5e-4, 1e-3, 2e-3))
LABEL_FREE_PLAN = 'docs/plans/shape_world_label_free.md'
PROFILES['label_free'] = dict(
    PROFILES['full'], replicates=12, perceptual='mocov3', scratch_lr=None, row_lr=ROW_LR,
    inits=('peco', 'pixel', 'random', 'scratch', 'scratch_matched'), plan=LABEL_FREE_PLAN)
PROFILES['quick_label_free'] = dict(  # its tests: the quick sizes, the same rows and tuning
    PROFILES['quick'], perceptual='mocov3', scratch_lr=None, knn_networks=(), replicates=1,
    row_lr=dict(cls=(1e-3, 2e-3), seg=(1e-3, )),
    inits=('peco', 'pixel', 'random', 'scratch', 'scratch_matched'))
# relative seconds per iteration of each stage, for the ETA before any run has finished
COST = dict(perceptual=0.35, mocov3=1.0, judge=0.5, tokenizer=1.0, pretrain=0.8, cls=0.2,
            seg=0.35)
PERCEPTUAL = ('supervised', 'mocov3', 'pairs')
