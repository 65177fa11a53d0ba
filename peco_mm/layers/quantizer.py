"""EMA vector quantizer (van den Oord et al. 2017, appendix; PeCo Sec. 3.1 and "Vector
Quantizer" in Sec. 3.4): exact nearest-codeword search, an exponential-moving-average codebook,
commitment loss β·||sg[q] - z||², straight-through gradients, data / k-means initialisation and
dead-code restarts from current encoder outputs.

With the EMA update, the codebook term ||sg[z] - q||² of Eq. 5 is replaced by the moving
averages (it would give the codebook no gradient anyway); `loss` is the commitment term.

Distributed: the per-step counts and sums are all-reduced and initialisation / restarts are
drawn on rank 0 and broadcast, so every rank holds the same codebook after every step.

Restarts draw from the quantizer's own random generator (seeded from torch's initial seed
when it is built), whose state is part of the state dict (`quantizer._extra_state`): a run
resumed from a checkpoint draws the same restarts as one never interrupted (torch's global
random state is not in a checkpoint). A state dict without it (a file written before) keeps
the generator as built.

Dead codes are judged against the uniform usage rate: with N vectors per step over all ranks
and K codes, a code used uniformly gets N/K assignments per step; a code whose EMA count falls
below `restart_threshold`·N/K is dead. An absolute count would make the rule depend on the
batch: at a small total batch N/K itself is below 1 and every code would be redrawn each step.

Plain PyTorch, no registry. Contract (vector-quantize-pytorch style):
    quantized, codes, loss = vq(z)          # z (B, D, h, w) -> (B, D, h, w), (B, h, w), ()
    codes = vq.encode(z)                    # (B, D, h, w) -> (B, h, w), no EMA update
    vectors = vq.codes_to_vectors(codes)    # (B, h, w) -> (B, D, h, w)
Codebook usage and perplexity are computed by `codebook_stats` (here, and nowhere else).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine import dist  # process-group calls: no-ops in a single process

CODEBOOK_SIZE = 8192  # K of the paper (Sec. 3.4): the default of every codebook and MIM head
INIT_CHOICES = ('data', 'kmeans', 'random')


# ---- distributed helpers (mmengine.dist; no-ops in a single process) --------------------------
def _all_gather_rows(x: torch.Tensor) -> torch.Tensor:
    """Concatenate (N_r, D) rows of every rank (ranks may hold different N_r)."""
    if dist.get_world_size() == 1:
        return x
    sizes = dist.all_gather(torch.tensor([x.shape[0]], device=x.device))
    padded = x.new_zeros(int(max(s.item() for s in sizes)), x.shape[1])
    padded[:x.shape[0]] = x
    out = dist.all_gather(padded)
    return torch.cat([o[:int(s.item())] for o, s in zip(out, sizes)])


# ---- nearest search -----------------------------------------------------------------------------
def nearest_codes(x: torch.Tensor, codebook: torch.Tensor, max_chunk_elems: int = 1 << 24
                  ) -> torch.Tensor:
    """Exact argmin_k ||x_i - e_k||² for (N, D) rows against a (K, D) codebook: (N,) long.

    Rows are processed in chunks so that at most `max_chunk_elems` distances (N_chunk × K)
    exist at once: 2^24 fp32 distances = 64 MiB, whatever N is. Computed in at least fp32,
    also inside an autocast region (which would otherwise run the addmm in bf16 / fp16).
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    x = x.to(dtype)
    e = codebook.to(dtype)
    e_sq = (e * e).sum(1)  # (K,)
    K = e.shape[0]
    step = max(1, max_chunk_elems // max(K, 1))
    out = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
    with full_precision(x):
        for s in range(0, x.shape[0], step):
            xc = x[s:s + step]  # (n, D)
            # ||x||² is constant per row: argmin of ||e||² - 2 x·e
            d = torch.addmm(e_sq.unsqueeze(0), xc, e.t(), beta=1.0, alpha=-2.0)  # (n, K)
            out[s:s + step] = d.argmin(1)
    return out


def codewords(codes: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """(B, h, w) integer codes -> (B, D, h, w) rows of the (K, D) codebook; codes outside
    [0, K) are refused."""
    if codes.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f'codes must be integer indices, got {codes.dtype}')
    K = codebook.shape[0]
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= K):
        raise ValueError(f'codes must lie in [0, {K}), got '
                         f'[{int(codes.min())}, {int(codes.max())}]')
    return F.embedding(codes.long(), codebook).permute(0, 3, 1, 2)


def full_precision(t: torch.Tensor):
    """Autocast off on `t`'s device: what runs inside keeps its inputs' dtype (fp32 here)."""
    return torch.autocast(t.device.type, enabled=False)


def kmeans(x: torch.Tensor, k: int, iters: int = 10, generator: torch.Generator | None = None
           ) -> torch.Tensor:
    """Lloyd's k-means on (N, D) rows, initialised from random rows; empty clusters keep their
    previous centre. Returns (k, D)."""
    idx = _sample_rows(x.shape[0], k, x.device, generator)
    centres = x[idx].clone()
    for _ in range(iters):
        a = nearest_codes(x, centres)
        sums = torch.zeros_like(centres).index_add_(0, a, x)
        counts = torch.bincount(a, minlength=k).to(x.dtype)
        nonempty = counts > 0
        centres[nonempty] = sums[nonempty] / counts[nonempty, None]
    return centres


def _sample_rows(n: int, k: int, device, generator=None) -> torch.Tensor:
    if n >= k:
        return torch.randperm(n, generator=generator, device='cpu')[:k].to(device)
    return torch.randint(n, (k,), generator=generator, device='cpu').to(device)


# ---- the quantizer -------------------------------------------------------------------------------
class EMAVectorQuantizer(nn.Module):
    """EMA codebook quantizer; see the module docstring.

    Args:
        num_embeddings: K, the codebook size (8192 in the paper).
        embed_dims: D, the codeword width.
        decay: EMA decay of the counts and sums (0.99).
        beta: commitment weight β (0.25).
        eps: Laplace smoothing of the counts.
        init: 'data' (random encoder outputs of the first batch, gathered over ranks),
            'kmeans' (k-means on them), 'random' (normal init, no data).
        kmeans_iters: Lloyd iterations for init='kmeans'.
        restart_threshold: a code whose EMA count (assignments per step, over all ranks)
            falls below this fraction of the uniform rate N/K is restarted from a random
            current encoder output; 0 disables restarts, values must be < 1.
        restart_interval: check for dead codes every this many training steps.
        max_chunk_elems: bound on the distance matrix held at once during search.
    """
    # a frozen tokenizer reads the codebook from its file: no data init, no restarts
    FROZEN_ARGS = dict(init='random', restart_threshold=0.0)

    def __init__(self, num_embeddings: int = CODEBOOK_SIZE, embed_dims: int = 256,
                 decay: float = 0.99,
                 beta: float = 0.25, eps: float = 1e-5, init: str = 'data',
                 kmeans_iters: int = 10, restart_threshold: float = 0.1,
                 restart_interval: int = 1, max_chunk_elems: int = 1 << 24) -> None:
        super().__init__()
        if num_embeddings < 2:
            raise ValueError(f'num_embeddings={num_embeddings}; needs at least 2 codes')
        if embed_dims < 1:
            raise ValueError(f'embed_dims={embed_dims} must be positive')
        if not 0.0 <= decay < 1.0:
            raise ValueError(f'decay={decay}; allowed: 0 <= decay < 1')
        if beta < 0:
            raise ValueError(f'beta={beta} must be >= 0')
        if init not in INIT_CHOICES:
            raise ValueError(f'init={init!r}; allowed: {INIT_CHOICES}')
        if not 0 <= restart_threshold < 1 or restart_interval < 1:
            raise ValueError(
                f'restart_threshold={restart_threshold}, restart_interval={restart_interval}: '
                'the threshold is a fraction of the uniform usage rate N/K (0 <= t < 1, e.g. '
                '0.1; 0 disables restarts) and the interval >= 1 steps')
        self.num_embeddings = num_embeddings
        self.embed_dims = embed_dims
        self.decay = decay
        self.beta = beta
        self.eps = eps
        self.init = init
        self.kmeans_iters = kmeans_iters
        self.restart_threshold = restart_threshold
        self.restart_interval = restart_interval
        self.max_chunk_elems = max_chunk_elems

        embedding = torch.randn(num_embeddings, embed_dims)
        self.register_buffer('embedding', embedding)  # (K, D), the codebook
        self.register_buffer('cluster_size', torch.ones(num_embeddings))  # EMA counts (K,)
        self.register_buffer('embed_sum', embedding.clone())  # EMA sums (K, D)
        self.register_buffer('initted', torch.tensor(init == 'random'))
        self.register_buffer('steps', torch.zeros((), dtype=torch.long))
        # health statistics over a logging window (read and reset by CodebookHealthHook)
        self.register_buffer('window_counts', torch.zeros(num_embeddings), persistent=False)
        self.register_buffer('window_restarts', torch.zeros((), dtype=torch.long),
                             persistent=False)
        self.register_buffer('total_restarts', torch.zeros((), dtype=torch.long))
        self.generator = torch.Generator().manual_seed(torch.initial_seed())  # restarts' draws
        self.register_load_state_dict_pre_hook(EMAVectorQuantizer.keep_restart_state)

    # ---- public API -----------------------------------------------------------------------
    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """z (B, D, h, w) -> quantized (B, D, h, w) with straight-through gradient,
        codes (B, h, w) long, commitment loss (scalar)."""
        B, D, h, w = z.shape
        flat = self.flatten(z)  # (N, D) fp32
        update = self.training and torch.is_grad_enabled()
        with full_precision(flat):  # search, EMA update and commitment loss in fp32
            if update and not bool(self.initted):
                self.initialise_codebook(flat.detach())
            codes = self.quantize(flat.detach())  # (N,)
            if update:
                self.ema_update(flat.detach(), codes)
                if self.restart_threshold > 0 and int(self.steps) % self.restart_interval == 0:
                    self.restart_dead_codes(flat.detach())
            q = F.embedding(codes, self.embedding)  # (N, D)
            loss = self.beta * F.mse_loss(flat, q.detach())
            q = flat + (q - flat).detach()  # straight-through
        quantized = q.view(B, h, w, D).permute(0, 3, 1, 2).to(z.dtype)  # (B, D, h, w)
        return quantized, codes.view(B, h, w), loss

    @torch.no_grad()
    def encode(self, z: torch.Tensor) -> torch.Tensor:
        """z (B, D, h, w) -> codes (B, h, w) long: nearest codewords only, no EMA update,
        no initialisation, no restart, whatever the mode (the target generator's path)."""
        B, _, h, w = z.shape
        return self.quantize(self.flatten(z)).view(B, h, w)

    def flatten(self, z: torch.Tensor) -> torch.Tensor:
        """(B, D, h, w) -> (B·h·w, D) fp32 rows, row order (b, i, j)."""
        if z.dim() != 4 or z.shape[1] != self.embed_dims:
            raise ValueError(f'quantizer expects (B, {self.embed_dims}, h, w), got '
                             f'{tuple(z.shape)}')
        D = z.shape[1]
        return z.permute(0, 2, 3, 1).reshape(-1, D).float()

    def quantize(self, flat: torch.Tensor) -> torch.Tensor:
        """(N, D) vectors -> (N,) indices of the nearest codewords (exact, chunked)."""
        return nearest_codes(flat, self.embedding, self.max_chunk_elems)

    def codes_to_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) long -> (B, D, h, w) codewords."""
        return codewords(codes, self.embedding)

    # ---- training steps ---------------------------------------------------------------------
    @torch.no_grad()
    def initialise_codebook(self, flat: torch.Tensor) -> None:
        """Codebook from current encoder outputs of all ranks (rank 0 draws, then broadcasts)."""
        data = _all_gather_rows(flat)
        K = self.num_embeddings
        if self.init == 'kmeans':
            new = kmeans(data, K, self.kmeans_iters)
        else:
            new = data[_sample_rows(data.shape[0], K, data.device)]
            if data.shape[0] < K:  # fewer vectors than codes: jitter the repeats
                new = new + 1e-3 * new.std() * torch.randn_like(new)
        new = new.contiguous()
        dist.broadcast(new, src=0)
        self.embedding.copy_(new)
        self.embed_sum.copy_(new)
        self.cluster_size.fill_(1.0)
        self.initted.fill_(True)

    @torch.no_grad()
    def ema_update(self, flat: torch.Tensor, codes: torch.Tensor) -> None:
        """N_k ← γ N_k + (1-γ) n_k;  m_k ← γ m_k + (1-γ) Σ_{c_i=k} z_i;  e_k = m_k / Ñ_k,
        with n_k and the sums all-reduced over ranks and Ñ the Laplace-smoothed counts.
        Non-finite rows count for nothing, so a step that the non-finite loss guard skips
        leaves the codebook finite (no host sync: masked, not removed)."""
        K = self.num_embeddings
        finite = torch.isfinite(flat).all(dim=1)  # (N,)
        flat = torch.where(finite.unsqueeze(1), flat, torch.zeros_like(flat))
        counts = torch.bincount(codes, weights=finite.to(flat.dtype), minlength=K)  # (K,)
        sums = torch.zeros(K, flat.shape[1], device=flat.device, dtype=flat.dtype)
        sums.index_add_(0, codes, flat)  # (K, D)
        dist.all_reduce(counts, op='sum')
        dist.all_reduce(sums, op='sum')
        g = self.decay
        self.cluster_size.mul_(g).add_(counts, alpha=1 - g)
        self.embed_sum.mul_(g).add_(sums, alpha=1 - g)
        n = self.cluster_size.sum()
        smoothed = (self.cluster_size + self.eps) / (n + K * self.eps) * n
        self.embedding.copy_(self.embed_sum / smoothed.unsqueeze(1))
        self.window_counts.add_(counts)
        self.steps.add_(1)

    def uniform_rate(self) -> torch.Tensor:
        """EMA of N/K, the assignments per step each code would get under uniform use: the
        mean EMA count (the counts of one step sum to N over all ranks)."""
        return self.cluster_size.mean()

    @torch.no_grad()
    def restart_dead_codes(self, flat: torch.Tensor) -> int:
        """Replace codes whose EMA count is below restart_threshold × the uniform rate by random
        current encoder outputs (gathered over ranks, drawn on rank 0, broadcast). A restarted
        code starts at the uniform rate, so it has the EMA's time to prove itself before it is
        judged again. Returns how many were restarted."""
        rate = self.uniform_rate()
        dead = self.cluster_size < self.restart_threshold * rate  # (K,), same on every rank
        n_dead = int(dead.sum())
        if n_dead == 0:
            return 0
        data = _all_gather_rows(flat)
        if dist.get_world_size() > 1:  # every rank draws as rank 0 (one state to checkpoint)
            state = self.generator.get_state()
            dist.broadcast(state, src=0)
            self.generator.set_state(state.cpu())
        new = data[_sample_rows(data.shape[0], n_dead, data.device, self.generator)]
        new = new.contiguous()
        dist.broadcast(new, src=0)
        self.embedding[dead] = new
        self.embed_sum[dead] = new * rate
        self.cluster_size[dead] = rate
        self.window_restarts.add_(n_dead)
        self.total_restarts.add_(n_dead)
        return n_dead

    # ---- the restarts' random state in the state dict ----------------------------------------
    def get_extra_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_extra_state(self, state) -> None:
        expected = self.generator.get_state()
        if (not isinstance(state, torch.Tensor) or state.dtype != torch.uint8
                or state.shape != expected.shape):
            got = (f'{state.dtype} {tuple(state.shape)}' if isinstance(state, torch.Tensor)
                   else type(state).__name__)
            raise ValueError(f'quantizer._extra_state: expected the restarts\' random state, '
                             f'a uint8 tensor of shape {tuple(expected.shape)}; got {got}')
        self.generator.set_state(state.cpu())

    def keep_restart_state(self, state_dict: dict, prefix: str, *_) -> None:
        """torch's load_state_dict pre-hook (registered in `__init__`): a file written before
        the restarts' random state was saved has no `_extra_state`; the generator stays as
        built instead of the key being reported missing."""
        state_dict.setdefault(prefix + '_extra_state', self.get_extra_state())

    # ---- health ----------------------------------------------------------------------------------
    @torch.no_grad()
    def pop_window_stats(self) -> dict[str, float]:
        """Usage (fraction of codes used), perplexity and restarts since the last call."""
        stats = codebook_stats(self.window_counts)
        stats['restarts'] = float(self.window_restarts)
        self.window_counts.zero_()
        self.window_restarts.zero_()
        return stats


def codebook_stats(counts: torch.Tensor) -> dict[str, float]:
    """From per-code counts: usage = fraction of codes used at least once; perplexity =
    exp(entropy of the code distribution), between 1 and K (K = uniform use)."""
    counts = counts.double()
    total = counts.sum()
    usage = float((counts > 0).double().mean())
    if total <= 0:
        return dict(usage=usage, perplexity=0.0)
    p = counts / total
    ent = -(p[p > 0] * p[p > 0].log()).sum()
    return dict(usage=usage, perplexity=float(ent.exp()))
