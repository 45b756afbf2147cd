"""Ch2-05 Batch Size Scaling Rules: the code the page runs and the tests import.

A real small model — logistic regression, `torch.nn.Linear(d, 1)` with a BCE loss — on a fixed synthetic
data set whose labels are drawn from a logistic teacher (so the loss has a positive minimum and the
gradient noise never vanishes). The gradient noise scale B_simple = tr(Σ)/|∇𝓛|² (McCandlish et al. 2018,
§2) is measured from per-sample gradients computed with torch.func (vmap of grad), and the
steps/examples trade-off is measured by training with SGD at every batch size over a grid of learning
rates (NumPy, vectorised over learning rates and seeds, deterministic).
"""
from __future__ import annotations

import functools
import math

import numpy as np

D = 8           # features
N_DATA = 512    # training set size
SCALE = 2.0     # teacher logit scale: larger = less label noise
COND = 10.0     # ratio of the largest to the smallest feature scale
IMAGENET_TRAIN = 1_281_167  # ILSVRC-2012 training images (Goyal et al. use "~1.28 million")


@functools.lru_cache(maxsize=None)
def dataset(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N_DATA, D)) * np.geomspace(1.0, 1 / COND, D)  # ill-conditioned features
    w_star = rng.standard_normal(D) * SCALE / np.geomspace(1.0, 1 / COND, D) / math.sqrt(D)
    p = 1 / (1 + np.exp(-(x @ w_star)))
    y = (rng.random(N_DATA) < p).astype(np.float64)
    return x, y


def full_loss(w, x=None, y=None):
    """Mean BCE-with-logits over the whole data set; w may be (d,) or (R, d)."""
    if x is None:
        x, y = dataset()
    z = np.asarray(w) @ x.T
    return np.mean(np.logaddexp(0.0, z) - y * z, axis=-1)


# --8<-- [start:noise]
def per_sample_grads(w: np.ndarray) -> np.ndarray:
    """Per-sample gradients of the BCE loss of torch.nn.Linear(d, 1, bias=False) at w, with torch.func."""
    import torch
    from torch.func import functional_call, grad, vmap

    x, y = dataset()
    model = torch.nn.Linear(D, 1, bias=False).double()
    params = {"weight": torch.as_tensor(w, dtype=torch.float64).reshape(1, D)}

    def loss(p, xi, yi):
        logit = functional_call(model, p, (xi.unsqueeze(0),)).squeeze()
        return torch.nn.functional.binary_cross_entropy_with_logits(logit, yi)

    g = vmap(grad(loss), in_dims=(None, 0, 0))(params, torch.as_tensor(x), torch.as_tensor(y))
    return g["weight"].reshape(len(x), D).numpy()


def b_simple(per_sample: np.ndarray) -> dict:
    """B_simple = tr(Σ)/|∇𝓛|², ∇𝓛 the mean gradient, Σ the per-sample covariance (McCandlish §2)."""
    g = per_sample.mean(axis=0)
    tr_sigma = float(((per_sample - g) ** 2).sum(axis=1).mean())
    return {"G2": float(g @ g), "trSigma": tr_sigma, "B_simple": tr_sigma / float(g @ g)}
# --8<-- [end:noise]


# --8<-- [start:two-batch]
def two_batch_estimate(w: np.ndarray, b_small: int, b_big: int, draws: int = 2000, seed: int = 1) -> dict:
    """McCandlish App. A: E|ĝ_B|² = |∇𝓛|² + tr(Σ)/B, so two batch sizes give unbiased |∇𝓛|² and tr(Σ).

    Uses only mini-batch mean gradients (what a data-parallel job has: per-rank and all-reduced)."""
    x, y = dataset()
    rng = np.random.default_rng(seed)

    def mean_sq(b):
        idx = rng.integers(0, N_DATA, size=(draws, b))
        xb = x[idx]
        z = xb @ w
        gb = np.einsum("rbd,rb->rd", xb, 1 / (1 + np.exp(-z)) - y[idx]) / b
        return float((gb ** 2).sum(axis=1).mean())

    s2, b2 = mean_sq(b_small), mean_sq(b_big)
    g2 = (b_big * b2 - b_small * s2) / (b_big - b_small)
    tr = (s2 - b2) / (1 / b_small - 1 / b_big)
    return {"G2": g2, "trSigma": tr, "B_simple": tr / g2}
# --8<-- [end:two-batch]


def closed_form_grads(w: np.ndarray) -> np.ndarray:
    """Per-sample gradients written out by hand: (σ(x·w) − y)·x (an independent check of torch.func)."""
    x, y = dataset()
    return (1 / (1 + np.exp(-(x @ w))) - y)[:, None] * x


@functools.lru_cache(maxsize=None)
def gd_path(steps: int = 1000, lr: float = 8.0):
    """Full-batch gradient descent from w = 0: the reference trajectory (weights and losses)."""
    x, y = dataset()
    w = np.zeros(D)
    ws, losses = [w.copy()], [float(full_loss(w))]
    for _ in range(steps):
        w = w - lr * closed_form_grads(w).mean(axis=0)
        ws.append(w.copy())
        losses.append(float(full_loss(w)))
    return np.array(ws), np.array(losses)


def loss_floor() -> float:
    return float(gd_path()[1][-1])


def target_loss(frac: float = 0.2) -> float:
    """The sweep's target: the loss after closing all but `frac` of the gap from w = 0 to the floor."""
    _, losses = gd_path()
    return float(losses[-1] + frac * (losses[0] - losses[-1]))


# --8<-- [start:bnoise]
def hessian(w: np.ndarray) -> np.ndarray:
    """Hessian of the mean BCE loss of logistic regression: H = Xᵀ diag(s(1−s)) X / n, s = σ(Xw)."""
    x, _ = dataset()
    s = 1 / (1 + np.exp(-(x @ w)))
    return x.T @ (x * (s * (1 - s))[:, None]) / len(x)


def noise_scales(w: np.ndarray, per_sample: np.ndarray, eta: float | None = None) -> dict:
    """McCandlish §2 at w: B_simple = tr Σ/|G|², B_noise = tr(HΣ)/(GᵀHG), the greedy step η_max = |G|²/(GᵀHG).

    With a fixed learning rate eta (what the sweep's SGD uses), the expected improvement of one step is
    η|G|² − ½η²GᵀHG − ½η² tr(HΣ)/B, which is half its noiseless value at B_eta = 2η tr(HΣ)/(2|G|² − η GᵀHG)."""
    g = per_sample.mean(axis=0)
    dev = per_sample - g
    sigma = dev.T @ dev / len(per_sample)
    h = hessian(w)
    gg, ghg, tr_hs = float(g @ g), float(g @ h @ g), float(np.trace(h @ sigma))
    out = {"B_simple": float(np.trace(sigma)) / gg, "B_noise": tr_hs / ghg, "eta_max": gg / ghg,
           "lambda_max": float(np.linalg.eigvalsh(h)[-1])}
    if eta is not None:
        den = 2 * gg - eta * ghg
        out["B_eta"] = 2 * eta * tr_hs / den if den > 0 else math.inf  # no improvement at all: η > 2 η_max
    return out
# --8<-- [end:bnoise]


def path_integrated_b_crit(frac: float = 0.2) -> dict:
    """Corollary 2.5.3 with B_noise varying along the GD path: S(B) = Σ dL_i (1 + B_noise,i/B)/ΔL_max,i, so
    S_min = Σ dL_i/ΔL_max,i, E_min = Σ dL_i B_noise,i/ΔL_max,i and B_crit = E_min/S_min, a weighted mean of B_noise."""
    ws, losses = gd_path()
    tgt = target_loss(frac)
    s_min = e_min = 0.0
    for i in range(len(ws) - 1):
        if losses[i] <= tgt:
            break
        ns = noise_scales(ws[i], closed_form_grads(ws[i]))
        g = closed_form_grads(ws[i]).mean(axis=0)
        dl_max = float(g @ g) * ns["eta_max"] / 2
        dl = losses[i] - max(losses[i + 1], tgt)
        s_min += dl / dl_max
        e_min += dl * ns["B_noise"] / dl_max
    return {"S_min": float(s_min), "E_min": float(e_min), "B_crit": float(e_min / s_min)}


def noise_along_path(points=(1.0, 0.5, 0.2, 0.1)) -> list[dict]:
    """B_simple at the GD iterates where the remaining gap first drops below each fraction."""
    ws, losses = gd_path()
    rows = []
    for f in points:
        t = losses[-1] + f * (losses[0] - losses[-1])
        i = int(np.argmax(losses <= t))
        ps = per_sample_grads(ws[i])
        rows.append({"gap": f, "step": i, "loss": float(losses[i]), **b_simple(ps), "w": ws[i],
                     "B_noise": noise_scales(ws[i], ps)["B_noise"]})
    return rows


# --8<-- [start:sweep]
BATCHES = tuple(2 ** k for k in range(0, 11))  # 1 … 1024
LRS = tuple(0.2 * 2.0 ** k for k in range(8))  # 0.2 … 25.6
SEEDS = 6


def steps_to_target(b: int, lrs=LRS, seeds: int = SEEDS, target: float | None = None, max_steps: int = 5000):
    """Plain SGD from w = 0 with batch b (sampled with replacement), every lr × seed at once.

    Returns an array (len(lrs),): for each lr the first step at which the full-data loss, averaged
    over the seeds, is at or below the target (inf if never, e.g. when that lr diverges). Runs stop
    as soon as no lr can still beat the best step count found."""
    x, y = dataset()
    target = target_loss() if target is None else target
    lr = np.repeat(np.asarray(lrs, float), seeds)[:, None]
    rng = np.random.default_rng(1000 + b)
    w = np.zeros((len(lr), D))
    hit = np.full(len(lrs), np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(1, max_steps + 1):
            idx = rng.integers(0, len(y), size=(len(lr), b))
            xb = x[idx]
            z = np.einsum("rbd,rd->rb", xb, w)
            g = np.einsum("rbd,rb->rd", xb, 1 / (1 + np.exp(-z)) - y[idx]) / b
            w = w - lr * g
            mean_loss = full_loss(w, x, y).reshape(len(lrs), seeds).mean(axis=1)
            hit[np.isinf(hit) & (mean_loss <= target)] = step
            if step >= hit.min():
                break
    return hit


@functools.lru_cache(maxsize=None)
def sweep() -> list[dict]:
    """For every batch size: the best lr on the grid, its steps S and examples E = S·B to the target."""
    rows = []
    for b in BATCHES:
        s = steps_to_target(b)
        i = int(np.argmin(s))
        rows.append({"B": b, "best_lr": LRS[i], "S": float(s[i]), "E": float(s[i] * b), "all": s.tolist()})
    return rows


def fit_tradeoff(rows) -> dict:
    """Fit S = S_min (1 + B_crit/B), i.e. S linear in 1/B (McCandlish eq. 2.11); E_min = S_min·B_crit."""
    inv_b = np.array([1 / r["B"] for r in rows])
    s = np.array([r["S"] for r in rows])
    slope, intercept = np.polyfit(inv_b, s, 1, w=1 / s)  # relative errors
    return {"S_min": float(intercept), "E_min": float(slope), "B_crit": float(slope / intercept)}
# --8<-- [end:sweep]


# --8<-- [start:moments]
def moment_match(k: int, normalized: bool, eta: float = 0.01, noise: float = 4.0, g: float = 1.0,
                 draws: int = 200_000, seed: int = 0) -> dict:
    """k small steps with batch B vs one step with batch k·B, for a 1-d gradient g + noise/√B (B = 1).

    SGD: step = η·ĝ. Normalised (Adam/RMSprop in the noise-dominated regime, v ≈ E[ĝ²]):
    step = η·ĝ/√E[ĝ²]. Returns mean and variance of the total displacement for the k small steps and
    for the one big step under the linear (η' = kη) and square-root (η' = √k·η) rules."""
    rng = np.random.default_rng(seed)

    def step(eta_, batch, n):
        gh = g + noise / math.sqrt(batch) * rng.standard_normal((draws, n))
        scale = 1 / math.sqrt(g * g + noise * noise / batch) if normalized else 1.0
        return (eta_ * scale * gh).sum(axis=1)

    small = step(eta, 1, k)
    out = {"k": k, "small_mean": float(small.mean()), "small_var": float(small.var())}
    for name, eta_big in (("linear", k * eta), ("sqrt", math.sqrt(k) * eta)):
        big = step(eta_big, k, 1)
        out[f"{name}_mean"], out[f"{name}_var"] = float(big.mean()), float(big.var())
    return out
# --8<-- [end:moments]


# --8<-- [start:goyal]
def goyal_lr(batch: int) -> float:
    """Goyal et al. §5.1: reference learning rate η = 0.1·kn/256 (kn = minibatch size)."""
    return 0.1 * batch / 256


def goyal_warmup_iterations(batch: int, epochs: int = 5, train_images: int = IMAGENET_TRAIN) -> int:
    """Gradual warmup over 5 epochs (§2.2) counted in iterations of the given minibatch."""
    return math.ceil(epochs * train_images / batch)
# --8<-- [end:goyal]


def noise_scale_table(fit: dict, rows) -> dict:
    """Experiment 6's numbers: the noise scales along the path, the fixed lr they are read at (the sweep's best lr
    at the measured batch nearest B_crit in log scale), the path-integrated B_crit, and where the fit falls."""
    near = min(rows, key=lambda r: abs(math.log(r["B"] / fit["B_crit"])))
    eta = near["best_lr"]
    path = []
    for r in noise_along_path():
        ns = noise_scales(r["w"], closed_form_grads(r["w"]), eta=eta)
        path.append({"gap": r["gap"], **ns})
    start, target = path[0], next(p for p in path if p["gap"] == 0.2)
    bc = fit["B_crit"]
    return {"eta": eta, "B_near": near["B"], "path": path, "integrated": path_integrated_b_crit(),
            "below_noise_at_target": bc < target["B_noise"], "ratio_noise": target["B_noise"] / bc,
            "ratio_simple": target["B_simple"] / bc,
            "eta_bracket": start["B_eta"] <= bc <= target["B_eta"]}


def mccandlish_curve(b, b_noise: float):
    """η_opt(B)/η_max = Δ𝓛_opt(B)/Δ𝓛_max = 1/(1 + B_noise/B) (McCandlish eqs. 2.6–2.7)."""
    b = np.asarray(b, float)
    return 1 / (1 + b_noise / b)


def tradeoff_curve(fit: dict, b):
    """The fitted Corollary 2.5.3 curve as (𝓔, 𝓢) at batch sizes b: 𝓢 = 𝓢_min(1 + B_crit/B), 𝓔 = 𝓢·B."""
    b = np.asarray(b, float)
    s = fit["S_min"] * (1 + fit["B_crit"] / b)
    return s * b, s


def sweep_figure(rows, fit: dict, b_noise: float):
    """Left: 𝓢 against 𝓔 with the fitted hyperbola (𝓔 = 𝓢_min·(B + B_crit) along it). Right: the best grid lr
    and η_max/(1 + b_noise/B) with η_max taken as the saturated best lr (the largest one)."""
    from snippets.common import figures

    fig, (ax1, ax2) = figures.new(9.0, 3.6, ncols=2)
    e = np.array([r["E"] for r in rows])
    s = np.array([r["S"] for r in rows])
    ax1.loglog(e, s, "o", label="측정 (최적 lr)")
    bb = np.geomspace(0.5, 4096, 200)
    ax1.loglog(*tradeoff_curve(fit, bb), "k--",
               label=r"$(\mathcal{S}/\mathcal{S}_{min}-1)(\mathcal{E}/\mathcal{E}_{min}-1)=1$ fit")
    for r in rows[::2]:
        ax1.annotate(f"B={r['B']}", (r["E"], r["S"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax1.set_xlabel(r"examples $\mathcal{E}$ to target")
    ax1.set_ylabel(r"steps $\mathcal{S}$ to target")
    ax1.legend(fontsize=8)
    b = np.array([r["B"] for r in rows])
    ax2.semilogx(b, [r["best_lr"] for r in rows], "o", label="grid 최적 lr (측정)")
    eta_max = max(r["best_lr"] for r in rows)
    ax2.semilogx(bb, eta_max * mccandlish_curve(bb, b_noise), "k--", label=r"$\eta_{max}/(1+B_{crit}/B)$")
    ax2.set_xlabel("batch B")
    ax2.set_ylabel("learning rate")
    ax2.set_ylim(0, max(LRS) * 1.1)
    ax2.legend(fontsize=8)
    return figures.svg(fig)
