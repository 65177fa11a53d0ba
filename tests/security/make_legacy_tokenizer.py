#!/usr/bin/env python3
"""Write tests/security/data/legacy_tokenizer.pth: a tiny tokenizer checkpoint as
tools/train.py wrote them before checkpoints stored the architecture as plain data (the
architecture only in the config text `meta.cfg`, with the flat tokenizer arguments of that
time), and legacy_tokenizer_codes.pt: an input and the codes that code computed for it. Kept
to show how the file was made: today's configs take part configs, and today's checkpoints
store them as data. tests/security/test_stored_config.py checks that the checkpoint still
loads to the same codes. It ran, from the repository root, as:

    .venv/bin/python tests/security/make_legacy_tokenizer.py
"""
import os.path as osp
import shutil
import sys
import tempfile

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
OUT = osp.join(ROOT, 'tests', 'security', 'data')
CONFIG = """
_base_ = '{root}/configs/peco/tokenizer_vqvae_in1k.py'
model = dict(base_channels=4, channel_mult=(1, 2, 2), num_res_blocks=1, num_embeddings=16,
             embed_dims=8, decay=0.9, perceptual_weight=0.0)
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root='{data}', data_prefix='train',
                 pipeline=train_pipeline))
val_dataloader = val_cfg = val_evaluator = None
test_dataloader = test_cfg = test_evaluator = None
param_scheduler = []
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=2)
default_hooks = dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2,
                                     save_optimizer=False))
custom_hooks = []
randomness = dict(seed=0)
log_processor = dict(by_epoch=False)
"""


def main() -> None:
    sys.path.insert(0, ROOT)
    from peco_mm.supervisor.launch import run
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.tooling.demo_data import make_class_folder
    tmp = tempfile.mkdtemp()
    try:
        make_class_folder(osp.join(tmp, 'data', 'train'), per_class=2, size=32)
        cfg = osp.join(tmp, 'legacy_tokenizer.py')
        with open(cfg, 'w') as f:
            f.write(CONFIG.format(root=ROOT, data=osp.join(tmp, 'data')))
        run(cfg, osp.join(tmp, 'work'))
        shutil.copy(osp.join(tmp, 'work', 'iter_2.pth'), osp.join(OUT, 'legacy_tokenizer.pth'))
    finally:
        shutil.rmtree(tmp)
    tok = FrozenPeCoTokenizer(osp.join(OUT, 'legacy_tokenizer.pth'))
    torch.manual_seed(0)
    img = torch.rand(2, 3, 32, 32) * 2 - 1  # (B, 3, H, W) in [-1, 1]
    torch.save(dict(img=img, codes=tok.encode(img)), osp.join(OUT, 'legacy_tokenizer_codes.pt'))


if __name__ == '__main__':
    main()
