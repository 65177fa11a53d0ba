"""One checkpoint path: `peco_mm/checkpoint/` reads files (no model imported, no mmengine
private loader), `PeCoViT.checkpoint_filter` is the one table adapter, and
`PeCoViT.from_checkpoint` builds and loads a ViT from any supported file."""
import ast
from pathlib import Path

import pytest
import timm
import torch

import peco_mm.checkpoint
from peco_mm.checkpoint import read_checkpoint, select_prefix, strip_prefix, unwrap
from peco_mm.checkpoint.inert import InertStandIn
from peco_mm.layers import resize_rel_pos_table
from peco_mm.models import PeCoViT

CHECKPOINT_DIR = Path(peco_mm.checkpoint.__file__).parent
KW = dict(arch=dict(embed_dims=32, num_layers=2, num_heads=2), img_size=32, patch_size=8)


def test_the_config_reader_is_pure_and_no_private_loader_is_used():
    """Reading stored config text imports nothing of the project (the package's place in the
    layers is checked by tests/test_layering.py), and no module reads weights through
    mmengine's private `_load_checkpoint`."""
    tree = ast.parse((CHECKPOINT_DIR / 'stored_config.py').read_text())
    roots = {(n.module or '').split('.')[0] for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom)}
    roots |= {a.name.split('.')[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
              for a in n.names}
    assert roots <= {'__future__', 'ast'}, roots
    for f in list(CHECKPOINT_DIR.glob('*.py')) + list(CHECKPOINT_DIR.parent.glob('models/*.py')):
        assert '_load_checkpoint' not in f.read_text(), f


def test_prefix_helpers():
    sd = {'module.backbone.a': 1, 'module.head.b': 2, 'c': 3}
    assert strip_prefix(sd, 'module.') == {'backbone.a': 1, 'head.b': 2, 'c': 3}
    dropped = {}
    assert select_prefix(strip_prefix(sd, 'module.'), 'backbone.', dropped, 'head') == {'a': 1}
    assert dropped == {'head.b': 'head', 'c': 'head'}
    t = {'w': torch.zeros(1)}
    assert unwrap({'state_dict': t, 'meta': {}}) == (t, "ckpt['state_dict']")
    assert unwrap({'model': t}) == (t, "ckpt['model']")
    assert unwrap(t) == (t, 'ckpt')


class NotATensor:
    def __init__(self, x: int = 3) -> None:
        self.x = x


def test_read_checkpoint_safe_by_default(tmp_path):
    from mmengine.logging import HistoryBuffer, MessageHub
    hub = MessageHub('test_read_checkpoint')
    hub.update_scalar('train/loss', 1.0)
    ok = tmp_path / 'mmengine.pth'
    from tests.checkpoint_forms import save_old_form  # as the launcher saved before plain data
    save_old_form(ok, hub, state_dict={'w': torch.ones(2)}, meta={'epoch': 1})
    loaded = read_checkpoint(ok)
    torch.testing.assert_close(loaded['state_dict']['w'], torch.ones(2))
    assert isinstance(loaded['message_hub']['log_scalars']['train/loss'], HistoryBuffer)
    bad = tmp_path / 'pickled.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'args': NotATensor()}, bad)
    with pytest.raises(ValueError, match=r'pickled.pth holds pickled Python objects'):
        read_checkpoint(bad)
    warnings = []  # the converter's reading: the object kept as an inert stand-in, not run
    args = read_checkpoint(bad, inert_objects=True, warn=warnings.append)['args']
    assert isinstance(args, InertStandIn) and args.pickled_name.endswith('NotATensor')
    assert args.state == {'x': 3} and not isinstance(args, NotATensor)
    assert 'NotATensor read as inert stand-ins' in warnings[0]
    with pytest.raises(FileNotFoundError, match='nowhere.pth'):
        read_checkpoint(tmp_path / 'nowhere.pth')


class PickledExec:
    def __reduce__(self):
        return exec, ('raise SystemExit(3)',)


@pytest.mark.parametrize('inert', [False, True])
def test_a_refused_global_is_called_unsafe_without_torchs_allow_list_hint(tmp_path, inert):
    """torch's own message asks to allow-list the global (add_safe_globals([exec])), which
    would run the payload; the refusal says the file is unsafe instead."""
    bad = tmp_path / 'exec.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'x': PickledExec()}, bad)
    with pytest.raises(ValueError) as err:
        read_checkpoint(bad, inert_objects=inert)
    text = str(err.value)
    assert 'exec.pth holds pickled Python objects' in text and 'GLOBAL exec' in text
    assert 'unsafe' in text and 'never allow-list' in text
    assert 'safe_globals' not in text and 'weights_only' not in text


@torch.no_grad()
def test_from_checkpoint_timm_file(tmp_path):
    torch.manual_seed(0)
    src = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=0).eval()
    for p in src.parameters():
        p.normal_(0, 0.02)
    torch.save(src.state_dict(), tmp_path / 'timm.pth')
    model = PeCoViT.from_checkpoint(str(tmp_path / 'timm.pth'), num_heads=2).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model.forward_features(x), src.forward_features(x), atol=1e-5,
                               rtol=0)


def test_checkpoint_filter_is_the_one_adapter():
    src = PeCoViT(rel_pos_bias='shared', **KW)  # 4x4 grid, shared table (pretraining)
    table = torch.randn_like(src.rel_pos_bias.relative_position_bias_table)
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    sd['rel_pos_bias.relative_position_bias_table'] = table
    dst = PeCoViT(rel_pos_bias='per_block', **{**KW, 'img_size': 48})  # 6x6, per block
    out = dst.checkpoint_filter(dict(sd))
    assert 'rel_pos_bias.relative_position_bias_table' not in out
    expect = resize_rel_pos_table(table, (4, 4), (6, 6))
    for i in range(2):
        torch.testing.assert_close(out[f'blocks.{i}.rel_pos_bias.relative_position_bias_table'],
                                   expect)
    # load_state_dict goes through it; so does the converter's img_size option
    dst.load_state_dict(sd)
    torch.testing.assert_close(dst.blocks[1].rel_pos_bias.relative_position_bias_table, expect)
    conv, _ = peco_mm.checkpoint.convert_state_dict({'state_dict': sd}, img_size=48,
                                                    per_block_rel_pos=True)
    torch.testing.assert_close(conv['blocks.0.rel_pos_bias.relative_position_bias_table'],
                               expect)
    wide = PeCoViT(**{**KW, 'arch': dict(embed_dims=64, num_layers=2, num_heads=2)})
    with pytest.raises(ValueError, match=r'checkpoint width 32 .*embed_dims=64'):
        wide.checkpoint_filter(dict(sd))


TOOL = CHECKPOINT_DIR.parents[1] / 'tools' / 'convert_checkpoint.py'


def test_convert_tool_help_before_torch_and_result_object(tmp_path):
    import subprocess
    import sys
    code = ('import runpy, sys\nsys.argv = ["convert_checkpoint.py", "--help"]\n'
            'try:\n    runpy.run_path(sys.argv_tool, run_name="__main__")\n'
            'except SystemExit:\n    pass\nprint("torch" in sys.modules)\n')
    code = code.replace('sys.argv_tool', repr(str(TOOL)))
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith('False'), done.stdout
    assert '--per-block-rel-pos' in done.stdout
    # the tool's function returns what it did; main() only prints it
    import importlib.util
    spec = importlib.util.spec_from_file_location('convert_checkpoint_tool', TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    src = PeCoViT(rel_pos_bias='shared', **KW)
    torch.save({'state_dict': {'backbone.' + k: v for k, v in src.state_dict().items()}},
               tmp_path / 'src.pth')
    res = tool.convert_file(str(tmp_path / 'src.pth'), str(tmp_path / 'dst.pth'),
                            per_block_rel_pos=True, num_heads=2)
    assert res.ok and res.fmt == 'peco_mm' and res.pecovit_args['rel_pos_bias'] == 'per_block'
    assert res.missing == [] and res.unexpected == [] and res.num_tensors == len(
        read_checkpoint(tmp_path / 'dst.pth')['state_dict'])


def test_mmengine_types_are_allowed_per_read_not_process_wide(tmp_path):
    """`import peco_mm` leaves torch's process-wide allow-list alone; read_checkpoint allows the
    few mmengine types of a checkpoint for its own read, and so does mmengine's loader inside
    `checkpoints_through_gate` (PeCo's runs). A plain weights-only torch.load still refuses
    them, as it does without peco_mm."""
    import pickle

    from mmengine.logging import MessageHub
    from mmengine.runner.checkpoint import _load_checkpoint

    from peco_mm.checkpoint import checkpoints_through_gate
    from peco_mm.checkpoint.reader import mmengine_checkpoint_types
    from tests.checkpoint_forms import save_old_form
    hub = MessageHub('test_allow_list')
    hub.update_scalar('b', 2.0)
    save_old_form(tmp_path / 'ckpt.pth', hub, state_dict={'w': torch.ones(1)})
    allowed = torch.serialization.get_safe_globals()
    assert not [t for t in mmengine_checkpoint_types() if t in allowed]
    read = read_checkpoint(str(tmp_path / 'ckpt.pth'))
    assert read['message_hub']['log_scalars']['b'].current() == 2.0
    with checkpoints_through_gate():
        hub_state = _load_checkpoint(str(tmp_path / 'ckpt.pth'))['message_hub']
    assert hub_state['log_scalars']['b'].current() == 2.0
    assert torch.serialization.get_safe_globals() == allowed
    with pytest.raises(pickle.UnpicklingError, match='HistoryBuffer'):
        torch.load(tmp_path / 'ckpt.pth', weights_only=True)
