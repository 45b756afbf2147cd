"""Ch5-01 ZeRO 의 Motivation 과 메모리 분해: the code the page runs and the tests import.

Everything here measures real PyTorch tensors on CPU: the bytes held by a mixed-precision Adam
set-up after one step (counted from the tensors' storages), the bytes an Adam step allocates
on top of them, and the activation bytes autograd saves for backward. The ZeRO formulas come
from the shared module snippets.common.zero_memory and are not redefined here. Experiment 5 reads the
optimizer step times in gpu_runs/step_anatomy.py's results, one tab per hardware.
"""
from __future__ import annotations

import math
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from snippets.common import zero_memory as zm

SEED = 0
WIDTH = 64           # hidden size h of the toy MLP blocks
DEPTH = 2            # number of MLP blocks
TOKENS = 64          # b·s tokens in the toy batch


# --8<-- [start:setup]
def toy_model(width: int = WIDTH, depth: int = DEPTH, dtype=torch.bfloat16) -> torch.nn.Module:
    """Transformer-MLP-shaped blocks, Linear(h, 4h) → GELU → Linear(4h, h), in 16-bit."""
    torch.manual_seed(SEED)
    blocks = [torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                  torch.nn.Linear(4 * width, width)) for _ in range(depth)]
    return torch.nn.Sequential(*blocks).to(dtype)


class MixedPrecisionAdam:
    """The textbook mixed-precision Adam set-up (Micikevicius et al. 2018; ZeRO §3.1).

    16-bit params and grads live in the model; the optimizer owns an fp32 master copy of every
    parameter and torch.optim.Adam keeps exp_avg (m) and exp_avg_sq (v) in fp32 for it.
    """

    def __init__(self, model: torch.nn.Module, **adam_kw):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master = [p.detach().float().clone() for p in self.params]
        self.opt = torch.optim.Adam(self.master, lr=1e-3, **adam_kw)

    def step(self) -> None:
        for m, p in zip(self.master, self.params):
            m.grad = p.grad.float()          # a transient fp32 copy of the 16-bit gradient
        self.opt.step()
        for m, p in zip(self.master, self.params):
            m.grad = None                    # ... freed right after the step
            with torch.no_grad():
                p.copy_(m)                   # 16-bit params ← fp32 master


def one_step(adam_kw=None, width: int = WIDTH, depth: int = DEPTH, tokens: int = TOKENS):
    """Build the set-up, run forward + backward + one optimizer step; return (model, trainer)."""
    model = toy_model(width, depth)
    trainer = MixedPrecisionAdam(model, **(adam_kw or {}))
    torch.manual_seed(SEED + 1)
    x = torch.randn(tokens, width, dtype=torch.bfloat16)
    model(x).float().pow(2).mean().backward()
    trainer.step()
    return model, trainer
# --8<-- [end:setup]


# --8<-- [start:count]
def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view or alias is counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def model_state_bytes(model: torch.nn.Module, trainer: MixedPrecisionAdam) -> dict[str, int]:
    """Count every tensor the set-up keeps between steps, by category, from the tensors themselves."""
    state = [trainer.opt.state[m] for m in trainer.master]
    return {
        "params (16-bit)": storage_bytes(trainer.params),
        "grads (16-bit)": storage_bytes(p.grad for p in trainer.params),
        "master (fp32)": storage_bytes(trainer.master),
        "Adam exp_avg m (fp32)": storage_bytes(s["exp_avg"] for s in state),
        "Adam exp_avg_sq v (fp32)": storage_bytes(s["exp_avg_sq"] for s in state),
        "Adam step (per tensor)": storage_bytes(s["step"] for s in state),
    }


def per_parameter_table(width: int = WIDTH, depth: int = DEPTH):
    """Rows (category, bytes, bytes/ψ, dtypes) and ψ, the parameter count."""
    model, trainer = one_step(width=width, depth=depth)
    psi = sum(p.numel() for p in trainer.params)
    counted = model_state_bytes(model, trainer)
    state = trainer.opt.state[trainer.master[0]]
    dtypes = {"params (16-bit)": trainer.params[0].dtype, "grads (16-bit)": trainer.params[0].grad.dtype,
              "master (fp32)": trainer.master[0].dtype, "Adam exp_avg m (fp32)": state["exp_avg"].dtype,
              "Adam exp_avg_sq v (fp32)": state["exp_avg_sq"].dtype, "Adam step (per tensor)": state["step"].dtype}
    rows = [(k, v, v / psi, str(dtypes[k]).replace("torch.", "")) for k, v in counted.items()]
    return rows, psi, len(trainer.params)
# --8<-- [end:count]


# --8<-- [start:stages]
def stage_table(models=((7e9, 8), (13e9, 16), (70e9, 16), (175e9, 64))):
    """Per-rank model-state memory for each (ψ, N) and ZeRO stage, in GB and GiB (shared formulas)."""
    gb = zm.table(models, unit=zm.GB)
    gib = zm.table(models, unit=zm.GIB)
    return [{"psi": a["psi"], "N": a["N"], "GB": [a[f"stage{s}"] for s in range(4)],
             "GiB": [b[f"stage{s}"] for s in range(4)]} for a, b in zip(gb, gib)]
# --8<-- [end:stages]


# --8<-- [start:transient]
class LiveBytes(TorchDispatchMode):
    """Bytes of new storages created by ATen ops while active: currently alive, peak, and total.

    Every op's outputs are inspected; a storage that is not one of the op's inputs (in-place ops
    and views return their input's storage) is counted as new until Python frees it.
    """

    def __init__(self):
        super().__init__()
        self.live = self.peak = self.total = 0
        self._alive: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            s = t.untyped_storage()
            key, n = s.data_ptr(), s.nbytes()
            if n == 0 or key in inputs or key in self._alive:
                continue
            self._alive.add(key)
            self.live += n
            self.total += n
            self.peak = max(self.peak, self.live)
            weakref.finalize(s, self._free, key, n)
        return out

    def _free(self, key: int, n: int) -> None:
        self.live -= n
        self._alive.discard(key)


ADAM_VARIANTS = {"for-loop (foreach=False)": {"foreach": False},
                 "foreach=True": {"foreach": True},
                 "fused=True": {"fused": True}}


def step_transients(width: int = WIDTH, depth: int = DEPTH):
    """Peak extra bytes of one mixed-precision step (fp32 grad copy + Adam), per Adam variant.

    The first step (which also creates m and v) runs before measuring, so what is counted is
    what a steady-state step allocates on top of the 16ψ model states.
    """
    rows = []
    for name, kw in ADAM_VARIANTS.items():
        model, trainer = one_step(kw, width, depth)
        psi = sum(p.numel() for p in trainer.params)
        largest = max(p.numel() for p in trainer.params)
        for m, p in zip(trainer.master, trainer.params):
            m.grad = p.grad.float()
        with LiveBytes() as adam_only:
            trainer.opt.step()
        for m in trainer.master:
            m.grad = None
        with LiveBytes() as whole:
            trainer.step()
        rows.append({"variant": name, "psi": psi, "largest": largest,
                     "adam_peak": adam_only.peak, "step_peak": whole.peak, "leftover": whole.live})
    return rows
# --8<-- [end:transient]


# --8<-- [start:activations]
def saved_activation_bytes(tokens: int = TOKENS, width: int = WIDTH, depth: int = DEPTH) -> dict[str, int]:
    """Bytes autograd saves for backward in one forward pass, parameters excluded.

    saved_tensors_hooks sees every tensor an op stores for its backward; storages that belong to
    parameters (the weights Linear saves) are model states, already in 16ψ, so they are skipped.
    """
    model = toy_model(width, depth)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in weights:
            saved[s.data_ptr()] = s.nbytes()
        return t

    torch.manual_seed(SEED + 1)
    x = torch.randn(tokens, width, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = model(x)
    psi = sum(p.numel() for p in model.parameters())
    return {"measured": sum(saved.values()), "predicted": activation_bytes_mlp(tokens, width, depth),
            "model_states_16psi": 16 * psi, "psi": psi}


def activation_bytes_mlp(tokens: int, width: int, depth: int, elem: int = 2) -> int:
    """Saved inputs of Linear(h,4h) (T·h), GELU (T·4h) and Linear(4h,h) (T·4h): 9·T·h elements a block."""
    return depth * elem * tokens * (width + 4 * width + 4 * width)
# --8<-- [end:activations]


# --8<-- [start:fit]
# Bytes per parameter of the rank's shard that one mixed-precision step adds on top of 16ψ/N
# (Experiment 3 (a): the fp32 copy of the 16-bit gradient, plus foreach Adam's √v list).
STEP_EXTRA_BYTES = {"foreach=True": 8, "fused=True": 4}


def zero3_step_peak(psi: float, n: int, extra_per_param: float) -> float:
    """Peak per-rank bytes of ZeRO-3 model states during the optimizer step: (16 + extra)ψ/N."""
    return zm.zero_memory_bytes(psi, n, 3) + extra_per_param * psi / n


def smallest_n_that_fits(psi: float, capacity: float, extra_per_param: float, reserve: float = 0.0) -> int:
    """Smallest N with zero3_step_peak(ψ, N) + reserve ≤ capacity: N = ⌈(16 + extra)ψ / (capacity − reserve)⌉."""
    room = capacity - reserve
    if room <= 0:
        raise ValueError("the reserve leaves no room for model states")
    return math.ceil((zm.PARAM_BYTES + zm.GRAD_BYTES + zm.K_ADAM + extra_per_param) * psi / room)
# --8<-- [end:fit]


# --8<-- [start:units]
def unit_rows(psis=(1.5e9, 7e9, 70e9, 175e9)):
    """16ψ in bytes, GB (1e9 B) and GiB (2**30 B); the GiB figure is always the smaller number."""
    return [{"psi": psi, "bytes": 16 * psi, "GB": 16 * psi / zm.GB, "GiB": 16 * psi / zm.GIB} for psi in psis]
# --8<-- [end:units]


# --8<-- [start:figure]
def stage_figure(psi: float = 70e9, n: int = 16) -> str:
    """Stacked bars: per-rank params / grads / optimizer state (GB) for stages 0–3 at (ψ, N)."""
    from snippets.common import figures

    fig, ax = figures.new(6.5, 3.6)
    parts = [zm.zero_memory_breakdown(psi, n, s) for s in range(4)]
    bottom = [0.0] * 4
    for key, color in (("params", "#4c72b0"), ("grads", "#dd8452"), ("optimizer", "#55a868")):
        vals = [p[key] / zm.GB for p in parts]
        ax.bar([f"ZeRO-{s}" if s else "DP (stage 0)" for s in range(4)], vals, bottom=bottom, color=color, label=key)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, b in enumerate(bottom):
        ax.text(i, b, f"{b:,.2f} GB", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("rank 당 model states (GB = 1e9 B)")
    ax.set_title(f"ψ = {psi / 1e9:.0f}B, N = {n}, mixed-precision Adam (K = 12)")
    ax.legend(loc="upper right")
    return figures.svg(fig)
# --8<-- [end:figure]


# ------------------------------------------------------------------ experiment 5: the optimizer step's time

ANATOMY = "step_anatomy"
IMPL_OF = {"fused": "fused=True", "foreach": "foreach=True", "for-loop": "for-loop (foreach=False)"}  # experiment 3's names


# --8<-- [start:steptime]
def adam_step_rows(run) -> list[dict]:
    """The three torch.optim.Adam implementations of one step_anatomy file: step time and the bandwidth it
    achieved on the minimum bytes a step moves, 7 per element (read p, g, m, v; write p, m, v)."""
    rows = [r for r in run.measurements["optimizer"] if r["supported"]]
    base = next((r["ms_median"] for r in rows if r["impl"] == "for-loop"), None)
    return [{**r, "vs_for_loop": base / r["ms_median"] if base else None} for r in rows]


def sharded_step_s(psi: float, n: int, gbps: float) -> float:
    """Seconds of one rank's mixed-precision Adam step when the optimizer state is split over N ranks (ZeRO-1
    and up: a rank updates ψ/N parameters), at `gbps` GB/s, with the minimum bytes per parameter of the 16ψ
    set-up, c_A = 30 (Ch5-06: read master, grad, m, v in fp32; write master, m, v; write the 16-bit param)."""
    from snippets.ch5_zero_sharding.d06_zero_offload_infinity import ADAM_CPU_BYTES

    return ADAM_CPU_BYTES * psi / n / (gbps * 1e9)
# --8<-- [end:steptime]


def adam_tab(plat) -> str:
    """Experiment 5 on one hardware: fused / foreach / for-loop Adam step times of one device, the bandwidth each
    achieved, a second method (the timeline's step), and what that bandwidth means for a 7B model's step."""
    from snippets import results

    run = plat.by_world.get(1)
    if run is None:
        return f"이 하드웨어에는 장치 하나 (world size 1) 의 측정이 없습니다 (있는 N: {', '.join(map(str, sorted(plat.by_world)))})."
    p, t = run.params, run.measurements["timeline"]
    rows = adam_step_rows(run)
    missing = [r["impl"] for r in run.measurements["optimizer"] if not r["supported"]]
    esz = rows[0]["bytes_min"] // (7 * rows[0]["params"])
    table = results.markdown_table(
        ["구현 (실험 3 의 이름)", "step (ms, median)", "최소 bytes (MB)", "실효 대역폭 (GB/s)", "for-loop 대비 빠르기"],
        [[IMPL_OF[r["impl"]], f"{r['ms_median']:.3g}", f"{r['bytes_min'] / 1e6:,.1f}", f"{r['GBps']:.3g}",
          f"{r['vs_for_loop']:.2f}×" if r["vs_for_loop"] else "—"] for r in rows])
    best = max(rows, key=lambda r: r["GBps"])
    same = next((r for r in rows if r["impl"] == p["default_impl"]), None)
    lines = [f"preset `{p['preset']}`: ψ = {rows[0]['params']:,}, parameter 와 Adam state 는 {p['dtype']} (원소당 {esz} bytes, "
             f"최소 7 × {esz} bytes), torch threads {p['torch_threads']}; 연속된 step 을 구간으로 잰 median",
             f"가장 빠른 구현: **{IMPL_OF[best['impl']]}** ({best['ms_median']:.3g} ms, {best['GBps']:.3g} GB/s)"
             + (f"; 이 장치에서 돌지 않은 구현: {', '.join(missing)}" if missing else ""),
             (f"두 번째 방법: timeline 의 step (forward → backward → `{p['default_impl']}` Adam 을 이어서 잰 것) 의 optimizer 구간 "
              f"{t['optimizer_ms_median']:.3g} ms, 위 표의 같은 구현 {same['ms_median']:.3g} ms (비 "
              f"{t['optimizer_ms_median'] / same['ms_median']:.2f})") if same else
             f"timeline 의 구현 `{p['default_impl']}` 은 위 표에 없습니다."]
    if same:
        r = t["optimizer_ms_median"] / same["ms_median"]
        lines.append(f"두 방법이 {abs(r - 1):.0%} 안에서 맞습니다: 표의 시간을 그대로 읽습니다." if 0.5 <= r <= 2 else
                     "두 방법이 두 배 넘게 다릅니다: 이 결과를 잰 동안 장치가 다른 일과 나뉘었거나 흔들림이 큽니다. 구현 사이의 "
                     "순위만 읽고, 시간의 크기와 아래 외삽은 읽지 않습니다.")
    scale = results.markdown_table(
        ["ψ", "N (optimizer state 를 나눈 rank 수)", f"rank 당 step (s), {IMPL_OF[best['impl']]} 의 {best['GBps']:.3g} GB/s 로"],
        [[f"{psi / 1e9:g}B", n, f"{sharded_step_s(psi, n, best['GBps']):,.3g}"] for psi in (7e9, 70e9) for n in (1, 8, 64)])
    return "\n\n".join([table, "\n".join(f"- {x}" for x in lines),
                        "이 실효 대역폭이 16ψ set-up 의 step (원소당 최소 30 bytes) 에서도 유지된다고 가정하면:", scale])
