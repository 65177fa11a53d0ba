"""EMA vector quantizer: exact search, EMA formula, init, dead-code restarts, DDP sync."""
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from peco_mm.layers.quantizer import EMAVectorQuantizer, codebook_stats, kmeans, nearest_codes


def test_nearest_codes_equal_brute_force_in_bounded_chunks():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 16, generator=g, dtype=torch.float64)
    e = torch.randn(300, 16, generator=g, dtype=torch.float64)
    brute = ((x[:, None] - e[None]) ** 2).sum(-1).argmin(1)
    # 1000 chunk elements -> 3 rows per chunk: many chunks, same answer
    assert torch.equal(nearest_codes(x, e, max_chunk_elems=1000), brute)
    assert torch.equal(nearest_codes(x, e), brute)
    # fp32 inputs: the chosen code is at the minimal distance (ties up to rounding)
    c32 = nearest_codes(x.float(), e.float(), max_chunk_elems=4096)
    d = ((x[:, None] - e[None]) ** 2).sum(-1)
    assert torch.allclose(d.gather(1, c32[:, None]).squeeze(1), d.min(1).values, rtol=1e-5)


def test_forward_contract_and_straight_through():
    vq = EMAVectorQuantizer(num_embeddings=8, embed_dims=4, init='random')
    z = torch.randn(2, 4, 3, 5, requires_grad=True)
    q, codes, loss = vq(z)
    assert q.shape == z.shape and codes.shape == (2, 3, 5) and codes.dtype == torch.long
    assert torch.allclose(q, vq.codes_to_vectors(codes), atol=1e-6)
    flat = z.detach().permute(0, 2, 3, 1).reshape(-1, 4)
    assert torch.allclose(loss, 0.25 * ((flat - vq.embedding[codes.flatten()]) ** 2).mean())
    q.sum().backward()  # straight-through: d q / d z = identity
    assert torch.allclose(z.grad, torch.ones_like(z))
    with pytest.raises(ValueError, match=r'\[0, 8\)'):
        vq.codes_to_vectors(torch.tensor([[[8]]]))


def test_ema_update_matches_formula():
    torch.manual_seed(0)
    K, D, decay, eps = 6, 3, 0.8, 1e-5
    vq = EMAVectorQuantizer(K, D, decay=decay, eps=eps, init='random', restart_threshold=0)
    vq.train()
    e0, n0, m0 = vq.embedding.clone(), vq.cluster_size.clone(), vq.embed_sum.clone()
    z = torch.randn(1, D, 4, 5)
    flat = z.permute(0, 2, 3, 1).reshape(-1, D)
    codes = ((flat[:, None] - e0[None]) ** 2).sum(-1).argmin(1)
    onehot = torch.nn.functional.one_hot(codes, K).float()  # (N, K)
    n = decay * n0 + (1 - decay) * onehot.sum(0)
    m = decay * m0 + (1 - decay) * onehot.t() @ flat
    tot = n.sum()
    expected = m / ((n + eps) / (tot + K * eps) * tot)[:, None]
    _, c, _ = vq(z)
    assert torch.equal(c.flatten(), codes)
    assert torch.allclose(vq.cluster_size, n, atol=1e-6)
    assert torch.allclose(vq.embed_sum, m, atol=1e-6)
    assert torch.allclose(vq.embedding, expected, atol=1e-5)
    # no update in eval mode or without gradients
    vq.eval()
    vq(z)
    vq.train()
    with torch.no_grad():
        vq(z)
    assert torch.allclose(vq.embedding, expected, atol=1e-5) and int(vq.steps) == 1


@pytest.mark.parametrize('init', ['data', 'kmeans'])
def test_codebook_initialised_from_encoder_outputs(init):
    torch.manual_seed(0)
    centres = torch.tensor([[5.0, 0], [-5, 0], [0, 5], [0, -5]])
    x = (centres[torch.arange(400) % 4] + 0.1 * torch.randn(400, 2))
    vq = EMAVectorQuantizer(4, 2, init=init, restart_threshold=0, kmeans_iters=20).train()
    vq.initialise_codebook(x)
    assert bool(vq.initted)
    if init == 'data':  # each codeword is one of the encoder outputs
        assert torch.cdist(vq.embedding, x).min(1).values.max() < 1e-6
    else:  # k-means finds all four clusters
        assert torch.cdist(centres, vq.embedding).min(1).values.max() < 0.5
    # the first training forward initialises by itself
    vq2 = EMAVectorQuantizer(4, 2, init=init, restart_threshold=0).train()
    vq2(x.t().reshape(1, 2, 20, 20).clone().requires_grad_())
    assert bool(vq2.initted) and torch.cdist(vq2.embedding, centres).min(1).values.max() < 5
    km = kmeans(x, 4, iters=20, generator=torch.Generator().manual_seed(1))
    assert km.shape == (4, 2)


def test_dead_codes_restarted_from_current_outputs():
    torch.manual_seed(0)
    vq = EMAVectorQuantizer(16, 2, decay=0.5, init='random', restart_threshold=0.1).train()
    vq.embedding.mul_(100).add_(1000)  # far from the data: nobody uses them ...
    vq.embedding[0] = 0.0  # ... except code 0
    vq.embed_sum.copy_(vq.embedding)
    z = torch.randn(1, 2, 8, 8).requires_grad_()
    # all 64 vectors -> code 0. Step 1: counts 0.5·1 + 0.5·64 = 32.5 and 0.5 for the 15
    # others; uniform rate = mean count = 40/16 = 2.5, threshold 0.25: nobody dead yet
    vq(z)
    assert int(vq.window_restarts) == 0
    assert abs(float(vq.uniform_rate()) - 2.5) < 1e-6
    # step 2: 48.25 and 0.25; rate 52/16 = 3.25, threshold 0.325 > 0.25: 15 restarted
    vq(z)
    assert int(vq.window_restarts) == 15 and int(vq.total_restarts) == 15
    flat = z.detach().permute(0, 2, 3, 1).reshape(-1, 2)
    dist = torch.cdist(vq.embedding[1:], flat).min(1).values
    assert torch.all(dist < 1e-5)  # each restarted code is one of the batch's vectors
    # a restarted code starts at the uniform rate (its EMA sum consistent with it)
    assert torch.allclose(vq.cluster_size[1:], torch.full((15,), 3.25))
    assert torch.allclose(vq.embed_sum[1:], vq.embedding[1:] * 3.25)
    _, codes, _ = vq(z)
    assert len(codes.unique()) > 1  # and they get used
    stats = vq.pop_window_stats()
    assert stats['restarts'] == 15 and 0 < stats['usage'] <= 1
    assert int(vq.window_restarts) == 0 and float(vq.window_counts.sum()) == 0
    # an absolute count of the old kind (>= 1) is refused, naming what the value means
    with pytest.raises(ValueError, match='fraction of the uniform usage rate'):
        EMAVectorQuantizer(16, 2, restart_threshold=1.0)


def _restart_steps(vq, steps, first=0):
    """`steps` training steps on data where most codes die (3 tight clusters, K = 16)."""
    for step in range(first, first + steps):
        g = torch.Generator().manual_seed(step)  # the data of a step: the same in both runs
        z = (torch.randint(0, 3, (1, 1, 6, 6), generator=g).float() * 5
             + 0.1 * torch.randn(1, 2, 6, 6, generator=g))
        vq(z.requires_grad_())
    return vq


def test_a_resumed_quantizer_restarts_as_an_uninterrupted_one():
    """Restarts draw from the quantizer's generator, saved in its state dict: resumed in a
    process whose global random state differs, the codebook follows the same path."""
    import io

    def fresh():
        return EMAVectorQuantizer(16, 2, decay=0.5, init='data', restart_threshold=0.5).train()

    torch.manual_seed(0)
    whole = _restart_steps(fresh(), 12)
    torch.manual_seed(0)
    first = _restart_steps(fresh(), 6)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    restarts_before = int(first.total_restarts)
    torch.manual_seed(123)  # a new process: another global random state
    resumed = fresh()
    buf.seek(0)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    _restart_steps(resumed, 6, first=6)
    assert torch.equal(resumed.embedding, whole.embedding)
    assert int(resumed.total_restarts) == int(whole.total_restarts)
    assert int(resumed.total_restarts) > restarts_before  # restarts happened after the resume
    # a state dict written before the generator was saved still loads (strictly)
    old = {k: v for k, v in whole.state_dict().items() if k != '_extra_state'}
    EMAVectorQuantizer(16, 2).load_state_dict(old)
    from peco_mm.engine.hooks.resume_check import weight_diffs
    assert weight_diffs(old, whole.state_dict()) == []  # and --resume accepts it
    with pytest.raises(ValueError, match=r"quantizer._extra_state: expected the restarts' "
                       r'random state, a uint8 tensor of shape \(5056,\); got torch.float32'):
        EMAVectorQuantizer(16, 2).load_state_dict({**old, '_extra_state': torch.zeros(5056)})


def _restarts_per_100_steps(vectors_per_step: int, steps: int = 400, seed: int = 0) -> float:
    """K = 256 codes, decay 0.99, data from 64 Gaussian clusters used with Zipf frequencies;
    restarts per 100 steps over the second half of the run (after the EMA settled)."""
    g = torch.Generator().manual_seed(seed)
    K, D = 256, 8
    centres = torch.randn(64, D, generator=g) * 3
    p = 1.0 / torch.arange(1, 65).float()
    torch.manual_seed(seed)
    vq = EMAVectorQuantizer(K, D, decay=0.99, init='data', restart_threshold=0.1).train()
    counted = 0
    for step in range(steps):
        x = centres[torch.multinomial(p, vectors_per_step, True, generator=g)]
        x = x + torch.randn(vectors_per_step, D, generator=g)
        before = int(vq.total_restarts)
        vq(x.t().reshape(1, D, vectors_per_step, 1).clone().requires_grad_())
        if step >= steps // 2:
            counted += int(vq.total_restarts) - before
    return counted / (steps - steps // 2) * 100


def test_restarts_per_interval_comparable_at_small_and_large_batch():
    """64 vectors per step (N/K = 0.25, e.g. 8 images of 14x14 codes against K = 8192 is
    0.19) and 4096 (N/K = 16): the same threshold restarts a small part of the codebook at
    both. An absolute threshold of 0.1 assignments per step redrew 821 codes per 100 steps
    (3.2 K) at the small batch and none at the large one."""
    small, large = _restarts_per_100_steps(64), _restarts_per_100_steps(4096)
    K = 256
    assert large < 0.05 * K, large  # measured: 0
    assert small < 0.2 * K, small  # measured: 25 (EMA noise of 0.25 counts per step)
    assert abs(small - large) < 0.2 * K


def test_encode_returns_codes_without_touching_the_codebook():
    torch.manual_seed(0)
    vq = EMAVectorQuantizer(8, 4, decay=0.5, init='data', restart_threshold=0.5).train()
    z = torch.randn(2, 4, 3, 5, requires_grad=True)
    state = {k: v.clone() for k, v in vq.state_dict().items()}
    codes = vq.encode(z)  # training mode, gradients on: still no init, EMA or restart
    assert codes.shape == (2, 3, 5) and codes.dtype == torch.long
    assert all(torch.equal(v, vq.state_dict()[k]) for k, v in state.items())
    assert float(vq.window_counts.sum()) == 0
    flat = z.detach().permute(0, 2, 3, 1).reshape(-1, 4)
    brute = ((flat[:, None] - vq.embedding[None]) ** 2).sum(-1).argmin(1)
    assert torch.equal(codes.flatten(), brute)
    # the training forward picks the same codes from the same codebook
    vq.eval()
    assert torch.equal(vq(z)[1], codes)
    with pytest.raises(ValueError, match=r'\(B, 4, h, w\)'):
        vq.encode(torch.zeros(1, 3, 2, 2))


def test_codebook_stats_numbers():
    s = codebook_stats(torch.tensor([5.0, 5, 0, 0]))
    assert s['usage'] == 0.5 and abs(s['perplexity'] - 2.0) < 1e-9
    s = codebook_stats(torch.tensor([1.0, 1, 1, 1]))
    assert s['usage'] == 1 and abs(s['perplexity'] - 4.0) < 1e-9


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, out_dir):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world)
    torch.manual_seed(100 + rank)  # different random init and data per rank
    vq = EMAVectorQuantizer(32, 4, decay=0.9, init='data', restart_threshold=0.95).train()
    for step in range(6):
        z = torch.randn(2, 4, 3, 3) * (rank + 1) + step
        vq(z.requires_grad_())
    torch.save({k: v for k, v in vq.state_dict().items()}, f'{out_dir}/rank{rank}.pt')
    dist.destroy_process_group()


def test_ddp_two_processes_keep_codebooks_identical(tmp_path):
    # fork: the workers need no fresh interpreter (and skip re-importing the project)
    mp.start_processes(_ddp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2,
                       join=True, start_method='fork')
    a, b = (torch.load(tmp_path / f'rank{r}.pt') for r in (0, 1))
    assert int(a['total_restarts']) > 0  # restarts happened, and were synchronised
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # and the statistics reflect both ranks' data (counts over 2 ranks x 18 vectors x 6 steps)
    single = EMAVectorQuantizer(32, 4, decay=0.9, init='data')
    assert a['embedding'].shape == single.embedding.shape
