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
    """L_aux at uniform routing (= λ), at collapse (= λE), and a non-uniform case below λ (E = 2):
    90 % of tokens tie (0.5, 0.5) and go to expert 0 (argmax takes the first), 10 % go to expert 1 with p = 1."""
    uniform = torch.full((T, E), 1.0 / E)
    uniform_f = torch.eye(E).repeat(T // E, 1) * 0.5 + 0.5 / E   # each token prefers a different expert, P uniform
    collapse = torch.zeros(T, E)
    collapse[:, 0] = 1.0
    below = torch.cat([torch.tensor([[0.5, 0.5]]).repeat(9 * T // 10, 1), torch.tensor([[0.0, 1.0]]).repeat(T - 9 * T // 10, 1)])
    return {"uniform": aux_value(uniform, lam), "balanced top-1, P uniform": aux_value(uniform_f, lam),
            "collapse": aux_value(collapse, lam), "E = 2 below λ": aux_value(below, lam)}


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
