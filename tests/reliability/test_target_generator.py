"""The frozen tokenizer on resume and load_from: a resume needs only the checkpoint (it holds
the tokenizer's weights), and a load_from whose tokenizer has another codebook size is refused
instead of mixing two tokenizers."""
import shutil

import pytest
import torch

from tests.mim.conftest import with_quantizer, write_config
from tests.reliability.conftest import run_log
from tests.reliability.test_nonfinite import peco_parts  # noqa: F401  (fixture)

from peco_mm.checkpoint import read_checkpoint


def test_resume_without_the_tokenizer_file(tmp_path, peco_parts, isolated_mmengine):  # noqa: F811
    from peco_mm.supervisor.launch import run
    data, tok = peco_parts
    own_tok = tmp_path / 'tok.pth'
    shutil.copy(tok, own_tok)
    work = tmp_path / 'work'
    run(write_config(tmp_path / 'a.py', 'pretrain_vitb_in1k_300e.py', str(own_tok), str(data),
                     iters=1), str(work))
    own_tok.unlink()  # the tokenizer file is gone (another machine, cleaned up)
    run(write_config(tmp_path / 'b.py', 'pretrain_vitb_in1k_300e.py', str(own_tok), str(data),
                     iters=2), str(work), resume='auto')
    assert read_checkpoint(work / 'iter_2.pth')['meta']['iter'] == 2
    assert (f"resume: model.target_generator.checkpoint='{own_tok}' not found; the frozen "
            f"tokenizer is read from {work / 'iter_1.pth'}") in run_log(work)
    first = read_checkpoint(tok)['state_dict']['quantizer.embedding']
    resumed = read_checkpoint(work / 'iter_2.pth')['state_dict']
    torch.testing.assert_close(resumed['target_generator.quantizer.embedding'], first)


def test_load_from_with_another_codebook_size(tmp_path, peco_parts,  # noqa: F811
                                              isolated_mmengine):
    from mmengine.config import Config

    from peco_mm.supervisor.launch import run
    from peco_mm.tokenizer.tokenizer import PeCoTokenizer
    data, tok = peco_parts
    run(write_config(tmp_path / 'a.py', 'pretrain_vitb_in1k_300e.py', tok, str(data), iters=1),
        str(tmp_path / 'first'))
    ckpt = tmp_path / 'first' / 'iter_1.pth'
    arch = with_quantizer(num_embeddings=8)  # K = 8 instead of 16
    tok8 = tmp_path / 'tok8.pth'
    torch.save({'state_dict': PeCoTokenizer(**arch, perceptual_weight=0.0).state_dict(),
                'meta': {'cfg': Config(dict(model=dict(type='PeCoTokenizer', **arch))
                                       ).pretty_text}}, tok8)
    cfg = write_config(tmp_path / 'b.py', 'pretrain_vitb_in1k_300e.py', str(tok8), str(data),
                       iters=1)
    with pytest.raises(ValueError) as err:
        run(cfg, str(tmp_path / 'second'), {'load_from': str(ckpt)})
    msg = str(err.value)
    assert msg.startswith(f'load_from {ckpt}: its target generator (the frozen tokenizer) '
                          'does not fit this model: ')
    assert ('weights of another shape (e.g. target_generator.quantizer.embedding: (16, 16) in '
            'the checkpoint, (8, 16) in this model)') in msg
    assert not list((tmp_path / 'second').glob('*.pth'))
    run(write_config(tmp_path / 'c.py', 'pretrain_vitb_in1k_300e.py', tok, str(data), iters=1),
        str(tmp_path / 'third'), {'load_from': str(ckpt)})  # the same tokenizer: loads
