"""A misspelt key of a hook or of the backbone is refused before training starts, naming the
key and the nearest valid one (not ignored, and not a failure at the first save)."""
import pytest
from mmengine.config import Config

from tests.reliability.conftest import write_cls


# the architecture as a dict, as the demo's dense configs give it
ARCH_DICT = ('model = dict(backbone=dict(arch=dict(_delete_=True, embed_dims=64, num_layers=2, '
             'num_heads=4)))\n')


@pytest.mark.parametrize('option, message', [
    ({'model.backbone.arch.num_layer': 2},
     'model.backbone.arch.num_layer: unknown key for PeCoViT arch; did you mean '
     'model.backbone.arch.num_layers? Allowed: embed_dims, num_layers, num_heads, mlp_ratio.'),
    ({'default_hooks.checkpoint.intervl': 5},
     'default_hooks.checkpoint.intervl: unknown key for CheckpointHook; did you mean '
     'default_hooks.checkpoint.interval? Allowed: interval, by_epoch, '),
    ({'model.backbone.drop_path_rat': 0.1},
     'model.backbone.drop_path_rat: unknown key for PeCoViT; did you mean '
     'model.backbone.drop_path_rate? '),
    ({'optim_wrapper.optimizer.weight_decy': 0.1},
     'optim_wrapper.optimizer.weight_decy: unknown key for AdamW; did you mean '
     'optim_wrapper.optimizer.weight_decay? Allowed: lr, betas, eps, weight_decay, '),
    ({'optim_wrapper.clip_gard': dict(max_norm=1.0)},  # AmpOptimWrapper's **kwargs included
     'optim_wrapper.clip_gard: unknown key for AmpOptimWrapper; did you mean '
     'optim_wrapper.clip_grad? Allowed: loss_scale, dtype, use_fsdp, optimizer, '
     'accumulative_counts, clip_grad, constructor, paramwise_cfg.'),
    ({'train_dataloader.num_worker': 0},
     'train_dataloader.num_worker: unknown key for a data loader; did you mean '
     'train_dataloader.num_workers? '),
    ({'train_cfg.max_iter': 3},
     'train_cfg.max_iter: unknown key for IterBasedTrainLoop; did you mean train_cfg.max_iters? '
     'Allowed: max_iters, val_begin, val_interval, dynamic_intervals.'),
    ({'env_cfg.dist_cfg.timout': 60},
     'env_cfg.dist_cfg.timout: unknown key for env_cfg.dist_cfg; did you mean '
     'env_cfg.dist_cfg.timeout? Allowed: backend, init_backend, init_method, timeout, '),
    ({'default_hooks.chekpoint.interval': 5},  # a misspelt hook name: a dict without type
     'default_hooks.chekpoint: no hook of that name and no type to build one; did you mean '
     'default_hooks.checkpoint? Default hooks: checkpoint, logger, '),
    ({'custom_hooks': [dict(type='EMAHok')]},
     "custom_hooks.0.type='EMAHok': no hook of that name is registered (scope 'mmpretrain'; "
     "custom_imports must import the module that registers it). Did you mean 'EMAHook'?"),
], ids=['arch', 'checkpoint_hook', 'backbone', 'optimizer', 'optim_wrapper', 'dataloader',
        'loop', 'dist_cfg', 'hook_name', 'hook_type'])
def test_typo_refused_before_training(tmp_path, cls_data, isolated_mmengine, option, message):
    from peco_mm.supervisor.launch import run
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=2, interval=1, extra=ARCH_DICT)
    with pytest.raises(ValueError) as err:
        run(str(cfg), str(tmp_path / 'work'), option)
    assert str(err.value).startswith(message)
    assert not list(tmp_path.glob('work/*/*.log'))  # no runner, no training


def test_custom_hook_typo_and_valid_configs_pass():
    from peco_mm.supervisor.config_keys import check_config_keys
    cfg = Config(dict(default_scope='mmpretrain', custom_hooks=[
        dict(type='CodebookHealthHook', interval=5, usage_treshold=0.2)]))
    with pytest.raises(ValueError, match=r'custom_hooks.0.usage_treshold: unknown key for '
                       r'CodebookHealthHook; did you mean custom_hooks.0.usage_threshold\?'):
        check_config_keys(cfg)
    cfg.custom_hooks[0].pop('usage_treshold')
    cfg.default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, priority='LOW'),
                             logger=None)
    check_config_keys(cfg)  # accepted


def test_arch_dict_typo_in_the_class():
    from peco_mm.models import PeCoViT
    with pytest.raises(ValueError, match=r"arch dict has unknown keys \['num_layer'\] \(did you "
                       r"mean 'num_layers'\?\)"):
        PeCoViT(arch=dict(embed_dims=64, num_layers=2, num_heads=4, num_layer=1), img_size=32)
