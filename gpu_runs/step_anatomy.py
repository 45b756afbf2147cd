"""One device's training step, taken apart: when each gradient becomes ready during backward, the
per-stage F / B / W times, and the optimizer step.

One process, one device (a GPU in bf16, or the CPU in float32). The model is a stack of `layers`
transformer-like MLP blocks, x + W₂·gelu(W₁·LN(x)) with W₁: h → 4h and W₂: 4h → h (no biases, LayerNorm
without affine parameters, so the parameters are exactly the 2·layers weight matrices), applied to
`tokens` rows of width h.

(a) Backward timeline (Ch2-03). Every parameter gets a post-accumulate-grad hook
    (Tensor.register_post_accumulate_grad_hook: it runs once .grad holds the finished gradient) that
    records a CUDA event on the current stream (on CPU: time.perf_counter). Nothing synchronizes inside
    a hook: the events are read after the step. The ready time of a parameter is its event's time after
    the event recorded just before loss.backward(); backward ends with the event recorded after
    loss.backward() returns. The window DDP can overlap communication into runs from the first ready
    gradient to the end of backward (`overlap_window_ms`); after the last ready gradient nothing is
    left to hide a bucket's all-reduce behind (`tail_ms`).
(b) F / B / W per pipeline stage (Ch4's zero-bubble simulator inputs). The blocks are split into
    `stages` equal stages, run one after another as a pipeline's stages would (each stage's input is
    the previous output, detached: a stage boundary). F is a stage's forward. B is
    torch.autograd.grad(out, [in, *linear outputs]): the input gradient, and on the way the gradient
    of every linear's output, but no weight gradient (autograd computes only what leads to the
    requested inputs). W is, per linear, torch.autograd.grad(linear output, weight, that output's
    gradient): the weight-gradient product alone. BW is the ordinary backward of the stage
    (torch.autograd.grad(out, [in, *weights])), timed in a second pass, to show what the split costs.
    A check compares the split's gradients with BW's, and counts each phase's FLOPs with
    torch.utils.flop_counter.FlopCounterMode against the formula.
(c) Optimizer step (Ch5): torch.optim.Adam over the stack's parameters, for each implementation
    (fused, foreach, for-loop), timed as back-to-back steps; the minimum bytes a step moves are 7 per
    element (read p, g, m, v; write p, m, v), so bytes / time is its achieved bandwidth. The step in
    (a) uses `default_impl` (fused on CUDA, torch's own default, the for-loop, on CPU).

Times are medians over `steps` steps after `warmup`; on a GPU every interval is between two CUDA
events read after one synchronize per step.

    torchrun --nproc_per_node=1 gpu_runs/step_anatomy.py                   # CPU, float32
    torchrun --nproc_per_node=1 gpu_runs/step_anatomy.py --preset gpu      # one GPU, bf16
    torchrun --nproc_per_node=1 gpu_runs/step_anatomy.py --preset tiny --no-save
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "step_anatomy"
PRESETS = {
    "tiny": {"h": 32, "layers": 4, "tokens": 16, "stages": 2, "warmup": 1, "steps": 2, "opt_spans": 2,
             "span_ms": 2.0},
    "full": {"h": 512, "layers": 8, "tokens": 512, "stages": 4, "warmup": 2, "steps": 5, "opt_spans": 5,
             "span_ms": 30.0},
    "gpu": {"h": 2048, "layers": 16, "tokens": 8192, "stages": 4, "warmup": 3, "steps": 10, "opt_spans": 7,
            "span_ms": 20.0},
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}  # ‖split − BW‖ / ‖BW‖ (the same products, reordered)


# --8<-- [start:model]
class Block(nn.Module):
    """x + W₂·gelu(W₁·LN(x)); `keep` collects the two linear outputs (for the B / W split)."""

    def __init__(self, h: int, device, dtype):
        super().__init__()
        self.norm = nn.LayerNorm(h, elementwise_affine=False, device=device, dtype=dtype)
        self.up = nn.Linear(h, 4 * h, bias=False, device=device, dtype=dtype)
        self.down = nn.Linear(4 * h, h, bias=False, device=device, dtype=dtype)

    def forward(self, x, keep: list | None = None):
        u = self.up(self.norm(x))
        d = self.down(F.gelu(u))
        if keep is not None:
            keep += [u, d]
        return x + d


def make_stack(cfg, device, dtype) -> nn.ModuleList:
    torch.manual_seed(0)
    return nn.ModuleList(Block(cfg["h"], device, dtype) for _ in range(cfg["layers"]))


def run(blocks, x, keep=None):
    for b in blocks:
        x = b(x, keep)
    return x
# --8<-- [end:model]


def weights(blocks) -> list[torch.Tensor]:
    return [w for b in blocks for w in (b.up.weight, b.down.weight)]


def _median(xs):
    return statistics.median(xs) if xs else None


# --8<-- [start:timeline]
def backward_timeline(blocks, x, target, opt, clock: harness.Clock, warmup: int, steps: int) -> dict:
    """Per step: forward, backward with every parameter's gradient-ready mark, optimizer step."""
    names = {id(p): n for n, p in blocks.named_parameters()}
    order = [n for n, _ in blocks.named_parameters()]
    state = {"marks": {}, "seq": []}

    def hook(p):  # runs on autograd's thread once p.grad is final; records, never waits
        state["marks"][names[id(p)]] = clock.mark()
        state["seq"].append(names[id(p)])

    handles = [p.register_post_accumulate_grad_hook(hook) for p in blocks.parameters()]
    kept = []
    try:
        for it in range(warmup + steps):
            state["marks"], state["seq"] = {}, []
            opt.zero_grad(set_to_none=True)
            f0 = clock.mark()
            loss = F.mse_loss(run(blocks, x).float(), target)
            b0 = clock.mark()
            loss.backward()
            b1 = clock.mark()
            opt.step()
            o1 = clock.mark()
            if it >= warmup:
                kept.append((f0, b0, b1, o1, dict(state["marks"]), list(state["seq"])))
        clock.resolve()  # the only synchronize: after every step was enqueued
    finally:
        for h in handles:
            h.remove()
    fwd, bwd, optm, ready = [], [], [], {n: [] for n in order}
    for f0, b0, b1, o1, marks, _ in kept:
        fwd.append(clock.ms(f0, b0))
        bwd.append(clock.ms(b0, b1))
        optm.append(clock.ms(b1, o1))
        for n, m in marks.items():
            ready[n].append(clock.ms(b0, m))
    seq = kept[0][5]
    params = dict(blocks.named_parameters())
    rows = [{"name": n, "shape": list(params[n].shape), "bytes": params[n].numel() * params[n].element_size(),
             "ready_ms_median": _median(ready[n]), "ready_ms_min": min(ready[n]), "ready_ms_max": max(ready[n])}
            for n in seq]
    first = [min(clock.ms(k[1], m) for m in k[4].values()) for k in kept]
    last = [max(clock.ms(k[1], m) for m in k[4].values()) for k in kept]
    return {"params": rows, "ready_order": seq,
            "ready_order_is_reverse_of_parameters": seq == order[::-1],
            "hook_calls_per_step": [len(k[5]) for k in kept],
            "forward_ms_median": _median(fwd), "backward_ms_median": _median(bwd),
            "optimizer_ms_median": _median(optm), "step_ms_median": _median([a + b + c for a, b, c in zip(fwd, bwd, optm)]),
            "first_ready_ms_median": _median(first), "last_ready_ms_median": _median(last),
            "overlap_window_ms_median": _median([b - f for b, f in zip(bwd, first)]),
            "tail_ms_median": _median([b - la for b, la in zip(bwd, last)]),
            "backward_ms": bwd}
# --8<-- [end:timeline]


# --8<-- [start:split]
def stage_backward_split(stage, x_in, out, keep, g):
    """B: the input gradient and every linear output's gradient (no weight gradient). W: per linear, the
    weight gradient from that output's gradient."""
    gx, *dys = torch.autograd.grad(out, [x_in, *keep], grad_outputs=g, retain_graph=True)
    return gx, dys


def stage_weight_grads(stage, keep, dys):
    return [torch.autograd.grad(y, w, grad_outputs=dy, retain_graph=False)[0]
            for y, w, dy in zip(keep, weights(stage), dys)]
# --8<-- [end:split]


def stage_times(blocks, x, g_out, cfg, clock: harness.Clock) -> tuple[list[dict], dict]:
    S = cfg["stages"]
    per = cfg["layers"] // S
    stages = [blocks[i * per:(i + 1) * per] for i in range(S)]
    samples = [{"F": [], "B": [], "W": [], "F2": [], "BW": []} for _ in range(S)]
    for it in range(cfg["warmup"] + cfg["steps"]):
        m = [{} for _ in range(S)]
        # pass 1: F of every stage in order, then B and W of every stage in reverse order
        ins, outs, keeps, xin = [], [], [], x.detach().requires_grad_()
        for s, st in enumerate(stages):
            keep = []
            a = clock.mark()
            y = run(st, xin, keep)
            m[s]["F"] = (a, clock.mark())
            ins.append(xin), outs.append(y), keeps.append(keep)
            xin = y.detach().requires_grad_()
        g = g_out
        for s in reversed(range(S)):
            a = clock.mark()
            gx, dys = stage_backward_split(stages[s], ins[s], outs[s], keeps[s], g)
            b = clock.mark()
            stage_weight_grads(stages[s], keeps[s], dys)
            m[s]["B"], m[s]["W"] = (a, b), (b, clock.mark())
            g = gx
        del ins, outs, keeps, dys
        # pass 2: the same stages with the ordinary backward (input and weight gradients in one call)
        ins, outs, xin = [], [], x.detach().requires_grad_()
        for s, st in enumerate(stages):
            a = clock.mark()
            y = run(st, xin)
            m[s]["F2"] = (a, clock.mark())
            ins.append(xin), outs.append(y)
            xin = y.detach().requires_grad_()
        g = g_out
        for s in reversed(range(S)):
            a = clock.mark()
            gx, *_ = torch.autograd.grad(outs[s], [ins[s], *weights(stages[s])], grad_outputs=g)
            m[s]["BW"] = (a, clock.mark())
            g = gx
        del ins, outs
        clock.resolve()  # one synchronize per iteration, after both passes were enqueued
        if it >= cfg["warmup"]:
            for s in range(S):
                for k, (a, b) in m[s].items():
                    samples[s][k].append(clock.ms(a, b))
    rows = []
    T, h = cfg["tokens"], cfg["h"]
    flops = per * 2 * (2 * T * h * 4 * h)  # two linears per block, 2·m·n·k each; B and W the same
    for s in range(S):
        r = {"stage": s, "blocks": per, **{f"{k}_ms_median": _median(v) for k, v in samples[s].items()},
             "matmul_flops_each": flops}
        r["B_plus_W_ms"] = r["B_ms_median"] + r["W_ms_median"]
        rows.append(r)
    return rows, split_check(stages, x, g_out, cfg)


def split_check(stages, x, g_out, cfg) -> dict:
    """The split's gradients against the ordinary backward's, stage by stage with the same upstream
    gradient, and each phase's matmul FLOPs counted by FlopCounterMode (stage 0)."""
    from torch.utils.flop_counter import FlopCounterMode

    tol = TOL[x.dtype]
    worst, bitwise, g = 0.0, True, g_out
    ins, xin = [], x.detach()
    for st in stages:  # every stage's input, as pass 1 computes it
        ins.append(xin.detach().requires_grad_())
        with torch.no_grad():
            xin = run(st, ins[-1])
    counted = {}
    for s in reversed(range(len(stages))):
        st = stages[s]
        keep = []
        with FlopCounterMode(display=False) as fc_f:
            out = run(st, ins[s], keep)
        with FlopCounterMode(display=False) as fc_b:
            gx, dys = stage_backward_split(st, ins[s], out, keep, g)
        with FlopCounterMode(display=False) as fc_w:
            wg = stage_weight_grads(st, keep, dys)
        out2 = run(st, ins[s])
        ref = torch.autograd.grad(out2, [ins[s], *weights(st)], grad_outputs=g)
        for a, b in zip([gx, *wg], ref):
            bitwise &= torch.equal(a, b)
            worst = max(worst, float((a.double() - b.double()).norm() / b.double().norm()))
        if s == 0:
            counted = {"F": fc_f.get_total_flops(), "B": fc_b.get_total_flops(), "W": fc_w.get_total_flops()}
        g = gx
    T, h, per = cfg["tokens"], cfg["h"], cfg["layers"] // cfg["stages"]
    formula = per * 2 * (2 * T * h * 4 * h)
    return {"max_rel_err_vs_BW": worst, "tol": tol, "bitwise_equal": bitwise,
            "flops_counted_stage0": {k: int(v) for k, v in counted.items()}, "flops_formula_each": formula,
            "flops_match": all(int(v) == formula for v in counted.values()),
            "ok": worst <= tol and all(int(v) == formula for v in counted.values())}


def optimizer_times(blocks, cfg, clock: harness.Clock, device) -> list[dict]:
    """Adam's step, each implementation, back-to-back steps in spans (the gradients stay as they are)."""
    params = list(blocks.parameters())
    n = sum(p.numel() for p in params)
    esz = params[0].element_size()
    out = []
    for impl, kw in (("fused", {"fused": True}), ("foreach", {"foreach": True}),
                     ("for-loop", {"foreach": False, "fused": False})):
        try:
            opt = torch.optim.Adam(params, lr=1e-5, **kw)
            opt.step()  # creates exp_avg / exp_avg_sq
        except (RuntimeError, TypeError) as exc:
            out.append({"impl": impl, "supported": False, "error": str(exc)[:200]})
            continue
        per, iters, _ = harness.span_times_ms(opt.step, clock, 0, cfg["opt_spans"], cfg["span_ms"], 10**9)
        t = _median(per)
        state_bytes = sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                          if torch.is_tensor(v) and v.dim() > 0)
        out.append({"impl": impl, "supported": True, "ms_median": t, "iters_per_span": iters,
                    "params": n, "state_bytes": state_bytes, "bytes_min": 7 * n * esz,
                    "GBps": 7 * n * esz / (t / 1e3) / 1e9})
        del opt
    return out


def check(args, cfg):
    if cfg["layers"] % cfg["stages"]:
        raise harness.UsageError(f"layers ({cfg['layers']}) must be a multiple of stages ({cfg['stages']})")


def measure(env, cfg, args):
    device = env.device
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    clock = harness.Clock(device)
    blocks = make_stack(cfg, device, dtype)
    gen = torch.Generator(device=device).manual_seed(7)
    x = torch.randn(cfg["tokens"], cfg["h"], device=device, dtype=dtype, generator=gen)
    target = torch.randn(cfg["tokens"], cfg["h"], device=device, dtype=torch.float32, generator=gen)
    g_out = torch.randn(cfg["tokens"], cfg["h"], device=device, dtype=dtype, generator=gen)
    default_impl = "fused" if device.type == "cuda" else "for-loop"
    opt = torch.optim.Adam(blocks.parameters(), lr=1e-5, **({"fused": True} if device.type == "cuda"
                                                            else {"foreach": False}))
    timeline = backward_timeline(blocks, x, target, opt, clock, cfg["warmup"], cfg["steps"])
    print(f"step {timeline['step_ms_median']:.2f} ms = forward {timeline['forward_ms_median']:.2f} + backward "
          f"{timeline['backward_ms_median']:.2f} + Adam {timeline['optimizer_ms_median']:.2f}; first gradient "
          f"ready at {timeline['first_ready_ms_median']:.2f} ms, window {timeline['overlap_window_ms_median']:.2f} ms",
          flush=True)
    del opt
    stages, check = stage_times(blocks, x, g_out, cfg, clock)
    for r in stages:
        print(f"stage {r['stage']}: F {r['F_ms_median']:.3f}  B {r['B_ms_median']:.3f}  W {r['W_ms_median']:.3f}  "
              f"BW {r['BW_ms_median']:.3f} ms", flush=True)
    # gradients for the optimizer's steps: one ordinary backward
    for p in blocks.parameters():
        p.grad = None
    loss = F.mse_loss(run(blocks, x).float(), target)
    loss.backward()
    optim = optimizer_times(blocks, cfg, clock, device)
    for r in optim:
        if r["supported"]:
            print(f"Adam {r['impl']:>8}: {r['ms_median']:.3f} ms, {r['GBps']:.1f} GB/s of the minimum traffic",
                  flush=True)
    ok = check["ok"] and all(c == 2 * cfg["layers"] for c in timeline["hook_calls_per_step"])
    if not ok:
        print("error: the B/W split's gradients or FLOPs differ from the ordinary backward's, or a gradient "
              "hook did not fire once per parameter (measurements/stages_check, timeline)", file=sys.stderr)
    params = {"h": cfg["h"], "layers": cfg["layers"], "tokens": cfg["tokens"], "stages": cfg["stages"],
              "warmup": cfg["warmup"], "steps": cfg["steps"], "dtype": str(dtype)[6:],
              "parameters": sum(p.numel() for p in blocks.parameters()), "default_impl": default_impl,
              "torch_threads": torch.get_num_threads(),
              "model": "layers × [x + W2·gelu(W1·LayerNorm(x))], W1: h→4h, W2: 4h→h, no biases, LayerNorm "
                       "without affine; loss mse against a random target",
              "timing": ("CUDA events on the current stream, also inside post-accumulate-grad hooks, read after "
                         "one synchronize per step" if device.type == "cuda"
                         else "time.perf_counter (CPU ops have finished when they return)")
                        + "; medians over steps after warm-up",
              "method": {"ready": "Tensor.register_post_accumulate_grad_hook, ready time after the mark "
                                  "before loss.backward()",
                         "B": "torch.autograd.grad(stage out, [stage in, *linear outputs])",
                         "W": "per linear: torch.autograd.grad(linear output, weight, its output's gradient)",
                         "BW": "torch.autograd.grad(stage out, [stage in, *weights]) in a second pass",
                         "optimizer": "torch.optim.Adam(lr=1e-5), back-to-back steps timed in spans"}}
    measurements = {"timeline": timeline, "stages": stages, "stages_check": check, "optimizer": optim}
    return params, measurements, ok


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, check=check,
                          allowed_world_sizes={1}))
