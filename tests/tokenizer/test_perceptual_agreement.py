"""tools/perceptual_agreement.py (PeCo Fig. 1) on a BAPPS-layout 2AFC set the test writes,
where the closer image of each triplet and the people's judgement are known, so the L2 score
is known exactly."""
import json
import math

import numpy as np
import pytest
from PIL import Image

from tests.conftest import load_tool, run_tool
from tests.mim.conftest import fitted_tokenizer, halves_images, save_tokenizer

# fraction of people finding p1 closer, per triplet; p0 is the closer one for even k
JUDGE = [0.1, 0.8, 0.0, 1.0, 0.5, 0.7, 0.2, 0.9]
# L2's per-triplet scores: 1 - judge where p0 is closer, judge where p1 is
L2_SCORES = [1 - j if k % 2 == 0 else j for k, j in enumerate(JUDGE)]


def write_subset(root, swap):
    rng = np.random.default_rng(0)
    for d in ('ref', 'p0', 'p1', 'judge'):
        (root / d).mkdir(parents=True)
    for k, judge in enumerate(JUDGE):
        ref = halves_images(1, seed=k)[0].astype(int)
        near = np.clip(ref + rng.integers(-4, 5, ref.shape), 0, 255)
        far = np.clip(ref + rng.integers(-90, 91, ref.shape), 0, 255)
        p0, p1 = (near, far) if k % 2 == 0 else (far, near)
        if swap:  # the same triplet with p0 / p1 exchanged: the judgement flips too
            p0, p1, judge = p1, p0, 1 - judge
        for d, img in (('ref', ref), ('p0', p0), ('p1', p1)):
            Image.fromarray(img.astype(np.uint8)).save(root / d / f'{k:06d}.png')
        np.save(root / 'judge' / f'{k:06d}.npy', np.array([judge], np.float32))


@pytest.fixture(scope='module')
def split(tmp_path_factory):
    root = tmp_path_factory.mktemp('bapps') / '2afc' / 'val'
    write_subset(root / 'a', swap=False)
    write_subset(root / 'b', swap=True)
    return root


def test_l2_and_codebook_agreement(split, tmp_path):
    tok = save_tokenizer(fitted_tokenizer(halves_images(64)), str(tmp_path / 'tok.pth'))
    out = tmp_path / 'agreement.json'
    proc = run_tool(['tools/perceptual_agreement.py', split, '--size', '32', '--tokenizer', tok,
                     '--out', out])
    res = json.loads(out.read_text())
    assert set(res) == {'a', 'b'} and set(res['a']) == {'l2', 'codebook'}
    want = float(np.mean(L2_SCORES))  # 0.825
    half = 1.96 * float(np.std(L2_SCORES, ddof=1)) / math.sqrt(len(JUDGE))
    for subset in ('a', 'b'):  # swapping p0 / p1 with the judgement changes nothing
        l2 = res[subset]['l2']
        assert l2['triplets'] == 8 and abs(l2['score'] - want) < 1e-6
        assert abs(l2['ci95'][0] - (want - half)) < 1e-5 and abs(l2['ci95'][1] -
                                                                 (want + half)) < 1e-5
        assert 0.0 <= res[subset]['codebook']['score'] <= 1.0
    assert abs(res['a']['codebook']['score'] - res['b']['codebook']['score']) < 1e-6
    assert 'l2          2AFC  82.50 %' in proc.stdout


def test_missing_judge_names_the_file(tmp_path):
    write_subset(tmp_path / 's', swap=False)
    (tmp_path / 's' / 'judge' / '000003.npy').unlink()
    tool = load_tool('perceptual_agreement')
    with pytest.raises(FileNotFoundError, match='000003.npy'):
        tool.load_triplets(tmp_path / 's')
    with pytest.raises(FileNotFoundError, match='expected ref/, p0/, p1/ and judge/'):
        tool.find_subsets(tmp_path / 's' / 'ref')


def test_dalle_codebook_agreement(split, tmp_path):
    """The dalle distance: DALL-E's codes (OpenAI-style pickled files, read inertly), each
    replaced by the decoder's embedding of it, compared as the PeCo codebook distance is."""
    import torch

    from peco_mm.tokenizer import DalleTokenizer
    from tests.tokenizer.dalle_files import write_tiny_dalle
    enc, dec, _ = write_tiny_dalle(tmp_path)
    out = tmp_path / 'agreement.json'
    tool = load_tool('perceptual_agreement')
    tool.main([str(split), '--size', '32', '--dalle-encoder', enc, '--dalle-decoder', dec,
               '--out', str(out)])
    res = json.loads(out.read_text())
    assert set(res['a']) == {'l2', 'dalle'}
    tok = DalleTokenizer(enc, dec)
    triplets = tool.load_triplets(split / 'a')
    ref, p0, p1 = (tool.load_images([t[k] for t in triplets], 32) for k in range(3))

    def dist(a, b):
        qa, qb = tok.codewords(tok.encode(a)), tok.codewords(tok.encode(b))
        return ((qa - qb) ** 2).sum(1).mean((1, 2))
    d0, d1 = dist(ref, p0), dist(ref, p1)
    assert (d0 != d1).any()  # the distance separates some triplets
    judge = torch.tensor(JUDGE)
    want = torch.where(d1 < d0, judge, torch.where(d0 < d1, 1 - judge, 0.5)).mean()
    assert abs(res['a']['dalle']['score'] - float(want)) < 1e-6
    assert abs(res['a']['dalle']['score'] - res['b']['dalle']['score']) < 1e-6
    with pytest.raises(SystemExit, match='needs --dalle-encoder and --dalle-decoder'):
        tool.main([str(split), '--distances', 'dalle', '--dalle-encoder', enc])
