"""DeepSpeed's PipelineModule on 2 ranks: its TrainSchedule instruction stream, what ran, the loss, and a
tied embedding / LM head split across the first and the last stage.

The model is a tiny language model: an embedding (vocab × d) on stage 0, a stack of Linear+tanh layers,
and an LM head on the last stage that reuses the embedding's weight (logits = x · Eᵀ), declared with
deepspeed.pipe.TiedLayerSpec. It is given to PipelineModule(num_stages=2, partition_method="uniform") and
trained for one batch of m micro-batches with engine.train_batch() (plain SGD, lr = cfg["lr"]). The
program records, per rank:

  * the instruction stream of deepspeed.runtime.pipe.schedule.TrainSchedule (per step: the list of
    instructions, e.g. RecvActivation, ForwardPass, SendGrad), i.e. what the schedule plans;
  * the instructions the engine really executed, in order (its instruction map is wrapped), and the bytes
    of every activation / gradient it sent to the neighbouring stage (SendActivation, SendGrad);
  * TrainSchedule.num_pipe_buffers() (DeepSpeed's own count of in-flight forward passes);
  * the parameters it holds (its stage's layers and its copy of the tied weight) and the layer partition
    that each of DeepSpeed's partition methods ("uniform", "parameters") gives for this model;
  * the tied weight's gradient just before and just after the ReduceTiedGrads instruction (an
    all_reduce over the tied stages, pipe/engine.py _exec_reduce_tied_grads), each against the gradient
    of that stage's own use of the weight and of both uses, computed in one process;
  * the tied weight after the optimizer step against one process's SGD step (the two copies stay equal);
  * the global gradient norm that DeepSpeed's clip_grad_norm_ (runtime/utils.py) computed across the
    stages, against one process's norm with the tied weight counted once and counted twice;
  * the loss of train_batch against the same model run without a pipeline.

    torchrun --nproc_per_node=2 gpu_runs/deepspeed_pipe.py                  # CPU, gloo
    torchrun --nproc_per_node=2 gpu_runs/deepspeed_pipe.py --preset gpu     # 2 GPUs, NCCL
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "deepspeed_pipe"
PRESETS = {
    "tiny": {"layers": 4, "d": 16, "rows": 4, "m": 4, "vocab": 32, "lr": 0.1},
    "full": {"layers": 8, "d": 64, "rows": 8, "m": 8, "vocab": 256, "lr": 0.1},
    "gpu": {"layers": 8, "d": 1024, "rows": 64, "m": 8, "vocab": 8192, "lr": 0.1},
}


class Layer(nn.Module):
    def __init__(self, d, seed):
        super().__init__()
        torch.manual_seed(seed)  # the same weights wherever DeepSpeed builds the layer
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Embed(nn.Embedding):
    def __init__(self, vocab, d):
        torch.manual_seed(1000)
        super().__init__(vocab, d)


# --8<-- [start:tied]
def lm_head(embed: nn.Embedding, x: torch.Tensor) -> torch.Tensor:
    """The LM head of the last stage: logits = x · Eᵀ with the embedding's own weight (tied)."""
    return x @ embed.weight.t()


def specs(cfg):
    from deepspeed.pipe import LayerSpec, TiedLayerSpec

    return ([TiedLayerSpec("embed", Embed, cfg["vocab"], cfg["d"])]            # stage 0: E used as the embedding
            + [LayerSpec(Layer, cfg["d"], k) for k in range(cfg["layers"])]
            + [TiedLayerSpec("embed", Embed, cfg["vocab"], cfg["d"], forward_fn=lm_head)])  # last stage: E as the head
# --8<-- [end:tied]


def reference(cfg, x, y, m):
    """One process, no pipeline: the embedding and the head as two copies of E, so each use's gradient is
    visible; the tied gradient is their sum. Returns loss, grads, the norms and E after one SGD step."""
    emb, head = Embed(cfg["vocab"], cfg["d"]), Embed(cfg["vocab"], cfg["d"])
    body = nn.Sequential(*[Layer(cfg["d"], k) for k in range(cfg["layers"])])
    loss = sum(nn.functional.cross_entropy(lm_head(head, body(emb(xc))), yc)
               for xc, yc in zip(x.chunk(m), y.chunk(m))) / m
    loss.backward()
    g_emb, g_head = emb.weight.grad, head.weight.grad
    g_body = [q.grad for q in body.parameters()]
    sq_body = sum(float(g.double().pow(2).sum()) for g in g_body)
    tied = g_emb + g_head
    return {"loss": float(loss), "g_emb": g_emb, "g_head": g_head, "tied": tied,
            "norm_once": (sq_body + float(tied.double().pow(2).sum())) ** 0.5,
            "norm_twice": (sq_body + 2 * float(tied.double().pow(2).sum())) ** 0.5,
            "E_after": emb.weight.detach() - cfg["lr"] * tied}


def measure(env, cfg, args):
    import deepspeed
    import deepspeed.runtime.engine as ds_engine
    from deepspeed.pipe import PipelineModule
    from deepspeed.runtime import utils as ds_utils
    from deepspeed.runtime.pipe import schedule as ds_schedule

    deepspeed.init_distributed(dist_backend=env.backend)  # reuses the harness's process group

    torch.set_num_threads(1)
    m, rows = cfg["m"], cfg["rows"]
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg["vocab"], (m * rows,), generator=g)
    y = torch.randint(0, cfg["vocab"], (m * rows,), generator=g)
    ref = reference(cfg, x, y, m)

    norms = []
    clip = ds_engine.clip_grad_norm_

    def clip_logged(parameters, *a, **k):  # the global norm DeepSpeed computes across the stages (runtime/utils.py:356)
        parameters = list(parameters)
        local = sum(float(q.grad.double().pow(2).sum()) for q in parameters if q.grad is not None) ** 0.5
        out = clip(parameters, *a, **k)
        norms.append([float(out), local])  # [what clip_grad_norm_ returned, this stage's own gradient norm]
        return out
    ds_engine.clip_grad_norm_ = clip_logged

    # --8<-- [start:deepspeed]
    model = PipelineModule(layers=specs(cfg), num_stages=env.world_size,
                           loss_fn=nn.functional.cross_entropy, partition_method="uniform")
    ds_config = {"train_batch_size": m * rows, "train_micro_batch_size_per_gpu": rows,
                 "gradient_accumulation_steps": m, "steps_per_print": 10**9, "gradient_clipping": 1e9,
                 "optimizer": {"type": "SGD", "params": {"lr": cfg["lr"]}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    executed, sent, tied_grad = [], [], {}
    E = engine.module.tied_modules["embed"].weight          # this stage's copy of the tied weight
    for kind, fn in list(engine._INSTRUCTION_MAP.items()):  # wrap the engine's instruction handlers
        def logged(*a, _fn=fn, _name=kind.__name__, **k):
            executed.append([_name, k.get("buffer_id")])
            if _name == "ReduceTiedGrads":
                tied_grad["before"] = E.grad.detach().clone()
            if _name in ("SendActivation", "SendGrad"):      # what crosses the stage boundary (the engine frees it)
                t = engine.pipe_buffers["outputs" if _name == "SendActivation" else "inputs"][k["buffer_id"]]
                t = t if _name == "SendActivation" else t.grad
                sent.append([_name, list(t.shape), t.numel() * t.element_size()])
            out = _fn(*a, **k)
            if _name == "ReduceTiedGrads":
                tied_grad["after"] = E.grad.detach().clone()
            return out
        engine._INSTRUCTION_MAP[kind] = logged
    loss = engine.train_batch(data_iter=iter(zip(x.chunk(m), y.chunk(m))))
    plan = ds_schedule.TrainSchedule(micro_batches=m, stages=env.world_size, stage_id=engine.stage_id)
    planned = [[[type(c).__name__, c.kwargs.get("buffer_id")] for c in step] for step in plan.steps()]
    # --8<-- [end:deepspeed]

    own = ref["g_emb"] if engine.stage_id == 0 else ref["g_head"]  # this stage's own use of E
    counts = engine.module._count_layer_params()
    local = {"stage_id": engine.stage_id, "planned": planned, "executed": executed, "sent": sent,
             "num_pipe_buffers": plan.num_pipe_buffers(), "loss": float(loss), "n_layers": len(model.forward_funcs),
             "params": sum(q.numel() for q in engine.module.parameters()), "tied_params": E.numel(),
             "tied_grad_before_err": float((tied_grad["before"].cpu() - own).abs().max()),
             "tied_grad_before_vs_sum": float((tied_grad["before"].cpu() - ref["tied"]).abs().max()),
             "tied_grad_after_err": float((tied_grad["after"].cpu() - ref["tied"]).abs().max()),
             "tied_grad_before_norm": float(tied_grad["before"].norm()),
             "tied_grad_after_norm": float(tied_grad["after"].norm()),
             "tied_weight_err": float((E.detach().cpu() - ref["E_after"]).abs().max()),
             "E_after": E.detach().cpu().reshape(-1)[:64].tolist(), "clip_norms": norms}
    per_rank = harness.gather(local)
    copies_equal = max(abs(a - b) for a, b in zip(per_rank[0]["E_after"], per_rank[-1]["E_after"]))
    measurements = {"ranks": per_rank, "ref_loss": ref["loss"], "m": m, "copies_max_diff": copies_equal,
                    "layer_params": [int(c) for c in counts], "parts": {
                        "uniform": [int(i) for i in ds_utils.partition_uniform(num_items=len(counts), num_parts=env.world_size)],
                        "parameters": [int(i) for i in ds_utils.partition_balanced(weights=counts, num_parts=env.world_size)]},
                    "ref_norm_once": ref["norm_once"], "ref_norm_twice": ref["norm_twice"],
                    "ref_tied_grad_norm": float(ref["tied"].norm()),
                    "ref_use_grad_norms": [float(ref["g_emb"].norm()), float(ref["g_head"].norm())]}
    if env.is_main:
        print(f"loss {per_rank[0]['loss']:.8f} ref {ref['loss']:.8f}; buffers {[r['num_pipe_buffers'] for r in per_rank]}; "
              f"params {[r['params'] for r in per_rank]}; clip norm {per_rank[0]['clip_norms']} "
              f"(ref once {ref['norm_once']:.6f}, twice {ref['norm_twice']:.6f})", flush=True)
    return {**cfg, "p": env.world_size}, measurements


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, allowed_world_sizes={2}))
