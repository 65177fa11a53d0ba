"""A diverging run stops at the first non-finite loss with a message that names the
iteration and the loss term, in pretraining and in a dense task, and never writes NaN
weights; with `nonfinite_loss.max_skips` it skips such steps instead."""
import math

import pytest
import torch

from tests.dense.conftest import TINY_MASK_RCNN, TINY_UPERNET, write_cfg
from tests.mim.conftest import (MAE_MASK_STEP, fitted_tokenizer, halves_images, save_tokenizer,
                                write_config)
from tests.reliability.conftest import run_log, write_cls

from peco_mm.checkpoint import read_checkpoint

# PeCo_MAE's decoder at toy size (as the pretraining tests use it)
MAE_NECK = "neck=dict(grid=4, embed_dims=32, num_layers=1, num_heads=4)"


def assert_finite_checkpoints(work_dir):
    for path in work_dir.glob('*.pth'):
        state = read_checkpoint(path, map_location='cpu')['state_dict']
        bad = [k for k, v in state.items() if v.is_floating_point() and not v.isfinite().all()]
        assert not bad, f'{path.name} holds non-finite weights: {bad[:3]}'


@pytest.fixture(scope='module')
def peco_parts(tmp_path_factory):
    from PIL import Image
    root = tmp_path_factory.mktemp('nan_peco')
    imgs = halves_images(32)
    (root / 'data').mkdir()
    for i, img in enumerate(imgs):
        Image.fromarray(img).save(root / 'data' / f'{i:03d}.png')
    return root / 'data', save_tokenizer(fitted_tokenizer(imgs), str(root / 'tok.pth'))


@pytest.mark.parametrize('base, extra', [
    ('pretrain_vitb_in1k_300e.py', {}),
    ('pretrain_mae_vitb_in1k_800e.py', dict(mask=MAE_MASK_STEP, model_extra=MAE_NECK)),
], ids=['peco', 'peco_mae'])
def test_diverging_pretraining_stops(tmp_path, peco_parts, isolated_mmengine, base, extra):
    from peco_mm.supervisor.launch import run
    data, tok = peco_parts
    cfg = write_config(tmp_path / 'peco.py', base, tok, str(data), iters=30, **extra)
    work = tmp_path / 'work'
    opts = {'optim_wrapper.optimizer.lr': 1e6, 'optim_wrapper.clip_grad': None,
            'default_hooks.checkpoint.interval': 1, 'default_hooks.checkpoint.max_keep_ckpts': 3}
    with pytest.raises(FloatingPointError) as err:
        run(cfg, str(work), opts)
    msg = str(err.value)
    assert msg.startswith('Non-finite loss at iteration ') and 'in loss' in msg
    it = int(msg.split('iteration ')[1].split()[0])
    assert 1 < it < 30 and 'lower learning rate' in msg.replace('a lower', 'lower')
    assert 'check_dataset' in msg and 'bf16' in msg
    assert msg in run_log(work)  # logged too
    saved = sorted(int(p.stem.split('_')[1]) for p in work.glob('iter_*.pth'))
    assert saved and saved[-1] == it - 1  # every finished step saved, the bad one not
    assert_finite_checkpoints(work)


@pytest.mark.parametrize('model, template, data, length, where', [
    ('upernet', TINY_UPERNET, 'ade_root', dict(iters=20), r'in (decode\.loss_ce|aux\.loss_ce)'),
    ('mask_rcnn', TINY_MASK_RCNN, 'coco_root', dict(epochs=3), r'\(epoch \d+\) in [a-z_]*loss'),
], ids=['upernet', 'mask_rcnn'])
def test_diverging_dense_model_stops(model, template, data, length, where, tmp_path, request,
                                     isolated_mmengine):
    from peco_mm.supervisor.launch import run
    cfg = write_cfg(tmp_path / f'{model}.py', template, data=request.getfixturevalue(data),
                    lr=1e6, **length)
    work = tmp_path / 'work'
    with pytest.raises(FloatingPointError, match=r'Non-finite loss at iteration \d+ ' + where):
        run(str(cfg), str(work), {'default_hooks.checkpoint.interval': 1,
                                  'optim_wrapper.clip_grad': None})
    assert_finite_checkpoints(work)


def test_skip_nonfinite_steps_up_to_max(tmp_path, cls_data, isolated_mmengine):
    """A loss made NaN at chosen steps: two skipped (weights untouched), the third stops."""
    from mmengine.hooks import Hook

    from peco_mm.supervisor.launch import run
    from peco_mm.registry import HOOKS

    @HOOKS.register_module(force=True)
    class PoisonLossAt(Hook):  # makes the classification loss NaN at iterations 2, 3, 5
        def before_train(self, runner):
            model = runner.model
            loss = model.loss

            def poisoned(*a, **k):
                out = loss(*a, **k)
                if runner.iter + 1 in (2, 3, 5):
                    out['loss'] = out['loss'] * math.nan
                return out
            model.loss = poisoned

    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=6, interval=100,
                    extra="custom_hooks = [dict(type='PoisonLossAt')]\n"
                          "nonfinite_loss = dict(max_skips=2)\n")
    with pytest.raises(FloatingPointError, match=r'iteration 5 in loss \(loss=nan'):
        run(str(cfg), str(tmp_path / 'work'))
    log = run_log(tmp_path / 'work')
    assert 'iteration 2 in loss' in log and 'step skipped (1 of max_skips=2)' in log
    assert 'iteration 3 in loss' in log and 'step skipped (2 of max_skips=2)' in log


def test_nan_weights_are_never_saved(tmp_path, cls_data, isolated_mmengine):
    """Weights turned NaN by a finite loss (e.g. an overflowing update): the checkpoint at
    that step is refused and the earlier one stays."""
    from mmengine.hooks import Hook

    from peco_mm.supervisor.launch import run
    from peco_mm.registry import HOOKS

    @HOOKS.register_module(force=True)
    class PoisonWeightsAt(Hook):
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            if runner.iter + 1 == 3:
                with torch.no_grad():
                    runner.model.head.fc.weight[0, 0] = math.inf

    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=4, interval=1, keep=1,
                    extra="custom_hooks = [dict(type='PoisonWeightsAt', priority='HIGH')]\n")
    with pytest.raises(FloatingPointError, match=r'not saving iter_3.pth: 1 weight tensors hold '
                       r'NaN/inf \(head.fc.weight\); the earlier checkpoints are kept'):
        run(str(cfg), str(tmp_path / 'work'))
    assert [p.name for p in (tmp_path / 'work').glob('*.pth')] == ['iter_2.pth']
    assert_finite_checkpoints(tmp_path / 'work')


def test_tokenizer_skips_through_the_shared_guard(tmp_path, isolated_mmengine):
    """The tokenizer stage has no guard of its own: encoder outputs made NaN at iterations 2,
    3 and 5 are skipped twice (max_skips=2, the EMA codebook stays finite) and stop the run
    at iteration 5, with the shared guard's message."""
    from mmengine.hooks import Hook

    from peco_mm.supervisor.launch import run
    from peco_mm.registry import HOOKS
    from peco_mm.tooling.demo_data import make_class_folder
    from tests.reliability.test_resume_mismatch import TOKENIZER, tokenizer_opts

    @HOOKS.register_module(force=True)
    class PoisonEncoderAt(Hook):
        def before_train(self, runner):
            def poison(module, args, out):
                return out * math.nan if runner.iter + 1 in (2, 3, 5) else out
            runner.model.encoder.register_forward_hook(poison)

    data = make_class_folder(tmp_path / 'data' / 'train', size=64, per_class=2).parent
    opts = dict(tokenizer_opts(data, 32, iters=6), custom_hooks=[dict(type='PoisonEncoderAt')],
                nonfinite_loss=dict(max_skips=2))
    work = tmp_path / 'work'
    with pytest.raises(FloatingPointError, match=r'^Non-finite loss at iteration 5 in '):
        run(TOKENIZER, str(work), opts)
    log = run_log(work)
    assert 'iteration 2 in' in log and 'step skipped (1 of max_skips=2)' in log
    assert 'iteration 3 in' in log and 'step skipped (2 of max_skips=2)' in log
    assert (work / 'iter_4.pth').is_file()  # every finished step saved, skipped ones too
    assert_finite_checkpoints(work)  # the codebook included


def test_nonfinite_weights_loaded_are_refused(tmp_path, cls_data, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=1, interval=1)
    run(str(cfg), str(tmp_path / 'good'))
    state = read_checkpoint(tmp_path / 'good' / 'iter_1.pth')['state_dict']
    ckpt = {'state_dict': state, 'meta': {}}
    ckpt['state_dict']['head.fc.weight'][0, 0] = math.nan
    ckpt['state_dict']['backbone.blocks.0.mlp.fc1.bias'][1] = math.inf
    torch.save(ckpt, tmp_path / 'bad.pth')
    with pytest.raises(FloatingPointError) as err:
        run(str(cfg), str(tmp_path / 'work'), {'load_from': str(tmp_path / 'bad.pth')})
    assert str(err.value).startswith(
        'the model holds NaN/inf before training starts: 2 tensors (backbone.blocks.0.mlp.fc1.'
        f'bias, head.fc.weight). They were loaded from load_from={tmp_path / "bad.pth"}; ')
    backbone = {k[len('backbone.'):]: v for k, v in ckpt['state_dict'].items()
                if k.startswith('backbone.')}
    torch.save({'state_dict': backbone}, tmp_path / 'bad_backbone.pth')
    init = dict(_delete_=True, type='Pretrained', checkpoint=str(tmp_path / 'bad_backbone.pth'))
    with pytest.raises(FloatingPointError, match=r'1 tensors \(backbone.blocks.0.mlp.fc1.bias\)'
                       r'\. They were loaded from model.backbone.init_cfg.checkpoint='):
        run(str(cfg), str(tmp_path / 'work2'), {'model.backbone.init_cfg': init})
    assert not list(tmp_path.glob('work*/*.pth'))


def test_the_guard_takes_the_place_of_each_optimizer_wrapper():
    """One wrapper or a dict of them: each type gets its NonFiniteGuard subclass (once); the
    guarded wrapper skips a NaN step (weights and gradients untouched) and takes a finite
    one as its parent does."""
    from mmengine.optim import OptimWrapper

    from peco_mm.engine.optimizers import NonFiniteGuard, guard_optim_wrapper_cfg
    from peco_mm.registry import OPTIM_WRAPPERS
    one = dict(optimizer=dict(type='SGD', lr=0.1))
    guard_optim_wrapper_cfg(one)
    assert one['type'] == 'NonFiniteGuardOptimWrapper'
    several = dict(constructor='MultiOptimWrapperConstructor',
                   generator=dict(type='AmpOptimWrapper', optimizer=dict(type='SGD')),
                   discriminator=dict(optimizer=dict(type='SGD')))
    guard_optim_wrapper_cfg(several)
    guard_optim_wrapper_cfg(several)  # idempotent
    assert (several['generator']['type'], several['discriminator']['type']) == (
        'NonFiniteGuardAmpOptimWrapper', 'NonFiniteGuardOptimWrapper')
    assert several['constructor'] == 'MultiOptimWrapperConstructor'

    w = torch.nn.Parameter(torch.ones(3))
    ow = OPTIM_WRAPPERS.build(dict(type=one['type'],
                                   optimizer=torch.optim.SGD([w], lr=0.1)))
    assert isinstance(ow, NonFiniteGuard) and isinstance(ow, OptimWrapper)
    ow.update_params((w * math.nan).sum())
    assert torch.equal(w.detach(), torch.ones(3)) and w.grad is None
    assert ow.pop_nonfinite_steps() == 1 and ow.pop_nonfinite_steps() == 0
    ow.update_params((w * 2).sum())  # d/dw = 2: w <- 1 - 0.1 * 2
    torch.testing.assert_close(w.detach(), torch.full((3, ), 0.8))
    assert ow.pop_nonfinite_steps() == 0
