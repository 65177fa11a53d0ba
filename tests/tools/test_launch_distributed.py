"""Distributed launches on CPU (gloo) with the demo's PeCo pretraining config: FSDP through
tools/train.py's FlexibleRunner, two "nodes" on 127.0.0.1 through tools/dist_train.sh, and
what the surviving node does when the other one dies or hangs."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, run_log, run_tool
from tests.tools.conftest import (TINY_CLS, TINY_PECO, free_port, process_tree, signal_tree,
                                  write)

from peco_mm.checkpoint import read_checkpoint

pytestmark = [pytest.mark.skipif(torch.cuda.is_available(), reason='the CPU (gloo) path'),
              pytest.mark.slow]  # several torchrun trainings
FLEXIBLE = """
runner_type = 'FlexibleRunner'
strategy = dict(type='{strategy}'{args})
"""
# compared in fp32: on a CPU with native bf16 the demo's AmpOptimWrapper would run in bf16
# autocast, and bf16 rounding, amplified by AdamW's first steps, differs with the sharding
# (bf16 training is tested in tests/engine/test_mixed_precision.py)
FP32 = ("\noptim_wrapper = dict(_delete_=True, type='OptimWrapper', **{{k: v for k, v in "
        "_base_.optim_wrapper.items() if k not in ('type', 'dtype', 'loss_scale')}})\n")
DDP = FLEXIBLE.format(strategy='DDPStrategy', args='') + FP32
FSDP = FLEXIBLE.format(strategy='FSDPStrategy', args=", state_dict_cfg='full'") + FP32  # one file


@pytest.fixture(scope='module')
def peco_cfg(tiny_peco_parts, tmp_path_factory):
    data, tokenizer = tiny_peco_parts
    tmp = tmp_path_factory.mktemp('cfg')
    return lambda name, iters, extra='': write(
        tmp / f'{name}.py', TINY_PECO + extra, data=data, tokenizer=tokenizer, iters=iters)


def losses(log: str) -> list[float]:
    return [float(v) for v in re.findall(r'Iter\(train\).*? loss: ([\d.]+)', log)]


# torch 2.11.0's FSDP on two CPU processes (gloo): rank 0 dies of SIGSEGV in the first steps
# (measured with `make test-torch-low`); torch 2.14.1 trains and matches DDP. Strict: the mark
# fails the suite once a torch 2.11 build stops crashing.
@pytest.mark.xfail(tuple(int(v) for v in torch.__version__.split('+')[0].split('.')[:2])
                   < (2, 12), reason="torch 2.11's FSDP on CPU (gloo) segfaults in rank 0",
                   strict=True)
def test_fsdp_on_two_cpu_processes_matches_ddp(peco_cfg, tmp_path):
    """FlexibleRunner + FSDPStrategy (FULL_SHARD) trains the same model as FlexibleRunner +
    DDPStrategy: same losses, same weights after 3 steps, and a plain PeCo checkpoint."""
    runs = {}
    for name, extra in (('ddp', DDP), ('fsdp', FSDP)):
        wd = tmp_path / name
        out = run_tool(['bash', 'tools/dist_train.sh', peco_cfg(name, 3, extra), '2',
                        '--work-dir', wd], timeout=300)
        runs[name] = (out.stdout + out.stderr,
                      read_checkpoint(wd / 'iter_3.pth', map_location='cpu'))
    log = runs['fsdp'][0]
    assert 'FSDP.state_dict_type()' in log  # torch's FSDP wrapper was built
    # the config dump and the environment block are in the run's log file, not the console
    file_log = run_log(tmp_path / 'fsdp')
    assert "type='FSDPStrategy'" in file_log and 'Distributed training: True' in file_log
    # the demo config clips gradients by norm (3.0): the launcher says once that mmengine
    # clips each shard by its own norm under FSDP
    assert log.count('optim_wrapper.clip_grad with FSDPStrategy') == 1
    assert len(losses(log)) == 3
    torch.testing.assert_close(torch.tensor(losses(log)), torch.tensor(losses(runs['ddp'][0])),
                               atol=2e-4, rtol=0)
    fsdp = runs['fsdp'][1]['state_dict']
    ddp = {k.removeprefix('module.'): v for k, v in runs['ddp'][1]['state_dict'].items()}
    assert set(fsdp) == set(ddp)  # no FSDP prefixes: a plain PeCo state dict
    for k in ddp:
        torch.testing.assert_close(fsdp[k].float(), ddp[k].float(), atol=1e-4, rtol=0,
                                   msg=k)
    assert losses(log)[-1] < losses(log)[0]  # it trained


def start_nodes(cfg, tmp_path, extra=()):
    """Two torchrun 'nodes' of one process each, meeting at 127.0.0.1 on a free port."""
    port, procs = free_port(), []
    for rank in (0, 1):
        env = dict(os.environ, NNODES='2', NODE_RANK=str(rank), MASTER_ADDR='127.0.0.1',
                   PORT=str(port), OMP_NUM_THREADS='1', PYTHONPATH=str(ROOT),
                   PYTHON=sys.executable)  # the suite's python, not the checkout's .venv
        log = open(tmp_path / f'node{rank}.log', 'w')
        procs.append(subprocess.Popen(
            ['bash', 'tools/dist_train.sh', str(cfg), '1', '--work-dir',
             str(tmp_path / f'wd{rank}'), *extra], cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT))
    return procs


def node_log(tmp_path, rank) -> str:
    return (tmp_path / f'node{rank}.log').read_text()


def test_two_nodes_train_together(peco_cfg, tmp_path):
    procs = start_nodes(peco_cfg('nodes', 3), tmp_path)
    try:
        rcs = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            signal_tree(process_tree(p.pid))
    assert rcs == [0, 0], node_log(tmp_path, 0)[-3000:] + node_log(tmp_path, 1)[-3000:]
    log = node_log(tmp_path, 0)
    assert 'GPU number: 2' in log and 'Distributed launcher: pytorch' in log
    assert len(losses(log)) == 3 and (tmp_path / 'wd0' / 'iter_3.pth').exists()
    assert not (tmp_path / 'wd1' / 'iter_3.pth').exists()  # rank 1 saves nothing


def survivor_after(victim, procs, tmp_path, sig):
    """Signal every process of node `victim` once node 0 logged step 3; return the other
    node's exit code and how many seconds it took to exit."""
    deadline = time.time() + 300
    while not re.search(r'Iter\(train\) \[ *3/', node_log(tmp_path, 0)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), \
            node_log(tmp_path, 0)[-3000:]
        time.sleep(0.5)
    signal_tree(process_tree(procs[victim].pid), sig)
    t0 = time.time()
    try:
        rc = procs[1 - victim].wait(timeout=180)
    except subprocess.TimeoutExpired:
        rc = None
    return rc, time.time() - t0


def test_a_dead_node_stops_the_other_with_an_error(peco_cfg, tmp_path):
    # node 0, which also hosts the rendezvous store, is the harder one to lose (node 1 dying
    # stops node 0 the same way, by gloo's closed connection)
    victim = 0
    procs = start_nodes(peco_cfg('dies', 2000), tmp_path)
    try:
        rc, seconds = survivor_after(victim, procs, tmp_path, signal.SIGKILL)
    finally:
        for p in procs:
            signal_tree(process_tree(p.pid))
    other = node_log(tmp_path, 1 - victim)
    assert rc not in (0, None) and seconds < 60, (rc, seconds, other[-3000:])
    # gloo saw the peer go, or the rendezvous store (hosted by the dead node) did: the
    # message depends on which connection notices first
    assert re.search(r'Connection (closed|reset) by peer|Broken pipe|recvValue|'
                     r'DistStoreError|TCPStore', other), other[-3000:]
    print(f'node {1 - victim} exited {rc} {seconds:.1f} s after node {victim} was killed')


def test_a_hung_node_is_given_up_after_the_timeout(peco_cfg, tmp_path):
    procs = start_nodes(peco_cfg('hangs', 2000), tmp_path,
                        extra=['--cfg-options', 'env_cfg.dist_cfg.timeout=10'])
    try:
        rc, seconds = survivor_after(1, procs, tmp_path, signal.SIGSTOP)
    finally:
        for p in procs:
            signal_tree(process_tree(p.pid))  # SIGKILL ends stopped processes too
    other = node_log(tmp_path, 0)
    assert rc not in (0, None) and 10 <= seconds < 70, (rc, seconds, other[-3000:])
    assert 'Timed out waiting 10000ms' in other
    print(f'node 0 exited {rc} {seconds:.1f} s after node 1 stopped (timeout 10 s)')


def test_dist_test_on_two_processes_gives_the_single_process_metrics(
        tmp_path, image_folder, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    cfg = write(tmp_path / 'cls.py', TINY_CLS, data=image_folder, iters=2)
    run(str(cfg), str(tmp_path / 'wd'))
    ckpt = tmp_path / 'wd' / 'iter_2.pth'
    single = run(str(cfg), str(tmp_path / 't1'), mode='test', checkpoint=str(ckpt)).metrics
    run_tool(['bash', 'tools/dist_test.sh', cfg, ckpt, '2', '--work-dir', tmp_path / 't2',
              '--out', tmp_path / 'm.json'], timeout=300)
    import json
    both = json.loads((tmp_path / 'm.json').read_text())
    assert both == pytest.approx(single) and set(both) == {'accuracy/top1'}
