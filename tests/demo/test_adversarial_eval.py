"""tools/adversarial_eval.py: BIM / MI-FGSM stay in the eps-ball and raise the loss, and the
tool runs on the tiny classifier config (smoke)."""
import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT, load_tool, run_tool


@pytest.mark.parametrize('method', ['bim', 'mifgsm'])
def test_attack_stays_in_budget_and_raises_loss(method):
    tool = load_tool('adversarial_eval')
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))

    def logits(z):
        return net((z - 127.5) / 64)

    x = torch.rand(6, 3, 8, 8) * 255
    y = torch.arange(6) % 4
    xa = tool.attack(logits, x, y, method, eps=2.0, iters=20)
    assert (xa - x).abs().max() <= 2.0 + 1e-4 and xa.min() >= 0 and xa.max() <= 255
    # a linear model's loss is convex in x: 20 signed-gradient steps must raise it clearly
    with torch.no_grad():
        assert F.cross_entropy(logits(xa), y) > F.cross_entropy(logits(x), y) + 0.01
    # with a budget of 0 nothing moves
    assert torch.equal(tool.attack(logits, x, y, method, eps=0.0, iters=3), x)
    with pytest.raises(ValueError, match='allowed'):
        tool.attack(logits, x, y, 'pgd', eps=2.0, iters=1)


def test_tool_smoke_on_tiny_classifier(tmp_path, image_folder):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    tool = load_tool('adversarial_eval')
    cfg = tmp_path / 'cls.py'
    cfg.write_text(f"_base_ = '{ROOT}/configs/demo/finetune_tiny_cls.py'\n"
                   f"test_dataloader = dict(dataset=dict(data_root='{image_folder}'))\n")
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(cfg)).model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict()}, tmp_path / 'ckpt.pth')
    out = tmp_path / 'res.json'
    res = tool.main([str(cfg), str(tmp_path / 'ckpt.pth'), '--iters', '3', '--eps', '16',
                     '--out', str(out), '--device', 'cpu'])
    assert res['images'] == 12 and json.loads(out.read_text()) == res
    assert res['top1_bim'] <= res['top1_clean'] and res['top1_mifgsm'] <= res['top1_clean']
    # two torchrun processes: 6 images each, none twice, the same counts (an attack's step
    # per image does not depend on the batch: sign and L1-normalised gradients), a progress bar
    out2 = tmp_path / 'res2.json'
    proc = run_tool([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
                     '--master_port', str(29500 + os.getpid() % 1000 + 1),
                     'tools/adversarial_eval.py', cfg, tmp_path / 'ckpt.pth', '--iters', '3',
                     '--eps', '16', '--out', out2, '--device', 'cpu'], timeout=300)
    assert json.loads(out2.read_text()) == dict(res, processes=2)
    assert 'adversarial eval: 100%' in proc.stderr
    # clean accuracy is the model's own prediction rate on the 12 held-out images
    init_default_scope('mmpretrain')
    same = tool.main([str(cfg), str(tmp_path / 'ckpt.pth'), '--iters', '1', '--eps', '0',
                      '--device', 'cpu'])
    assert same['top1_bim'] == same['top1_clean'] == res['top1_clean']
    with pytest.raises(SystemExit, match='not found'):
        tool.main([str(cfg), str(tmp_path / 'nope.pth')])
