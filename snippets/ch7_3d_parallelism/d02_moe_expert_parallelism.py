"""Ch7-02 MoE Parallelism: the code the page runs and the tests import.

Routing, capacity and the auxiliary loss live in snippets/common/moe.py (shared with gpu_runs/moe_ep.py);
this module evaluates them on small examples and reads gpu_runs/results/moe_ep.
"""
from __future__ import annotations

import torch

from snippets.common import moe


# --8<-- [start:aux]
def aux_value(probs: torch.Tensor, lam: float = 0.01) -> float:
    return float(moe.aux_loss(probs, lam))


def aux_cases(E: int = 8, T: int = 64, lam: float = 0.01) -> dict[str, float]:
    """L_aux at uniform routing (= λ), at collapse (= λE), and Theorem 7.2.4 (d)'s counter-example below λ (E = 2,
    100 tokens so the split is exactly 90 : 10): 90 tokens tie (0.5, 0.5) and go to expert 0 (argmax takes the
    first), 10 go to expert 1 with p = 1."""
    uniform = torch.full((T, E), 1.0 / E)
    uniform_f = torch.eye(E).repeat(T // E, 1) * 0.5 + 0.5 / E   # each token prefers a different expert, P uniform
    collapse = torch.zeros(T, E)
    collapse[:, 0] = 1.0
    below = torch.cat([torch.tensor([[0.5, 0.5]]).repeat(90, 1), torch.tensor([[0.0, 1.0]]).repeat(10, 1)])
    return {"균등 (모든 확률 1/E)": aux_value(uniform, lam), "token 마다 다른 expert 선호 (f, P 균등)": aux_value(uniform_f, lam),
            "collapse (한 expert 에 확률 1)": aux_value(collapse, lam), "반례 (E = 2, 90 : 10)": aux_value(below, lam)}


def aux_gradient(logits: torch.Tensor, lam: float = 0.01) -> dict[str, torch.Tensor]:
    """d L_aux / d logits from autograd, and the same from the formula with f held constant:
    dL/dP_i = λE f_i, and P_i = mean_t softmax(z_t)_i, so dL/dz_t = (λE/T) · J_softmax(z_t)ᵀ f."""
    z = logits.clone().requires_grad_(True)
    moe.aux_loss(z.softmax(-1), lam).backward()
    p = logits.softmax(-1)
    T, E = p.shape
    f = torch.bincount(p.argmax(-1), minlength=E).to(p.dtype) / T
    by_hand = lam * E / T * p * (f - (p * f).sum(-1, keepdim=True))   # softmax Jacobian applied to f
    return {"autograd": z.grad, "formula": by_hand}
# --8<-- [end:aux]


# --8<-- [start:runs]
def split_matrix(r) -> list[list[int]]:
    """Row i: rows rank i sent to each rank (its send splits), as the run recorded them."""
    return [k["send"] for k in r.measurements["ranks"]]


def traffic_rows(r) -> list[dict]:
    """Per rank: assignments kept, bytes leaving (dispatch), the uniform formula for the kept assignments."""
    m, p = r.measurements, r.params
    W, h = m["W"], p["h"]
    out = []
    for k in m["ranks"]:
        kept_uniform = k["kept_assignments"] * (W - 1) / W * h * 4
        out.append({"rank": k["rank"], "kept": k["kept_assignments"], "asked": k["asked_assignments"],
                    "leaving": k["bytes_leaving"], "uniform_all": m["bytes_uniform_formula"],
                    "uniform_kept": kept_uniform, "dispatch_in": k["dispatch_bytes"], "combine_in": k["combine_bytes"]})
    return out


def sweep_rows(r) -> list[dict]:
    """Capacity-factor sweep: imbalance (max asked / mean), dropped fraction, and the lower bound on drops
    that the summed loads give: an expert can keep at most W·C over the W groups."""
    W = r.measurements["W"]
    rows = []
    for s in r.measurements["sweep"]:
        asked, kept, C = s["asked"], s["kept"], s["capacity"]
        E = len(asked)
        bound = sum(max(0, a - W * C) for a in asked)
        rows.append({"k": s["k"], "cf": s["cf"], "C": C, "imbalance": max(asked) / (sum(asked) / E),
                     "dropped": 1 - sum(kept) / sum(asked), "bound": bound / sum(asked)})
    return rows
# --8<-- [end:runs]


# --8<-- [start:mixtral]
MIXTRAL_8X7B = {"h": 4096, "ffn": 14336, "layers": 32, "experts": 8, "top_k": 2, "vocab": 32000,
                "heads": 32, "kv_heads": 8}   # config.json of mistralai/Mixtral-8x7B-v0.1 (SwiGLU experts, GQA)


def moe_params(c: dict) -> dict[str, int]:
    """Total and active (per token) parameters of a Mixtral-style decoder: attention (GQA) and norms are
    shared, the FFN is E SwiGLU experts (3·h·ffn each) of which a token uses k, a router h·E per layer,
    untied input embedding and LM head."""
    h, d = c["h"], c["h"] // c["heads"]
    attn = 2 * h * h + 2 * h * c["kv_heads"] * d          # W_q, W_o (h×h) and W_k, W_v (h × kv·d)
    expert = 3 * h * c["ffn"]                              # gate, up, down
    shared = c["layers"] * (attn + h * c["experts"] + 2 * h) + 2 * c["vocab"] * h + h
    return {"total": shared + c["layers"] * c["experts"] * expert,
            "active": shared + c["layers"] * c["top_k"] * expert,
            "expert_share": c["layers"] * c["experts"] * expert}
# --8<-- [end:mixtral]


# --8<-- [start:padded]
def padded_rows(r) -> list[dict]:
    """Fixed-capacity dispatch per φ: rank 0's all-to-all bytes counted on the real calls (dispatch +
    combine) against 2·E·n_cap·h·e, the uneven split's bytes for the same kept assignments, and the share
    of all expert rows (E experts × W groups × n_cap, over every rank) that are zero padding."""
    m, p = r.measurements, r.params
    E, W, h = m["E"], m["W"], p["h"]
    out = []
    for j, x in enumerate(m["ranks"][0]["padded"]):
        kept_all = sum(k["padded"][j]["kept"] for k in m["ranks"])
        formula = 2 * moe.a2a_bytes_padded(p["T"], E, x["cf"], p["k"], W, h)["buffer"]
        out.append({"cf": x["cf"], "cap": x["capacity"], "measured": x["a2a_bytes"], "formula": formula,
                    "uneven": 2 * x["kept"] * h * 4, "padding": 1 - kept_all / (E * W * x["capacity"]),
                    "diff": max(k["padded"][j]["diff"] for k in m["ranks"])})
    return out
# --8<-- [end:padded]


# --8<-- [start:lossfree]
def loss_free_balance(T: int = 512, E: int = 8, k: int = 2, steps: int = 300, u: float = 1e-2,
                      skew: float = 2.0, seed: int = 0) -> dict:
    """Aux-loss-free balancing (Wang et al. 2024; DeepSeek-V3 §2.1.2): a per-expert bias b is added to the
    routing scores for the top-k *selection only* (the gate uses the unbiased scores, so b gets no gradient);
    after each batch b_i += u·sign(mean load − load_i). A fixed, skewed router; fresh tokens every step.
    Returns the imbalance max_i load_i / mean load per step, with and without the bias."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(16, E, generator=g)
    tilt = torch.linspace(0, skew, E)
    b = torch.zeros(E)
    with_bias, without = [], []
    for _ in range(steps):
        s = (torch.randn(T, 16, generator=g) @ W / 4 + tilt).sigmoid()   # DeepSeek-V3 scores: sigmoid
        for bias, log in ((b, with_bias), (torch.zeros(E), without)):
            chosen = (s + bias).topk(k, dim=-1).indices
            load = torch.bincount(chosen.flatten(), minlength=E).float()
            log.append(float(load.max() / load.mean()))
        load = torch.bincount((s + b).topk(k, dim=-1).indices.flatten(), minlength=E).float()
        b = b + u * torch.sign(load.mean() - load)
    return {"with_bias": with_bias, "without": without, "bias": b.tolist()}


def aux_global_vs_micro(E: int = 8, T: int = 64, lam: float = 0.01) -> dict[str, float]:
    """Two micro-batches from different domains: the first routes its tokens to experts 0..E/2−1, the
    second to E/2..E−1, each evenly within its half. Per micro-batch the load is skewed; over the global
    batch it is uniform. L_aux computed per micro-batch (then averaged) vs once over the global batch."""
    half = E // 2
    a = torch.zeros(T, E)
    a[torch.arange(T), torch.arange(T) % half] = 1.0
    b = torch.zeros(T, E)
    b[torch.arange(T), half + torch.arange(T) % half] = 1.0
    micro = (float(moe.aux_loss(a, lam)) + float(moe.aux_loss(b, lam))) / 2
    return {"micro": micro, "global": float(moe.aux_loss(torch.cat([a, b]), lam))}
# --8<-- [end:lossfree]


# --8<-- [start:diagram]
def dispatch_diagram() -> str:
    """MoE dispatch and combine on 2 ranks, 4 experts (2 per rank), 6 tokens per rank, top-1, n_cap = 2:
    each token's line goes to the expert the router chose (moe.route), dashed where it crosses ranks (the
    all-to-all), red × where the expert was full (dropped: residual only); the right half is the combine."""
    from snippets.common import figures
    torch.manual_seed(4)
    T, E, W = 6, 4, 2
    cap = moe.capacity(T, E, 1.0, 1) + 0          # ⌈6/4⌉ = 2
    logits = torch.randn(W, T, E) + torch.tensor([0.0, 0.6, 0.2, 1.0])
    fig, ax = figures.new(8.6, 4.6)
    ax.set_axis_off()
    colors = ["C0", "C1", "C2", "C3"]
    ex_y = {i: 6.6 - 1.9 * i for i in range(E)}
    tok_y = {(r, t): 7.4 - r * 4.4 - 0.62 * t for r in range(W) for t in range(T)}
    for side, x_tok, x_ex in (("dispatch", 0.0, 3.0), ("combine", 6.0, 3.0)):
        for r in range(W):
            expert, _, keep, _ = moe.route(logits[r], 1, cap)
            for t in range(T):
                i, y0, y1 = int(expert[t, 0]), tok_y[r, t], ex_y[int(expert[t, 0])]
                cross = (i // (E // W)) != r
                if bool(keep[t, 0]):
                    ax.annotate("", xy=(x_ex + (0.45 if side == "combine" else -0.45), y1) if side == "dispatch"
                                else (x_tok - 0.3, y0), xytext=(x_tok + 0.3, y0) if side == "dispatch"
                                else (x_ex + 0.45, y1), arrowprops=dict(arrowstyle="->", color=colors[i],
                                                                       ls="--" if cross else "-", lw=1.3))
                elif side == "dispatch":
                    ax.plot([x_tok + 0.3, x_tok + 1.0], [y0, y0], color="C3", lw=1)
                    ax.text(x_tok + 1.05, y0, "× 버림", color="C3", va="center", fontsize=8)
                ax.text(x_tok, y0, f"r{r}·t{t}", ha="center", va="center", fontsize=8,
                        bbox=dict(boxstyle="round", fc="white", ec=colors[i]))
    for i in range(E):
        ax.text(3.0, ex_y[i], f"expert {i}\n(rank {i // (E // W)})", ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="square", fc="0.95", ec=colors[i], lw=2))
    ax.axhline(3.45, color="0.6", lw=0.8, ls=":")
    ax.text(0.0, 8.1, "dispatch (all-to-all)", ha="center", fontsize=10)
    ax.text(6.0, 8.1, "combine (all-to-all)", ha="center", fontsize=10)
    ax.text(-0.9, 5.9, "rank 0", rotation=90, va="center", fontsize=10)
    ax.text(-0.9, 1.5, "rank 1", rotation=90, va="center", fontsize=10)
    ax.set_xlim(-1.1, 6.8)
    ax.set_ylim(-0.5, 8.4)
    return figures.svg(fig)
# --8<-- [end:diagram]
