"""The α-β (Hockney) cost model and the AllReduce algorithms' costs, shared by every page.

Notation (docs/notation.md): N ranks, a message of S bytes (nccl-tests' S), α seconds of start-up per
message, β seconds per byte (1/β is the per-direction link bandwidth). A step in which every
rank sends one m-byte message to one peer and receives one from another costs α + mβ
(full-duplex, single-port links).
"""
from __future__ import annotations

import numpy as np

# --8<-- [start:costs]
def log2_ceil(n):
    """⌈log₂ n⌉ for integer n ≥ 1 (exact for arrays too)."""
    n = np.asarray(n)
    return np.ceil(np.log2(n)).astype(int)


def ring_allreduce_time(n, s, alpha, beta):
    """Ring: 2(N−1) steps, each moving S/N bytes: 2(N−1)α + 2(N−1)/N·Sβ."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * s * beta


def recursive_doubling_time(n, s, alpha, beta):
    """Recursive doubling: log₂N steps, each exchanging the whole S bytes (N a power of 2; for other
    N the fold onto 2^⌊log₂N⌋ ranks takes ⌊log₂N⌋ + 2 steps, one more than this, Ch1-02)."""
    k = log2_ceil(n)
    return k * alpha + k * s * beta


def rabenseifner_time(n, s, alpha, beta):
    """Recursive-halving reduce-scatter + recursive-doubling all-gather (N a power of 2)."""
    n = np.asarray(n, dtype=float)
    k = log2_ceil(n)
    return 2 * k * alpha + 2 * (n - 1) / n * s * beta


def naive_allreduce_time(n, s, alpha, beta):
    """Reduce to a root, then broadcast from it, the root talking to one peer at a time."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) * (alpha + s * beta)


def double_binary_tree_time(n, s, alpha, beta):
    """NCCL-style double binary tree, pipelined: an idealised lower envelope (Ch1-02).

    Each tree carries S/2 bytes. A rank is an inner node in one tree (receives 2·S/2 from its
    children, sends S/2 to its parent, and the reverse in the broadcast) and a leaf in the
    other, so the busiest rank sends 2S and receives 2S (the mean is 2(N−1)/N·S). Included: α
    once per tree level, up ⌈log₂N⌉ levels and down as many, and the busiest rank's 2S bytes.
    Ignored: α per pipeline segment, the bytes of filling and draining the pipeline, and any
    step in which a link idles; so a real schedule of M segments takes longer (at least 4M
    steps for N ≥ 4). NCCL's tuning model (src/graph/tuning.cc) has the same form: tree algbw =
    busBw/2, latency 2·((ranks per node − 1)·intraLat + log₂(nNodes)·interLat).
    """
    k = log2_ceil(n)
    return 2 * k * alpha + 2 * s * beta
# --8<-- [end:costs]


# --8<-- [start:tree-costs]
def binary_tree_time(n, s, alpha, beta):
    """Unpipelined binary tree (NCCL's btree): the whole S climbs, then descends, one child per step.

    (4⌈log₂N⌉ − 2)(α + Sβ): exact for N a power of 2 (root 0 has one child), an upper bound
    otherwise (Ch1-02).
    """
    k = log2_ceil(n)
    return (4 * k - 2) * (alpha + s * beta)
# --8<-- [end:tree-costs]

# --8<-- [start:hier-costs]
def hierarchical_allreduce_time(nodes, per_node, s, alpha_intra, beta_intra, alpha_inter, beta_inter):
    """2D AllReduce on n_node = `nodes` nodes of n_gpu = `per_node` ranks, local rank l using NIC l:
    ring ReduceScatter in each node (n_gpu−1 steps of S/n_gpu), ring AllReduce across nodes on each of
    the n_gpu rails (2(n_node−1) steps of S/N), ring AllGather in each node (n_gpu−1 steps of S/n_gpu)."""
    n_gpu, n_node = np.asarray(per_node, dtype=float), np.asarray(nodes, dtype=float)
    return (2 * (n_gpu - 1) * (alpha_intra + s / n_gpu * beta_intra)
            + 2 * (n_node - 1) * (alpha_inter + s / (n_gpu * n_node) * beta_inter))


def flat_ring_two_level_time(nodes, per_node, s, alpha_intra, beta_intra, alpha_inter, beta_inter, channels=1):
    """One ring over all N = n_node·n_gpu ranks, laid out node by node, split into `channels` rings that use
    different NICs (NCCL's channels). Every one of its 2(N−1) steps has hops inside nodes and
    hops across nodes; the step lasts as long as the slower kind. Per step a GPU's intra-node link
    carries S/N in total (all channels), a NIC carries S/(channels·N)."""
    n = np.asarray(nodes, dtype=float) * np.asarray(per_node, dtype=float)
    step = np.maximum(alpha_intra + s / n * beta_intra, alpha_inter + s / (channels * n) * beta_inter)
    return 2 * (n - 1) * step
# --8<-- [end:hier-costs]


ALGORITHMS = {
    "ring": ring_allreduce_time,
    "recursive doubling": recursive_doubling_time,
    "Rabenseifner": rabenseifner_time,
    "naive (reduce+bcast)": naive_allreduce_time,
    "double binary tree": double_binary_tree_time,
}


# --8<-- [start:bounds]
def allreduce_bandwidth_lower_bound(n, s, beta):
    """Any element-wise AllReduce: some rank sends ≥ 2(N−1)/N·S bytes, so T ≥ that·β."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) / n * s * beta


def allreduce_latency_lower_bound(n, alpha):
    """Single-port rounds: knowledge at most doubles per round, so T ≥ ⌈log₂N⌉·α."""
    return log2_ceil(n) * alpha
# --8<-- [end:bounds]


# --8<-- [start:crossover]
def crossover_bytes(n, alpha, beta, fast_small, fast_large):
    """Message size S* above which `fast_large` is strictly cheaper than `fast_small`.

    Both costs are affine in S: T = a + b·S. Three cases, told apart (not folded into one value):
      * 0.0  — `fast_large` is never slower for any S ≥ 0 (a_L ≤ a_s and b_L ≤ b_s);
      * inf  — `fast_large` is never cheaper for large S (b_L ≥ b_s and it does not win at S = 0,
               or b_L > b_s: it may win small messages but loses every large one);
      * S* = (a_L − a_s)/(b_s − b_L) > 0 otherwise: `fast_small` wins below, `fast_large` above.
    Slopes or intercepts equal to within 1e-9 (relative) count as equal; the slopes are read over
    2^40 bytes so that the intercept does not swamp them in floating point.
    """
    s1 = float(2 ** 40)
    a_s, a_l = fast_small(n, 0.0, alpha, beta), fast_large(n, 0.0, alpha, beta)
    b_s = (fast_small(n, s1, alpha, beta) - a_s) / s1
    b_l = (fast_large(n, s1, alpha, beta) - a_l) / s1
    a_s, a_l, b_s, b_l = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a_s, a_l, b_s, b_l)))
    same_b = np.isclose(b_s, b_l, rtol=1e-9, atol=0.0)
    a_le = (a_l <= a_s) | np.isclose(a_l, a_s, rtol=1e-9, atol=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = (a_l - a_s) / (b_s - b_l)
    out = np.where(same_b, np.where(a_le, 0.0, np.inf),
                   np.where(b_s > b_l, np.where(a_le, 0.0, m), np.inf))
    return out[()] if out.ndim == 0 else out
# --8<-- [end:crossover]


# --8<-- [start:fit]
def fit_alpha_beta(steps, bytes_per_step, seconds):
    """Least-squares fit of T = steps·α + bytes_per_step·β (both ≥ 0 not enforced).

    `steps` and `bytes_per_step` come from the algorithm's cost formula evaluated at each
    measured size, so the same fit serves every collective. Returns (α, β, relative residuals).
    """
    a = np.column_stack([np.asarray(steps, float), np.asarray(bytes_per_step, float)])
    t = np.asarray(seconds, float)
    # weight each point by 1/t so that small and large messages count alike (relative error)
    w = 1.0 / t
    coef, *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
    alpha, beta = float(coef[0]), float(coef[1])
    pred = a @ coef
    return alpha, beta, (pred - t) / t
# --8<-- [end:fit]


# nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md): busbw = algbw · factor(n)
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
