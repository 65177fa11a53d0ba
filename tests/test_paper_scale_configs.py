"""The paper-scale configs' memory and precision levers: bf16 autocast, gradient checkpointing
in ViT-L/H, gradient accumulation that keeps the paper's total batch (and the arithmetic the
comments state), and FSDP variants whose strategy mmengine builds and whose wrap policy makes
one FSDP unit per transformer block at the real ViT-L/H width."""
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

ROOT = Path(__file__).resolve().parents[1]
PECO = ROOT / 'configs' / 'peco'
# everything but the tokenizers (another recipe: Adam, fp32 perceptual loss) and the configs
# that only evaluate (tools/test.py builds no optimizer)
EVAL_ONLY = ('recon_deit_tiny_in1k', 'recon_deit_tiny_dalle_in1k')
PAPER_SCALE = sorted(p for p in PECO.glob('*.py')
                     if not p.stem.startswith('tokenizer_') and p.stem not in EVAL_ONLY)
COCO = ('mask_rcnn_', 'cascade_mask_rcnn_')


def _name(p: Path) -> str:
    return p.stem


@pytest.mark.parametrize('path', PAPER_SCALE, ids=_name)
def test_mixed_precision_and_checkpointing(path):
    cfg = Config.fromfile(str(path))
    ow = cfg.optim_wrapper
    assert ow.type == 'AmpOptimWrapper', f'{path.name}: optim_wrapper.type={ow.type}'
    # COCO: mmcv's RoIAlign has fp32 / fp16 CUDA kernels only, so fp16 (mmengine's default)
    want = None if path.stem.startswith(COCO) else 'bfloat16'
    assert ow.get('dtype') == want, f'{path.name}: optim_wrapper.dtype={ow.get("dtype")}'
    bb = cfg.model.backbone
    if bb.get('arch') in ('large', 'huge'):
        assert bb.get('with_cp') is True, f'{path.name}: ViT-L/H without with_cp'


ACCUM = [(PECO / 'pretrain_vitl_in1k_800e_accum.py', 2048),
         (PECO / 'pretrain_vith_in1k_800e_accum.py', 2048),
         (PECO / 'finetune_vith_448_in1k.py', 1024)]


@pytest.mark.parametrize('path,total', ACCUM, ids=lambda x: getattr(x, 'stem', str(x)))
def test_accumulation_keeps_the_paper_batch(path, total):
    cfg = Config.fromfile(str(path))
    n = cfg.optim_wrapper.accumulative_counts
    b = cfg.train_dataloader.batch_size
    assert n > 1 and 8 * b * n == total
    # the comment states the same arithmetic: "# <total> = 8 GPUs x <b> x <n>"
    said = re.findall(r'# (\d+) = (\d+) GPUs x (\d+) x (\d+)', path.read_text())
    assert said == [(str(total), '8', str(b), str(n))], said
    # the config it modifies reaches the same total batch without accumulation, at the same
    # lr; mmengine's auto_scale_lr (GPUs x batch_size, accumulation not counted) stays off
    base_file = re.search(r"_base_ = '\./(\w+\.py)'", path.read_text()).group(1)
    base = Config.fromfile(str(PECO / base_file))
    assert 8 * base.train_dataloader.batch_size * base.optim_wrapper.get(
        'accumulative_counts', 1) == total
    assert cfg.optim_wrapper.optimizer.lr == base.optim_wrapper.optimizer.lr
    assert not cfg.auto_scale_lr.get('enable', False)


FSDP = sorted(PECO.glob('*_fsdp.py'))


@pytest.fixture
def single_process_group():
    import torch.distributed as dist
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_fsdp_variants_exist_for_vitl_and_vith():
    assert [p.stem for p in FSDP] == ['pretrain_vith_in1k_800e_fsdp',
                                      'pretrain_vitl_in1k_800e_fsdp']


@pytest.mark.parametrize('path', FSDP, ids=_name)
# mmengine's FSDPStrategy asks MMLogger for the run's logger again with its arguments
@pytest.mark.filterwarnings('ignore:.*instance named of .* has been created:UserWarning')
def test_fsdp_config_builds(path, single_process_group, tmp_path):
    from mmengine.model.wrappers import MMFullyShardedDataParallel
    from mmengine.registry import STRATEGIES
    from torch.distributed.fsdp import FullyShardedDataParallel, StateDictType

    from peco_mm.models.vit import PeCoViT
    from peco_mm.models.vit_config import ARCH_ZOO
    cfg = Config.fromfile(str(path))
    base = Config.fromfile(str(path).replace('_fsdp', ''))
    # the recipe is the non-sharded config's, except clipping (per-shard under FSDP)
    assert cfg.runner_type == 'FlexibleRunner'
    assert cfg.model == base.model and cfg.train_dataloader == base.train_dataloader
    assert cfg.train_dataloader.batch_size * 8 == 2048
    ow = cfg.optim_wrapper
    assert (ow.type, ow.dtype, ow.clip_grad) == ('AmpOptimWrapper', 'bfloat16', None)
    assert base.optim_wrapper.clip_grad == dict(max_norm=3.0)

    # mmengine builds the strategy from the config: a full (rank-0) state dict on save
    # (a strategy writes its log under work_dir, 'work_dirs' of the current folder by default)
    strategy_cfg = dict(cfg.strategy, work_dir=str(tmp_path))
    strategy = STRATEGIES.build(strategy_cfg)
    assert type(strategy).__name__ == 'FSDPStrategy'
    assert strategy.state_dict_type == StateDictType.FULL_STATE_DICT
    wrapper_cfg = cfg.strategy.model_wrapper.copy()
    assert wrapper_cfg.use_orig_params is True

    # the model from the config, one block at the real width (tiny depth and size), wrapped
    # as FlexibleRunner wraps it: the size policy makes exactly that block one FSDP unit
    bb = {k: v for k, v in cfg.model.backbone.items() if k != 'type'}
    arch = dict(ARCH_ZOO[bb.pop('arch')], num_layers=1)
    bb.update(arch=arch, img_size=2 * bb['patch_size'])  # 2x2 patches
    vit = PeCoViT(**bb)
    block = sum(p.numel() for p in vit.blocks[0].parameters())
    mlp = sum(p.numel() for p in vit.blocks[0].mlp.parameters())
    threshold = wrapper_cfg.auto_wrap_policy.min_num_params
    assert mlp < threshold <= block, (mlp, threshold, block)
    model = MMFullyShardedDataParallel(module=vit, device_id=torch.device('cpu'), **wrapper_cfg)
    units = [n.replace('_fsdp_wrapped_module.', '') for n, m in model.named_modules()
             if isinstance(m, FullyShardedDataParallel)]
    assert units == ['', 'blocks.0']
    x = torch.randn(1, 3, 2 * bb['patch_size'], 2 * bb['patch_size'])
    assert model(x)[0].shape == (1, arch['embed_dims'])
