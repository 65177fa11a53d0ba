"""The study's numbers as the report shows them (tools/study.py): per row and column, a list
of per-replicate values in replicate order, so that value i of every row belongs to replicate
i and any two rows are paired. `endpoints` names the comparisons fixed before the runs
(docs/reproduce.md, "Endpoints"): P1-P3 primary, the rest secondary. The words of each
comparison come from peco_mm/tooling/study_report.py.
"""
from __future__ import annotations

from peco_mm.tooling.study_runs import Study, tok_key
from peco_mm.tooling.tool_runs import plain_number

TOK_COLUMNS = [  # (column, metric key, digits, scale)
    ('PSNR (dB)', 'tokenizer/psnr', 2, 1), ('SSIM', 'tokenizer/ssim', 3, 1),
    ('codeword probe (%)', 'tokenizer/codeword_probe_acc', 1, 1),
    ('judge on reconstructions (%)', 'tokenizer/recon_cls_acc', 1, 1),
    ('code agreement, matched pairs (%)', 'agreement/matched', 1, 1),
    ('code agreement, every re-pairing (%)', 'agreement/repaired', 1, 1),
    ('code agreement above re-pairing (%)', 'agreement/above_floor', 1, 1),
    ('codebook usage (%)', 'tokenizer/usage', 1, 100)]
DOWN_COLUMNS = [('MIM accuracy (%)', 'mim_acc', 1), ('few-label top-1 (%)', 'accuracy/top1', 1),
                ('mIoU (%)', 'mIoU', 1)]
DOWN_ROWS = dict(peco='PeCo (lambda = 1 codes)', pixel='pixel codebook (lambda = 0 codes)',
                 random='random perceptual network (lambda = 1 codes)',
                 clsloss='classification loss on codewords (Table 6 control codes)',
                 dvae='dVAE (Gumbel-softmax codes)',
                 scratch='scratch (own recipe)',
                 scratch_matched='scratch, compute-matched (own recipe)',
                 peco_bf16='PeCo, targets encoded in bf16',
                 chance='chance (a model that learned nothing)')
T4, T10, T23 = ('Table 4: tokenizers', 'Table 10: lambda sweep',
                'Tables 2-3: pretraining and downstream')
RANDOM_TOK = 'lambda = 1, random perceptual network'
NETWORK_WORDS = dict(  # what each kind of perceptual network learned from
    supervised='supervised on the labelled split of its replicate\'s classes A',
    mocov3='trained by MoCo v3 on the unlabeled images (no labels)',
    pairs='trained by MoCo v3 on geometry-matched pairs of unlabeled images (its two views '
    'share only the geometry; no labels)')
OTHER_TOKS = dict(random=RANDOM_TOK,
                  clsloss='lambda = 0 + classification loss on codewords (labels of A)',
                  dvae='dVAE, Gumbel-softmax (pixel only)')


def tok_row(key: str) -> str:
    if key in OTHER_TOKS:
        return OTHER_TOKS[key]
    lam = float(key[len('lambda'):].replace('p', '.'))
    return f'lambda = {lam:g}' + {0.0: ' (pixel only)', 1.0: ' (PeCo)'}.get(lam, '')


def values(study: Study, res: dict, table: str, row: str, key: str) -> list:
    """Per-replicate values (replicate order) of one cell: `row` is a tokenizer key for
    Table 4 / 10, an init (or 'chance') for Tables 2-3; None where a run recorded none."""
    reps = study.replicates
    if table in (T4, T10):
        scale = next(sc for _, k, _, sc in TOK_COLUMNS if k == key)
        vals = [res[r]['tokenizers'][row]['metrics'].get(key) for r in reps]
        return [None if v is None else v * scale for v in vals]
    if row == 'chance':
        return [res[r]['chance'][key] for r in reps]
    if key == 'mim_acc':
        return [res[r]['pretrain'][row]['metrics']['mim_acc'] for r in reps] \
            if row in res[reps[0]]['pretrain'] else []
    task = 'cls' if key.startswith('accuracy') else 'seg'
    return [res[r]['downstream'][(task, row)]['metrics'].get(key) for r in reps]


def endpoints(study: Study) -> list[dict]:
    """The comparisons of the report, primary first: dict(name, table, column, key, a, b
    (rows as `values` takes them), expect: the paper's sign of a - b, 0 for none)."""
    def cmp(name, table, column, a, b, expect=1):
        key = {c: k for c, k, *_ in TOK_COLUMNS + DOWN_COLUMNS}[column]
        return dict(name=name, table=table, column=column, key=key, a=a, b=b, expect=expect)
    one, zero = tok_key(1.0), tok_key(0.0)
    out = [cmp('P1', T4, 'codeword probe (%)', one, zero),
           cmp('P2', T23, 'few-label top-1 (%)', 'peco', 'pixel'),
           cmp('P3', T23, 'mIoU (%)', 'peco', 'pixel')]
    for col in ('judge on reconstructions (%)', 'code agreement, matched pairs (%)'):
        out.append(cmp('S', T4, col, one, zero))
    for col in ('codeword probe (%)', 'judge on reconstructions (%)',
                'code agreement, matched pairs (%)'):
        out.append(cmp('S', T4, col, one, 'random'))
    if 'dvae' in study.tokenizers:  # Table 2's baseline tokenizer, on the judge-free measures
        out += [cmp('S', T4, col, one, 'dvae') for col in
                ('codeword probe (%)', 'code agreement, matched pairs (%)')]
    for lam in study.lambdas:
        if lam not in (0.0, 1.0):
            out += [cmp('S', T10, c, tok_key(lam), zero, 0) for c in
                    ('codeword probe (%)', 'judge on reconstructions (%)',
                     'code agreement, matched pairs (%)')]
    down = [(a, b, 1) for a in ('peco', 'pixel') for b in ('scratch', 'scratch_matched')]
    down += [('peco', 'random', 1), ('peco', 'clsloss', 1), ('peco', 'dvae', 1)]
    down += [('peco_bf16', 'peco', 0)] if 'peco_bf16' in study.inits else []
    for a, b, expect in down:  # MIM accuracy only where both predict the same codes
        if a in study.inits and b in study.inits:
            out += [cmp('S', T23, c, a, b, expect) for c, _, _ in
                    DOWN_COLUMNS[0 if b == 'peco' and a == 'peco_bf16' else 1:]]
    for init in study.inits:  # did it learn? (MIM accuracy: scratch has none)
        cols = DOWN_COLUMNS[0 if init in study.targets else 1:]
        out += [cmp('S', T23, c, init, 'chance') for c, _, _ in cols]
    return out


def row_label(table: str, row: str) -> str:
    return tok_row(row) if table in (T4, T10) else DOWN_ROWS[row]


def report_tables(study: Study, res: dict) -> tuple[list[str], list[str], list[dict]]:
    """(Markdown tables, the Conclusions section's body, endpoint data), all from the runs'
    metrics. The body (`conclusion_block`): the primary endpoints' table, then one line per
    comparison, P1-P3 first. Endpoint data: each comparison of `endpoints` with its rows'
    per-replicate values (a_values, b_values) as the tables show them."""
    from peco_mm.tooling.study_report import (cell, comparison, conclusion_block,
                                              markdown_table)
    tables = []
    sweep = [tok_key(lam) for lam in study.lambdas]
    t4 = [tok_key(0.0), tok_key(1.0)] + [k for k in study.tokenizers if k in OTHER_TOKS]
    for title, keys in ((T4, t4), (T10, sweep)):
        if title == T10 and len(sweep) <= 2:
            continue
        rows = {tok_row(k): [cell(values(study, res, title, k, key), d)
                             for _, key, d, _ in TOK_COLUMNS] for k in keys}
        tables.append(markdown_table(title, [c[0] for c in TOK_COLUMNS], rows))
    rows = {DOWN_ROWS[i]: [cell(values(study, res, T23, i, k), d) for _, k, d in DOWN_COLUMNS]
            for i in study.inits + ('chance', )}
    tables.append(markdown_table(T23, [c[0] for c in DOWN_COLUMNS], rows))
    conclusions, data = [], []
    for e in endpoints(study):
        d = next(d for c, _, d, *_ in TOK_COLUMNS + DOWN_COLUMNS if c == e['column'])
        a, b = (values(study, res, e['table'], e[k], e['key']) for k in 'ab')
        if None in a + b or not a:
            continue
        a, b = ([round(float(v), d) for v in vals] for vals in (a, b))  # as `cell` shows them
        la, lb = row_label(e['table'], e['a']), row_label(e['table'], e['b'])
        conclusions.append(comparison(e['table'], e['column'], la, lb, a, b, e['expect'], d))
        data.append(dict(e, a=la, b=lb, a_values=a, b_values=b, digits=d))
    primary = {(e['table'], e['column'], e['a'], e['b']): e['name'] for e in data
               if e['name'] != 'S'}
    if study.prereg is not None:  # the plan fixed before the runs gives every role
        from peco_mm.tooling.study_report import apply_plan
        conclusions, primary = apply_plan(conclusions, study.prereg), None
        data = [dict(e, name=c.role if c.role.startswith('P') else c.role[0].upper(),
                     margin=c.margin) for e, c in zip(data, conclusions)]
    return tables, conclusion_block(conclusions, primary), data


def reconstruction_grid(study: Study, res: dict) -> str:
    """Originals (top), lambda = 0 (middle) and lambda = 1 (bottom) reconstructions of one
    test image per held-out class, the first replicate; the PNG's path."""
    import torch

    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.utils.image import image_grid
    from peco_mm.tooling.images import load_images, save_png
    r = study.replicates[0]
    test = study.wd / study.rep(r, 'world') / 'cls' / 'test'
    if 'ckpt' not in res[r]['tokenizers'][tok_key(1.0)] or not test.is_dir():
        return ''  # read from a kept record: no checkpoint here
    files = [sorted(d.glob('*.png'))[0] for d in sorted(test.iterdir())]
    x = load_images(files)  # (classes, 3, 32, 32) in [-1, 1]
    rows = [x]
    for lam in (0.0, 1.0):
        tok = FrozenPeCoTokenizer(res[r]['tokenizers'][tok_key(lam)]['ckpt'],
                                  with_decoder=True)
        with torch.no_grad():
            rows.append(tok.decode(tok.encode(x)))
    return str(save_png(image_grid(rows), study.wd / 'report_files' / 'reconstructions.png',
                        scale=3))


def stage_lines(study: Study, res: dict) -> list[str]:
    """The report's checks of each replicate's networks, per-replicate values in brackets."""
    from peco_mm.tooling.study_report import cell
    from peco_mm.tooling.study_tuning import row_tuning_line, tuning_line
    reps = study.replicates
    net = [res[r]['nets']['perceptual']['metrics'] for r in reps]
    judge = [res[r]['nets']['judge']['metrics'].get('accuracy/top1') for r in reps]
    chance = res[reps[0]]['chance']['accuracy/top1']

    def knn(nets):  # 1-NN shape accuracy of the trained networks and of their random twins
        return (f'1-NN shape accuracy on the held-out classes B (test half) '
                f'{cell([m["trained"] for m in nets])} %, the same ViT randomly initialised '
                f'{cell([sum(m["random"]) / len(m["random"]) for m in nets])} % (chance '
                f'{chance:.1f} %)')
    own = dict(NETWORK_WORDS, supervised=NETWORK_WORDS['supervised'] + ', top-1 on A\'s '
               f'validation images {cell([m.get("accuracy/top1") for m in net])} %')
    others = [f'- Self-supervised network for comparison, trained only for this check (the '
              f'tokenizers use the network above): a ViT {NETWORK_WORDS[n]}; ' +
              knn([res[r]['nets']['knn'][n]['metrics'] for r in reps]) + '.'
              for n in study.knn_networks]
    return [
        f'- Perceptual loss network: a ViT {own[study.perceptual]}; {knn(net)}. Its random '
        'initialisation is the control row\'s network.', *others,
        f'- Judge: a ResNet (another architecture) trained on its own labelled split of B, '
        f'top-1 on B\'s test half {cell(judge)} % (chance {chance:.1f} %).',
        *filter(None, [tuning_line(study.scratch_lr), row_tuning_line(study.row_lr)]),
        '- Class splits (A: perceptual labels; B: every evaluation): ' + '; '.join(
            f'replicate {r}: A {", ".join(res[r]["world"]["classes"]["A"])}, B '
            f'{", ".join(res[r]["world"]["classes"]["B"])}' for r in reps) + '.']


def matched_words(study: Study) -> str:
    """How compute-matched scratch was matched, for the report."""
    if not study.matched_iters:
        return 'pretraining plus fine-tuning iterations'
    return (' and '.join(f'{task} {n}' for task, n in study.matched_iters.items()) +
            ' iterations, whose training FLOPs equal PeCo\'s pretraining plus fine-tuning, '
            'counted on the tuning world')


def write_report(study: Study, res: dict, title: str, seconds: float, load: dict):
    """<work-dir>/report.md (what ran, the stage checks, the tables, the endpoints and the
    other comparisons) and <work-dir>/endpoints.json (the comparisons' per-replicate values);
    returns the report's path."""
    import json
    import os.path as osp

    from peco_mm.tooling.study_plan import REPO, plan_line
    from peco_mm.tooling.study_report import CONCLUSIONS_INTRO, write_checked
    for r in study.replicates:
        if 'chance' not in res[r]:
            from peco_mm.tooling.study_stages import chance_levels
            res[r]['chance'] = chance_levels(study, r)
    tables, conclusions, data = report_tables(study, res)
    w, it = res[study.replicates[0]]['world'], study.p['iters']
    lines = [
        f'# peco_mm {title}: PeCo\'s comparisons on the shape world', '',
        f'Profile `{study.profile}` of `tools/study.py`: {len(study.replicates)} replicates '
        f'({len(study.plan.runs)} runs), lambdas '
        f'{", ".join(f"{v:g}" for v in study.lambdas)}. Wall time {seconds / 60:.1f} min on '
        f'{load["cpus"]} CPU cores (load average {load["start"][0]:.1f} at the start, '
        f'{load["end"][0]:.1f} at the end; runs finished by an earlier call are not counted).',
        '', f'Each replicate r draws its own world (seed r: {w["n_pretrain"]} unlabeled 32 px '
        'images, the ten shape classes split into A and B, '
        f'{"drawn upright" if w["rotate"] is False else "each at a random angle"}) and trains '
        'its own networks, tokenizers, pretraining and fine-tuning with seed r. Labelled '
        f'splits of B: {w["per_class"]} images per class to train on, {w["val_per_class"]} '
        'per class in a tuning half (no choice of a replicate reads it) and as many in the test '
        f'half every number below is scored on; {w["n_pairs"]} geometry-matched pairs under '
        'held-out backgrounds and hues. Iterations: ' +
        ', '.join(f'{k} {v}' for k, v in it.items()
                  if k != ('perceptual' if study.perceptual != 'supervised' else
                           'mocov3' if not study.knn_networks else None)) +
        f' (compute-matched scratch: {matched_words(study)}). Each cell: mean ± standard '
        'deviation over the replicates, each replicate\'s value in brackets, in replicate '
        'order (value i of every row is replicate i).', '',
        *([plan_line(study.prereg, REPO), ''] if study.prereg is not None else []),
        '## Stage checks', '',
        *stage_lines(study, res), '']
    lines += [t + '\n' for t in tables]
    lines += ['## Conclusions', '', CONCLUSIONS_INTRO, '', *conclusions]
    grid = reconstruction_grid(study, res)
    lines += ['', '## Reconstructions', '', 'Originals (top), lambda = 0 (middle) and '
              f'lambda = 1 (bottom), replicate {study.replicates[0]}, one test image per '
              f'held-out class:', '', f'![reconstructions]({osp.relpath(grid, study.wd)})'
              if grid else '(not drawn: that replicate\'s checkpoints are not on this '
              'machine; its results were read from a committed record)', '',
              f'Work directories (configs as run, logs, checkpoints, each run\'s console.log): '
              f'`{study.wd}`.']
    plan = {} if study.prereg is None else dict(plan=plan_line(study.prereg, REPO))
    (study.wd / 'endpoints.json').write_text(json.dumps(
        dict(replicates=study.replicates, comparisons=data, **plan), indent=1,
        default=plain_number))
    # checked as written: exits non-zero, naming the file, when a sentence disagrees with
    # its numbers
    return write_checked(study.wd / 'report.md', '\n'.join(lines) + '\n', study.prereg)
