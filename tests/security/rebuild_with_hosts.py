"""The rebuild routes in a process that imported mmdet's, mmseg's and mmpretrain's models
(their registries full: thousands of names, a registered builder among them that runs a
folder's Python), run by `test_hostile_files.py::test_rebuild_routes_with_the_hosts_imported`.

    python -m tests.security.rebuild_with_hosts ROOT

ROOT holds the name corpus (`hostile.build_name_corpus`), the image folder `data/val` and
the pretraining config `peco.py` the test wrote. Prints one JSON object: the number of
registered names, the failures (route / file: what happened instead of the refusal), and
whether the remote-code payload, built the trusting way afterwards, ran its code.
"""
import contextlib
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace


def main(root: Path) -> dict:
    import mmdet.models  # noqa: F401
    import mmpretrain.models  # noqa: F401
    import mmseg.models  # noqa: F401
    from mmengine.registry import MODELS as ROOT_MODELS

    from tests.security.hostile import (NAME_EXPECTED, REMOTE_CODE_PAYLOADS, TINY_PARTS,
                                        name_payloads)
    from tests.security.test_hostile_files import (HEAVY_NAME_SAMPLE, pretraining_target,
                                                   resumed_target_generator, tool_routes)
    marker = root / 'NAME_MARKER'
    files = {name: root / f'{name}.pth' for name in NAME_EXPECTED}
    names = sum(len(r.module_dict) for r in registries())
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    tools = tool_routes()
    routes = {
        'FrozenPeCoTokenizer': lambda p, c: FrozenPeCoTokenizer(str(p)),
        'pretraining target (config)': pretraining_target,
        'pretraining --resume (tokenizer file gone)': resumed_target_generator,
        'tools/tokenize_dataset.py': tools['tools/tokenize_dataset.py'],
        'tools/visualize_mim.py --tokenizer': tools['tools/visualize_mim.py --tokenizer'],
    }
    images = root / 'data' / 'val'
    ctx = SimpleNamespace(root=root, images=images, image=sorted(images.rglob('*.png'))[0],
                          peco=root / 'peco.py')
    failures = []
    for route, call in routes.items():
        heavy = 'visualize_mim' in route or 'config' in route
        for name in (HEAVY_NAME_SAMPLE if heavy else NAME_EXPECTED):
            try:
                call(files[name], ctx)
                failures.append(f'{route} / {name}: not refused')
            except (Exception, SystemExit) as err:
                msg = str(err)
                if marker.exists() or '\n' in msg.strip() or str(files[name]) not in msg \
                        or not re.search(NAME_EXPECTED[name], msg):
                    failures.append(f'{route} / {name}: marker {marker.exists()}: {msg[:300]}')
    refused_cleanly = not marker.exists()
    # the trusting way (the host's registry): the remote-code payload runs the folder's code
    hostile = name_payloads(root)[REMOTE_CODE_PAYLOADS[0]]['encoder']
    assert hostile != TINY_PARTS['encoder']
    with contextlib.suppress(Exception):
        ROOT_MODELS.build(dict(hostile))
    return dict(registered=names, failures=failures, refused_cleanly=refused_cleanly,
                remote_code_live=marker.exists())


def registries() -> list:
    """mmengine's root registries and all their descendants (the hosts' among them)."""
    import mmengine.registry as roots
    from mmengine.registry import Registry
    todo = [r for r in vars(roots).values() if isinstance(r, Registry)]
    out = []
    while todo:
        out.append(todo.pop())
        todo += list(out[-1].children.values())
    return out


if __name__ == '__main__':
    print(json.dumps(main(Path(sys.argv[1]))))
