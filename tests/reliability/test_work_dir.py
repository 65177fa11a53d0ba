"""The work dir on resume: a copied work dir resumes from its own checkpoints (not from the
folder its `last_checkpoint` was written in), and says which file it uses."""
import shutil

import torch


def test_copied_work_dir_resumes_from_its_own_files(tmp_path):
    from mmengine.config import Config

    from peco_mm.engine.hooks import find_resumable_checkpoint
    from peco_mm.engine.hooks.safeguards import add_safeguards
    original, copy = tmp_path / 'original', tmp_path / 'copy'
    original.mkdir()
    torch.save({'meta': {'iter': 2}, 'state_dict': {}}, original / 'iter_2.pth')
    (original / 'last_checkpoint').write_text(str(original / 'iter_2.pth'))
    shutil.copytree(original, copy)
    torch.save({'meta': {'iter': 99}, 'state_dict': {}}, original / 'iter_2.pth')  # moved on
    found, notes = find_resumable_checkpoint(str(copy))
    assert found == str(copy / 'iter_2.pth')
    assert notes == [f'resume: last_checkpoint names {original / "iter_2.pth"}, outside this '
                     f'work dir (a copied or moved work dir?); looking for iter_2.pth in {copy}']
    cfg = Config(dict(work_dir=str(copy), resume=True, load_from=None))
    notes = add_safeguards(cfg)
    assert cfg.load_from == str(copy / 'iter_2.pth')
    assert notes[-1] == f'resume: using {copy / "iter_2.pth"}'
    (copy / 'last_checkpoint').write_text('iter_2.pth')  # a relative name: in the work dir
    assert find_resumable_checkpoint(str(copy))[0] == str(copy / 'iter_2.pth')

