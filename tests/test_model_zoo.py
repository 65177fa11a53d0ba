"""configs/peco/metafile.yml covers every shipped config and agrees with it, and
docs/model_zoo.md is the page tools/gen_model_zoo.py writes from it."""
import importlib.util
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REGEN = 'python tools/gen_model_zoo.py'
REQUIRED = ('Task', 'Training Data', 'GPUs', 'Batch Per GPU', 'Batch Size', 'Schedule')


def _gen():
    spec = importlib.util.spec_from_file_location('gen_model_zoo', ROOT / 'tools/gen_model_zoo.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _gen()
METAFILE = GEN.load_metafile(str(ROOT / GEN.METAFILE))
MODELS = METAFILE['Models']


@lru_cache(maxsize=None)
def _config(path: str):
    from mmengine.config import Config
    return Config.fromfile(str(ROOT / path))


def test_model_zoo_page_is_generated_from_the_metafile():
    page = (ROOT / GEN.OUT).read_text()
    assert page == GEN.render(METAFILE), (
        f'{GEN.OUT} is out of date with {GEN.METAFILE}: run `{REGEN}` and commit the result '
        '(edit the metafile, not the page)')


def test_every_shipped_config_is_in_the_metafile():
    listed = {m['Config'] for m in MODELS}
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / 'configs/peco').glob('*.py')}
    problems = [
        f'{c} is not in {GEN.METAFILE}: add a Models entry (Name, In Collection: PeCo, Config, '
        f'Metadata: {", ".join(REQUIRED)} and Epochs or Iterations; Results from the paper '
        f'or null; Results Source; Weights: null), then run `{REGEN}`'
        for c in sorted(shipped - listed)]
    problems += [f'{GEN.METAFILE}: {c} does not exist (renamed or removed? update the entry, '
                 f'then run `{REGEN}`)' for c in sorted(listed - shipped)]
    assert not problems, '\n'.join(problems)


def test_metafile_entries_are_complete():
    names = [m['Name'] for m in MODELS]
    problems = [f'{GEN.METAFILE}: Name {n} appears twice' for n in set(names)
                if names.count(n) > 1]
    for m in MODELS:
        meta = m.get('Metadata', {})
        where = f"{GEN.METAFILE}: {m.get('Name')}"
        problems += [f'{where}: Metadata.{k} missing' for k in REQUIRED if k not in meta]
        if ('Epochs' in meta) == ('Iterations' in meta):
            problems.append(f'{where}: give exactly one of Metadata.Epochs / Iterations')
        if m.get('Name') != Path(m.get('Config', '')).stem:
            problems.append(f"{where}: Name must be the config's file name without .py")
        if 'Results' not in m or 'Results Source' not in m:
            problems.append(f'{where}: Results (the paper\'s numbers, or null) and '
                            'Results Source are required')
        for r in m.get('Results') or []:
            if not {'Task', 'Dataset', 'Metrics'} <= set(r):
                problems.append(f'{where}: each Results item needs Task, Dataset, Metrics')
        problems += [f'{where}: Downstream {d} is not a model of the metafile'
                     for d in m.get('Downstream', []) if d not in names]
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('model', MODELS, ids=lambda m: m['Name'])
def test_metafile_batch_schedule_and_host_match_the_config(model):
    """The totals users read come from the config itself: per-GPU batch, epochs / iterations,
    and the host package `mim train` needs (the config's default_scope)."""
    cfg = _config(model['Config'])
    meta, where = model['Metadata'], f"{GEN.METAFILE}: {model['Name']}"
    problems = []
    if meta['Batch Per GPU'] != cfg.train_dataloader.batch_size:
        problems.append(f"{where}: Batch Per GPU {meta['Batch Per GPU']} but the config's "
                        f'train_dataloader.batch_size is {cfg.train_dataloader.batch_size}')
    accum = meta.get('Accumulation', 1)
    if accum != cfg.optim_wrapper.get('accumulative_counts', 1):
        problems.append(f"{where}: Accumulation {accum} but the config's "
                        'optim_wrapper.accumulative_counts is '
                        f"{cfg.optim_wrapper.get('accumulative_counts', 1)}")
    if meta['Batch Size'] != meta['GPUs'] * meta['Batch Per GPU'] * accum:
        problems.append(f"{where}: Batch Size {meta['Batch Size']} != GPUs {meta['GPUs']} x "
                        f"Batch Per GPU {meta['Batch Per GPU']} x Accumulation {accum}")
    for key, cfg_key in (('Epochs', 'max_epochs'), ('Iterations', 'max_iters')):
        if key in meta and meta[key] != cfg.train_cfg.get(cfg_key):
            problems.append(f'{where}: {key} {meta[key]} but the config\'s train_cfg.{cfg_key} '
                            f'is {cfg.train_cfg.get(cfg_key)}')
    if GEN.host_package(model) != cfg.default_scope:
        problems.append(f'{where}: the model zoo says `mim train {GEN.host_package(model)}` but '
                        f"the config's default_scope is {cfg.default_scope}")
    assert not problems, '\n'.join(problems)
