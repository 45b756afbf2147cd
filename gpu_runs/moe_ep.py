"""Expert parallelism: an MoE layer whose E experts live on W ranks, dispatch and combine as all-to-all.

Each rank routes its own T tokens (top-k, capacity ⌈kT/E·CF⌉, overflow dropped: snippets/common/moe.py),
exchanges the uneven split sizes first (all_to_all_single of counts), then sends each kept assignment's
token to the rank that holds its expert (functional collectives' all_to_all_single_autograd, whose
backward is the reverse all-to-all), runs its local experts, and sends the results back (combine). The output, the input
gradients, the router's gradient (summed over ranks) and every expert's gradient are compared with one
process that holds all E experts and routes every rank's tokens the same way. Collectives and bytes
are counted with gpu_runs/comm_counter (torch.distributed calls) and CommDebugMode (functional collectives); a capacity-factor sweep records load imbalance and dropped
tokens over all ranks. The same layer with a fixed-capacity [E, n_cap, h] buffer (the padded dispatch of
Switch, GShard and DeepSpeed-MoE) runs at every capacity factor of the sweep, its all-to-all bytes counted on
the real calls.

    torchrun --nproc_per_node=4 gpu_runs/moe_ep.py                  # CPU, gloo (counts)
    torchrun --nproc_per_node=8 gpu_runs/moe_ep.py --preset gpu     # 8 GPUs, NCCL
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from gpu_runs.comm_counter import CommCounter  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402
from snippets.common import moe  # noqa: E402

PROGRAM = "moe_ep"
PRESETS = {
    # T tokens per rank, h hidden, epr experts per rank, top-k, capacity factor, router skew (logit bias
    # growing linearly over the experts: makes the load uneven on purpose), CF sweep
    "tiny": {"T": 16, "h": 8, "epr": 2, "k": 2, "cf": 1.0, "skew": 1.0, "sweep": [0.5, 1.0, 2.0]},
    "full": {"T": 256, "h": 32, "epr": 2, "k": 2, "cf": 1.0, "skew": 1.0,
             "sweep": [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0]},
    "gpu": {"T": 2048, "h": 1024, "epr": 2, "k": 2, "cf": 1.0, "skew": 1.0,
            "sweep": [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0]},
}


def make_experts(E: int, h: int, dev) -> nn.ModuleList:
    torch.manual_seed(7)
    return nn.ModuleList(nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h)) for _ in range(E)).to(dev)


def make_router(E: int, h: int, dev) -> nn.Linear:
    torch.manual_seed(3)
    return nn.Linear(h, E, bias=False).to(dev)


def plan(expert, keep, epr: int, W: int):
    """Kept assignments sorted by destination rank, then expert, then token: (token, slot, expert, counts)."""
    tok, slot = keep.nonzero(as_tuple=True)
    ex = expert[tok, slot]
    order = torch.argsort(ex * (expert.shape[0] + 1) + tok, stable=True)   # expert-major = rank-major
    tok, slot, ex = tok[order], slot[order], ex[order]
    counts = torch.bincount(ex // epr, minlength=W)
    return tok, slot, ex, counts


def a2a(t, out_splits, in_splits):
    """all_to_all_single with a backward (the backward is the reverse all-to-all): functional collectives."""
    return fc.wait_tensor(fc.all_to_all_single_autograd(t.contiguous(), out_splits, in_splits, dist.group.WORLD))


# --8<-- [start:ep]
def moe_ep(x, router, experts, skew, cfg, W, rank, log=None):
    """One MoE layer, expert-parallel: route locally, dispatch (all-to-all), local experts, combine (all-to-all)."""
    E = W * cfg["epr"]
    cap = moe.capacity(x.shape[0], E, cfg["cf"], cfg["k"])
    expert, gate, keep, probs = moe.route(router(x) + skew, cfg["k"], cap)
    tok, slot, ex, send = plan(expert, keep, cfg["epr"], W)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)                          # 1. uneven split sizes go first
    s_list, r_list = send.tolist(), recv.tolist()
    ex_in = torch.empty(sum(r_list), dtype=ex.dtype, device=x.device)
    dist.all_to_all_single(ex_in, ex, r_list, s_list)           # 2. which expert each row is for
    x_in = a2a(x[tok], r_list, s_list)
    y_in = torch.zeros_like(x_in)                               # 3. dispatch (autograd) and local experts
    for j in range(rank * cfg["epr"], (rank + 1) * cfg["epr"]):
        rows = (ex_in == j).nonzero(as_tuple=True)[0]
        y_in = y_in.index_put((rows,), experts[j](x_in[rows]))
    y = a2a(y_in, s_list, r_list)
    out = x + torch.zeros_like(x).index_add(0, tok, y * gate[tok, slot].unsqueeze(1))   # 4. combine
    if log is not None:
        log.update(send=s_list, recv=r_list, cap=cap, expert=expert, keep=keep,
                   dispatch_bytes=len(tok) * x.shape[1] * x.element_size(), combine_bytes=y_in.numel() * y_in.element_size())
    return out, moe.aux_loss(probs)
# --8<-- [end:ep]


# --8<-- [start:padded]
@torch.no_grad()
def moe_ep_padded(x, router, experts, skew, cfg, W, rank, cf):
    """The same layer with a fixed capacity buffer (Switch, GShard, DeepSpeed-MoE): each rank fills an
    [E, n_cap, h] buffer (empty slots stay zero), one all-to-all with equal splits sends expert i's n_cap
    rows to the rank that holds it, every local expert runs on all W·n_cap rows it received (padding
    included), and the reverse all-to-all brings them back. No split sizes to exchange, but the bytes
    and the expert rows are set by n_cap = ⌈kτφ/E⌉, not by how many assignments were kept."""
    E, (T, h) = W * cfg["epr"], x.shape
    cap = moe.capacity(T, E, cf, cfg["k"])
    expert, gate, keep, _ = moe.route(router(x) + skew, cfg["k"], cap)
    buf, slot_of = x.new_zeros(E, cap, h), {}
    fill = [0] * E
    for j in range(cfg["k"]):                        # the routing's priority order: 1st choices first
        for t in range(T):
            if keep[t, j]:
                i = int(expert[t, j])
                buf[i, fill[i]] = x[t]
                slot_of[t, j] = (i, fill[i])
                fill[i] += 1
    recv = torch.empty_like(buf)
    dist.all_to_all_single(recv, buf)                # equal splits: E/W experts × n_cap rows per rank
    src = recv.view(W, cfg["epr"], cap, h)           # [source rank, local expert, slot, h]
    out_buf = torch.stack([experts[rank * cfg["epr"] + e](src[:, e].reshape(-1, h)).view(W, cap, h)
                           for e in range(cfg["epr"])], dim=1)
    back = torch.empty_like(buf)
    dist.all_to_all_single(back, out_buf.reshape(E, cap, h).contiguous())
    out = x.clone()
    for (t, j), (i, p) in slot_of.items():
        out[t] += gate[t, j] * back[i, p]
    return out, {"capacity": cap, "kept": int(keep.sum()), "expert_rows": W * cap * cfg["epr"]}
# --8<-- [end:padded]


def moe_reference(x, router, experts, skew, cfg, E):
    """One process, all E experts, the same routing for this group of tokens (no all-to-all)."""
    cap = moe.capacity(x.shape[0], E, cfg["cf"], cfg["k"])
    expert, gate, keep, probs = moe.route(router(x) + skew, cfg["k"], cap)
    out = x
    for j in range(E):
        tkn, s = (keep & (expert == j)).nonzero(as_tuple=True)
        out = out + torch.zeros_like(x).index_add(0, tkn, gate[tkn, s].unsqueeze(1) * experts[j](x[tkn]))
    return out, moe.aux_loss(probs)


def measure(env, cfg, args):
    torch.set_num_threads(1) if env.device.type == "cpu" else None
    W, r, dev = env.world_size, env.rank, env.device
    E, T, h = W * cfg["epr"], cfg["T"], cfg["h"]
    skew = torch.linspace(0, cfg["skew"], E, device=dev)
    torch.manual_seed(11)
    X = torch.randn(W, T, h, device=dev)                    # every rank's tokens (rank r uses X[r])
    G = torch.randn(W, T, h, device=dev)                    # a fixed projection: loss_r = Σ out_r · G_r

    # ---- fixed-capacity (padded) dispatch at every φ of the sweep: bytes counted on the real all-to-all,
    # output against the one-process reference at the same φ. It runs before CommDebugMode is used below
    # (the module hooks it leaves behind fail under no_grad in torch 2.13).
    router, experts = make_router(E, h, dev), make_experts(E, h, dev)
    router_ref, experts_ref = make_router(E, h, dev), make_experts(E, h, dev)
    padded = []
    for cf in cfg["sweep"]:
        with CommCounter() as c_pad:
            out_p, info = moe_ep_padded(X[r], router, experts, skew, cfg, W, r, cf)
        with torch.no_grad():
            ref_p = moe_reference(X[r], router_ref, experts_ref, skew, {**cfg, "cf": cf}, E)[0]
        a2a_calls = c_pad.summary().get("all_to_all_single", {"calls": 0, "bytes": 0})
        padded.append({"cf": cf, **info, "a2a_calls": a2a_calls["calls"], "a2a_bytes": a2a_calls["bytes"],
                       "diff": (out_p - ref_p).abs().max().item()})

    # ---- expert-parallel layer
    router, experts = make_router(E, h, dev), make_experts(E, h, dev)
    x = X[r].clone().requires_grad_(True)
    log = {}
    with CommCounter() as c_fwd, CommDebugMode() as f_fwd:
        out, aux = moe_ep(x, router, experts, skew, cfg, W, r, log)
    loss = (out * G[r]).sum() + aux
    with CommCounter() as c_bwd, CommDebugMode() as f_bwd:
        loss.backward()
    router_grad = router.weight.grad.clone()
    dist.all_reduce(router_grad)                            # the router is replicated: sum its grads
    own = range(r * cfg["epr"], (r + 1) * cfg["epr"])

    # ---- the same layer in one process (every rank computes it; all are identical)
    router_ref, experts_ref = make_router(E, h, dev), make_experts(E, h, dev)
    Xr = X.clone().requires_grad_(True)
    outs, auxes = zip(*(moe_reference(Xr[w], router_ref, experts_ref, skew, cfg, E) for w in range(W)))
    ((torch.stack(outs) * G).sum() + sum(auxes)).backward()
    diff = {
        "output": (out - outs[r]).abs().max().item(),
        "input_grad": (x.grad - Xr.grad[r]).abs().max().item(),
        "router_grad": (router_grad - router_ref.weight.grad).abs().max().item(),
        "expert_grad": max((p.grad - q.grad).abs().max().item() if p.grad is not None else 0.0
                           for j in own for p, q in zip(experts[j].parameters(), experts_ref[j].parameters())),
        "aux_loss": abs(aux.item() - auxes[r].item()),
    }

    # ---- capacity-factor sweep: loads over all ranks (counts summed with all_reduce)
    sweep = []
    with torch.no_grad():
        logits = router(X[r]) + skew
        for k in sorted({1, cfg["k"]}):
            for cf in cfg["sweep"]:
                cap = moe.capacity(T, E, cf, k)
                expert, _, keep, _ = moe.route(logits, k, cap)
                asked = torch.bincount(expert.flatten(), minlength=E)
                kept = torch.bincount(expert[keep].flatten(), minlength=E)
                both = torch.stack([asked, kept]).to(dev)
                dist.all_reduce(both)
                sweep.append({"k": k, "cf": cf, "capacity": cap, "asked": both[0].tolist(), "kept": both[1].tolist()})

    rec = {"rank": r, "send": log["send"], "recv": log["recv"], "capacity": log["cap"],
           "kept_assignments": int(log["keep"].sum()), "asked_assignments": int(log["keep"].numel()),
           "bytes_leaving": moe.a2a_bytes(log["send"], r, h), "comm_forward": c_fwd.summary(),
           "comm_backward": c_bwd.summary(), "dispatch_bytes": log["dispatch_bytes"], "combine_bytes": log["combine_bytes"],
           "funcol_forward": {str(k): v for k, v in f_fwd.get_comm_counts().items()},
           "funcol_backward": {str(k): v for k, v in f_bwd.get_comm_counts().items()}, "diff": diff,
           "experts_with_grad": [j for j in own if experts[j][0].weight.grad is not None], "padded": padded}
    every = harness.gather(rec)
    if env.is_main:
        for e in every:
            print(f"rank {e['rank']}: send {e['send']} recv {e['recv']} diff "
                  + ", ".join(f"{k} {v:.1e}" for k, v in e["diff"].items()), flush=True)
        print(every[0]["comm_forward"], every[0]["comm_backward"], every[0]["funcol_forward"],
              every[0]["funcol_backward"], flush=True)
    measurements = {"W": W, "E": E, "ranks": every, "sweep": sweep,
                    "bytes_uniform_formula": moe.a2a_bytes_uniform(T, cfg["k"], W, h)}
    params = {**cfg, "dtype": "float32", "aux_coef": 0.01,
              "counting": "gpu_runs/comm_counter.CommCounter (torch.distributed calls), forward and backward"}
    worst = max(max(max(e["diff"].values()) for e in every), max(p["diff"] for e in every for p in e["padded"]))
    return params, measurements, \
        f"expert-parallel layer differs from one process by {worst:.2e}" if worst > 1e-5 else ""


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2))
