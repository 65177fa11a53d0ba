"""Training curves from mmengine's logs, as PNG (tools/plot_logs.py and the demo report).

mmengine's LocalVisBackend appends one JSON record per logged window to
`<work_dir>/<timestamp>/vis_data/scalars.json` (training: `loss*`, `lr`, `iter`, `step`, plus
what hooks add, e.g. CodebookHealthHook's `codebook_usage` / `codebook_perplexity` and the MIM
head's `mim_acc`; validation: the metrics and `step`). A resumed run adds a new timestamp
folder; `read_scalars` joins them in time order.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

# what tools/plot_logs.py draws by default: panel name -> (title, keys, y label)
PANELS = {
    'loss': ('training losses', ('loss*', ), 'loss'),
    'codebook_usage': ('codebook usage (CodebookHealthHook)', ('codebook_usage', ),
                       'fraction of the K codes used'),
    'codebook_perplexity': ('codebook perplexity (CodebookHealthHook)',
                            ('codebook_perplexity', ), 'exp(entropy) of the codes'),
    'accuracy': ('masked-token accuracy', ('mim_acc', ), 'accuracy'),
}


def scalar_files(path: str | Path) -> list[Path]:
    """The scalars.json files of a run: `path` itself, `path/vis_data/scalars.json` (one
    timestamp folder) or every `path/*/vis_data/scalars.json` (a work dir), oldest first."""
    path = Path(path)
    if path.is_file():
        return [path]
    for pattern in ('vis_data/scalars.json', '*/vis_data/scalars.json'):
        files = sorted(path.glob(pattern))
        if files:
            return files
    raise FileNotFoundError(f'no vis_data/scalars.json under {str(path)!r}: pass a work dir, '
                            'one of its <timestamp> folders, or a scalars.json file')


def read_scalars(path: str | Path) -> list[dict]:
    """All records of a run (see `scalar_files`), oldest first."""
    recs = []
    for f in scalar_files(path):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if line.strip():
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f'{f}:{n}: not a JSON record ({err})') from err
    return recs


def match_keys(recs: Sequence[dict], patterns: Sequence[str]) -> list[str]:
    """Keys present in `recs` that match `patterns` ('loss*' = every key starting 'loss')."""
    present = list(dict.fromkeys(k for r in recs for k in r))
    out = []
    for p in patterns:
        hits = [k for k in present if (k.startswith(p[:-1]) if p.endswith('*') else k == p)]
        out += [k for k in hits if k not in out]
    return out


def series(recs: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` over the records that have it (step: `iter`, else `step`)."""
    pts = [(r.get('iter', r.get('step', i)), r[key]) for i, r in enumerate(recs) if key in r]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def last_metrics(recs: Sequence[dict]) -> dict:
    """The last validation / test record (one without `loss` or `lr`), or {}."""
    vals = [r for r in recs if 'loss' not in r and 'lr' not in r]
    return vals[-1] if vals else {}


def plot_curves(path: str | Path, curves: Mapping[str, tuple[Sequence, Sequence]], title: str,
                ylabel: str, xlabel: str = 'iteration') -> Path:
    """One PNG with a line per curve {label: (x, y)}; empty curves are skipped."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    for label, (x, y) in curves.items():
        if len(y):
            ax.plot(x, y, label=label, marker='.' if len(y) < 20 else None)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if curves:
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_panel(path: str | Path, runs: Mapping[str, Sequence[dict]], keys: Sequence[str],
               title: str, ylabel: str) -> Path | None:
    """Curves of `keys` (patterns as `match_keys`) for each run {label: records} in one PNG;
    None (nothing written) when no run has any of the keys."""
    curves = {}
    for label, recs in runs.items():
        for k in match_keys(recs, keys):
            curves[f'{label}: {k}' if len(runs) > 1 else k] = series(recs, k)
    if not curves:
        return None
    return plot_curves(path, curves, title, ylabel)


def plot_runs(out_dir: str | Path, runs: Mapping[str, Sequence[dict]],
              panels: Mapping[str, tuple] = PANELS) -> dict[str, Path]:
    """`out_dir/<panel>.png` for each panel of PANELS that some run has data for."""
    written = {}
    for name, (title, keys, ylabel) in panels.items():
        png = plot_panel(Path(out_dir) / f'{name}.png', runs, keys, title, ylabel)
        if png is not None:
            written[name] = png
    return written
