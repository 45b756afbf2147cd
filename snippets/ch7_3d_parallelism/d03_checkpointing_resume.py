"""Ch7-03 Checkpointing 과 Resume: the code the page runs and the tests import.

Reads gpu_runs/results/dcp_bench (DCP on FSDP2, reload in one process and into a TP layout, async_save,
exact resume with each part left out) and holds the checkpoint-size and stall formulas.
"""
from __future__ import annotations

from snippets.common import zero_memory as zm


# --8<-- [start:size]
def checkpoint_bytes(psi: float, n: int, k_opt: float = 8, param_bytes: float = 4) -> dict[str, float]:
    """Training-state bytes a checkpoint must hold, and the share of each of n ranks when sharded.

    fp32 training with Adam (this page's run): 4 B parameter + 8 B (m, v) = 12 B/param; mixed precision
    (Ch5): the fp32 master copy and m, v (K = 12) are the state, the 16-bit parameters can be recast from
    them. Gradients are not saved: a step ends with them consumed."""
    total = (param_bytes + k_opt) * psi
    return {"total": total, "per_rank": total / n}


def mixed_precision_checkpoint(psi: float, n: int) -> float:
    """Per-rank bytes of a sharded mixed-precision Adam checkpoint: the K = 12 B/param of Ch5 over n ranks."""
    return zm.K_ADAM * psi / n


def stall(bytes_per_rank: float, write_bw: float, copy_bw: float, asynchronous: bool) -> float:
    """Seconds training stops per checkpoint: write everything (sync), or only copy to host memory (async)."""
    return bytes_per_rank / (copy_bw if asynchronous else write_bw)
# --8<-- [end:size]


# --8<-- [start:read]
def resume_rows(r) -> list[dict]:
    """Each resume variant against the uninterrupted run: bitwise equal? first step that differs, max |Δ|."""
    res = r.measurements["resume"]
    ref = res["uninterrupted"]
    out = []
    for name, traj in res["resumed"].items():
        diff = [i for i, (a, b) in enumerate(zip(traj, ref)) if a != b]
        out.append({"variant": name, "bitwise": traj == ref, "first_diff_step": diff[0] if diff else None,
                    "max_abs": max(abs(a - b) for a, b in zip(traj, ref))})
    return out


def timing_summary(r) -> dict:
    t = r.measurements["timing"]
    return {"sync": t["sync_s_median"], "blocked": t["blocked_s_median"], "total": t["total_s_median"],
            "bytes": t["checkpoint_bytes"], "reps": len(t["sync_s"])}
# --8<-- [end:read]


# --8<-- [start:order]
def scheduler_order_demo(k: int = 4, steps: int = 8, seed: int = 0) -> dict:
    """One process, no DCP: Adam + LambdaLR trained `steps` steps uninterrupted, and resumed at step k from a
    checkpoint that holds the model and the optimizer (param_groups carry the lr) but NOT the scheduler.
    The fresh scheduler is built either before `opt.load_state_dict` (its constructor's lr is then
    overwritten by the saved one) or after it (its constructor resets lr to λ(0)·initial_lr).
    Returns the first step whose loss differs from the uninterrupted run, per order."""
    import torch

    def make():
        torch.manual_seed(seed)
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.Adam(model.parameters(), lr=1e-1)
        return model, opt

    X = torch.randn(steps, 16, 8, generator=torch.Generator().manual_seed(1))

    def step(model, opt, sched, j):
        loss = (model(X[j]) - X[j].flip(-1)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()

    lam = (lambda s: 1.0 / (1 + s))
    model, opt = make()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    ref, saved = [], None
    for j in range(steps):
        if j == k:
            saved = {"model": {n: t.clone() for n, t in model.state_dict().items()},
                     "optim": __import__("copy").deepcopy(opt.state_dict())}
        ref.append(step(model, opt, sched, j))
    out = {"uninterrupted": ref}
    for order in ("before_load", "after_load"):
        model, opt = make()
        model.load_state_dict(saved["model"])
        if order == "before_load":
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
            opt.load_state_dict(saved["optim"])
        else:
            opt.load_state_dict(saved["optim"])
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
        traj = ref[:k] + [step(model, opt, sched, j) for j in range(k, steps)]
        out[order] = next(j for j, (a, b) in enumerate(zip(traj, ref)) if a != b)
    return out
# --8<-- [end:order]


# --8<-- [start:stateful]
class DataPosition:
    """A Stateful object (torch.distributed.checkpoint.stateful.Stateful): DCP calls state_dict() on save
    and load_state_dict() after reading, so the object restores itself (state_dict_saver.py
    _stateful_to_state_dict; state_dict_loader.py load: `elem.load_state_dict(...)`)."""

    def __init__(self, epoch: int = 0, consumed: int = 0):
        self.epoch, self.consumed = epoch, consumed

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, sd: dict) -> None:
        self.epoch, self.consumed = int(sd["epoch"]), int(sd["consumed"])


def stateful_roundtrip(path) -> dict:
    """dcp.save / dcp.load in one process (no_dist=True) of {"model": tensors, "data": DataPosition}."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.stateful import Stateful

    import warnings

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    pos = DataPosition(epoch=2, consumed=37)
    fresh, fresh_pos = torch.nn.Linear(4, 4), DataPosition()
    sd = {"model": fresh.state_dict(), "data": fresh_pos}
    with warnings.catch_warnings():          # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": model.state_dict(), "data": pos}, checkpoint_id=path, no_dist=True)
        dcp.load(sd, checkpoint_id=path, no_dist=True)
    return {"is_stateful": isinstance(pos, Stateful), "restored": fresh_pos.state_dict(),
            "model_equal": all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), sd["model"].values()))}
# --8<-- [end:stateful]


def async_host_bytes(per_rank_bytes: float, in_flight: int = 1) -> float:
    """Host memory async_save needs per rank: one CPU copy of the rank's state per checkpoint in flight
    (DefaultStager stages the whole state dict before the background write)."""
    return per_rank_bytes * in_flight


def holdings_diagram(n: int = 2) -> str:
    """What a sharded DCP checkpoint holds per rank (the parts of Definition 7.3.2), and which of them are
    per-rank (RNG, a stateful data loader) rather than shards of one global tensor."""
    from snippets.common import figures
    fig, ax = figures.new(8.6, 3.4)
    ax.set_axis_off()
    parts = [("θ (fp32 master) 의 shard", "C0", True), ("Adam μ, ν, step 의 shard", "C1", True),
             ("LR scheduler (last_epoch)", "C2", False), ("RNG (CPU, CUDA; Megatron 의 이름 붙인 tracker)", "C3", False),
             ("data 위치 / loader worker", "C4", False)]
    for r in range(n):
        x0 = 0.2 + r * 3.6
        ax.text(x0 + 1.5, 5.6, f"rank {r}: __{r}_0.distcp", ha="center", fontsize=10)
        for i, (name, c, sharded) in enumerate(parts):
            y = 4.6 - i * 1.0
            ax.add_patch(figures.plt.Rectangle((x0, y), 3.0, 0.8, fc=c, alpha=0.25 if sharded else 0.12,
                                               ec=c, lw=1.5, ls="-" if sharded else "--"))
            label = name + (f"  [{r}/{n}]" if sharded else ("  (rank 별 key)" if i == 3 else "  (복제)"))
            ax.text(x0 + 0.1, y + 0.4, label, va="center", fontsize=8)
    ax.text(7.5, 3.2, ".metadata\n(key → 전역 offset,\n크기, 파일, 위치)", fontsize=9, va="center",
            bbox=dict(boxstyle="round", fc="0.95", ec="0.4"))
    ax.text(0.2, -0.45, "실선: 전역 tensor 의 shard (resharding 가능)   점선: 작은 state, rank 마다 따로 또는 복제",
            fontsize=8)
    ax.set_xlim(0, 9.6)
    ax.set_ylim(-0.8, 6.0)
    return figures.svg(fig)
