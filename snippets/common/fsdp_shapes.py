"""FSDP2 shard sizes of a large model in one process: shared by Ch5-05 and gpu_runs/fsdp_bench.py.

A LLaMA-7B-shaped model is built on the meta device (no storage) and `fully_shard` is called for real
inside torch's fake process group, so one process reads what rank r of N would hold. Memory formulas
come from snippets.common.zero_memory (never re-defined here).
"""
from __future__ import annotations

from contextlib import contextmanager

from snippets.common import zero_memory as zm


# --8<-- [start:fake]
LLAMA7B_LIKE = {"d": 4096, "layers": 32, "ff": 11008, "vocab": 32000}


def llama_like_meta(d: int, layers: int, ff: int, vocab: int):
    """A LLaMA-7B-shaped stack of bias-free Linear layers (norms left out) on the meta device."""
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
            self.down = nn.Linear(ff, d, bias=False)

        def forward(self, x):
            return x

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(d, vocab, bias=False)

    with torch.device("meta"):  # no storage: 7B parameters cost nothing here
        return Model()


@contextmanager
def fake_world(n: int, rank: int = 0, replicate: int = 1):
    """One process that *believes* it is rank `rank` of `n` (torch's fake process group).

    Yields a 1-D mesh of n ranks, or with replicate > 1 the HSDP mesh (replicate, n // replicate).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=n)
    try:
        if replicate == 1:
            yield init_device_mesh("cpu", (n,))
        else:
            yield init_device_mesh("cpu", (replicate, n // replicate), mesh_dim_names=("replicate", "shard"))
    finally:
        dist.destroy_process_group()


def fsdp2_local_numel(n: int, rank: int = 0, cfg: dict = LLAMA7B_LIKE, replicate: int = 1) -> dict:
    """fully_shard every block and the root on a world of n; read this rank's DTensor shards."""
    from torch.distributed.fsdp import fully_shard

    with fake_world(n, rank, replicate) as mesh:
        model = llama_like_meta(**cfg)
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        params = list(model.parameters())
        return {"psi": sum(p.numel() for p in params),
                "local": sum(p.to_local().numel() for p in params),
                "block_psi": sum(p.numel() for p in model.blocks[0].parameters()),
                "root_psi": sum(p.numel() for k, p in model.named_parameters() if not k.startswith("blocks.")),
                "placements": sorted({str(p.placements) for p in params}),
                "rows": [p.shape[0] for p in params]}
# --8<-- [end:fake]


# --8<-- [start:memory]
FSDP2_BYTES_PER_LOCAL_ELEMENT = {"fp32 sharded param (= master)": 4, "fp32 sharded grad": 4, "Adam m, v (fp32)": 8}


def fsdp2_persistent_bytes(local_numel: int) -> int:
    """Per-rank persistent bytes with MixedPrecisionPolicy(bf16, fp32 reduce) and Adam (Thm 5.5.5)."""
    return sum(FSDP2_BYTES_PER_LOCAL_ELEMENT.values()) * local_numel


def large_model_rows(ns=(8, 16, 32, 48, 64), cfg: dict = LLAMA7B_LIKE) -> list[dict]:
    rows = []
    for n in ns:
        first, last = fsdp2_local_numel(n, 0, cfg), fsdp2_local_numel(n, n - 1, cfg)
        psi = first["psi"]
        rows.append({"N": n, "psi": psi, "local_rank0": first["local"], "local_last": last["local"],
                     "fsdp2_bytes": fsdp2_persistent_bytes(first["local"]),
                     "zero3_bytes": zm.zero_memory_bytes(psi, n, 3),
                     "block_psi": first["block_psi"], "root_psi": first["root_psi"]})
    return rows


def hsdp_rows(n: int = 64, shard_sizes=(8, 16, 64), cfg: dict = LLAMA7B_LIKE) -> list[dict]:
    """HSDP: shard within groups of `shard` ranks, replicate across n // shard groups (2-D mesh)."""
    rows = []
    for shard in shard_sizes:
        got = fsdp2_local_numel(n, 0, cfg, replicate=n // shard)
        rows.append({"N": n, "shard": shard, "replicate": n // shard, "psi": got["psi"], "local_rank0": got["local"],
                     "placements": got["placements"], "fsdp2_bytes": fsdp2_persistent_bytes(got["local"]),
                     "zero3_bytes_at_shard": zm.zero_memory_bytes(got["psi"], shard, 3)})
    return rows
# --8<-- [end:memory]
