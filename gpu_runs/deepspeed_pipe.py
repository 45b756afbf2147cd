"""DeepSpeed's PipelineModule on 2 ranks: its TrainSchedule instruction stream, what ran, and the loss.

The same 8-layer Linear+tanh stack as gpu_runs/pipeline_bench.py (real variant) is given to
deepspeed.pipe.PipelineModule with num_stages=2 and trained for one batch of m micro-batches with
engine.train_batch(). The program records, per rank:

  * the instruction stream of deepspeed.runtime.pipe.schedule.TrainSchedule (per step: the list of
    instructions, e.g. RecvActivation, ForwardPass, SendGrad), i.e. what the schedule plans;
  * the instructions the engine really executed, in order (its instruction map is wrapped);
  * TrainSchedule.num_pipe_buffers() (DeepSpeed's own count of in-flight forward passes);
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
    "tiny": {"layers": 4, "d": 16, "rows": 4, "m": 4},
    "full": {"layers": 8, "d": 64, "rows": 8, "m": 8},
    "gpu": {"layers": 8, "d": 1024, "rows": 64, "m": 8},
}


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.lin(x))


def layers(n, d):
    torch.manual_seed(0)
    return [Layer(d) for _ in range(n)]


def measure(env, cfg, args):
    import deepspeed
    from deepspeed.pipe import PipelineModule
    from deepspeed.runtime.pipe import schedule as ds_schedule

    deepspeed.init_distributed(dist_backend=env.backend)  # reuses the harness's process group

    torch.set_num_threads(1)
    m, rows, d = cfg["m"], cfg["rows"], cfg["d"]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(m * rows, d, generator=g)
    y = torch.randn(m * rows, d, generator=g)

    # reference: the same layers, no pipeline, loss = mean over micro-batches of the MSE
    ref = nn.Sequential(*layers(cfg["layers"], d))
    with torch.no_grad():
        ref_loss = float(sum(nn.functional.mse_loss(ref(xc), yc) for xc, yc in zip(x.chunk(m), y.chunk(m))) / m)

    # --8<-- [start:deepspeed]
    model = PipelineModule(layers=layers(cfg["layers"], d), num_stages=env.world_size,
                           loss_fn=nn.functional.mse_loss, partition_method="uniform")
    ds_config = {"train_batch_size": m * rows, "train_micro_batch_size_per_gpu": rows,
                 "gradient_accumulation_steps": m, "steps_per_print": 10**9,
                 "optimizer": {"type": "SGD", "params": {"lr": 0.0}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    executed = []
    for kind, fn in list(engine._INSTRUCTION_MAP.items()):  # wrap the engine's instruction handlers
        def logged(*a, _fn=fn, _name=kind.__name__, **k):
            executed.append([_name, k.get("buffer_id")])
            return _fn(*a, **k)
        engine._INSTRUCTION_MAP[kind] = logged
    loss = engine.train_batch(data_iter=iter(zip(x.chunk(m), y.chunk(m))))
    plan = ds_schedule.TrainSchedule(micro_batches=m, stages=env.world_size, stage_id=engine.stage_id)
    planned = [[[type(c).__name__, c.kwargs.get("buffer_id")] for c in step] for step in plan.steps()]
    # --8<-- [end:deepspeed]

    local = {"stage_id": engine.stage_id, "planned": planned, "executed": executed,
             "num_pipe_buffers": plan.num_pipe_buffers(), "loss": float(loss), "n_layers": len(model.forward_funcs)}
    per_rank = harness.gather(local)
    measurements = {"ranks": per_rank, "ref_loss": ref_loss, "m": m}
    if env.is_main:
        print(f"loss {per_rank[0]['loss']:.8f} ref {ref_loss:.8f}; buffers {[r['num_pipe_buffers'] for r in per_rank]}",
              flush=True)
    return {**cfg, "p": env.world_size}, measurements


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, allowed_world_sizes={2}))
