"""Count the calls and bytes of torch.distributed collectives made inside a block.

DeepSpeed (deepspeed.comm) and FSDP2 both end in torch.distributed functions looked up at call
time, so wrapping those functions sees every collective they issue. Bytes are the tensor bytes
the caller hands over (nccl-tests' size S for that op), counted on the calling rank:

    with CommCounter() as cc:
        loss = engine(x).sum(); engine.backward(loss); engine.step()
    cc.summary()  # {"all_gather_into_tensor": {"calls": 12, "bytes": ...}, ...}
"""
from __future__ import annotations

import functools
from collections import defaultdict

import torch
import torch.distributed as dist

# name -> which argument holds the tensor whose size is the op's S (nccl-tests' convention)
_OPS = {
    "all_reduce": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "broadcast": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "reduce": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "all_gather_into_tensor": lambda a, k: _nbytes(a[0] if a else k["output_tensor"]),
    "reduce_scatter_tensor": lambda a, k: _nbytes(a[1] if len(a) > 1 else k["input"]),
    # torch >= 2.13: the names FSDP2 calls (all_gather_into_tensor / reduce_scatter_tensor are now
    # deprecated wrappers that call these inside distributed_c10d, so nothing is counted twice)
    "all_gather_single": lambda a, k: _nbytes(a[0] if a else k["output_tensor"]),
    "reduce_scatter_single": lambda a, k: _nbytes(a[1] if len(a) > 1 else k["input"]),
    "all_gather": lambda a, k: sum(_nbytes(t) for t in (a[0] if a else k["tensor_list"])),
    "reduce_scatter": lambda a, k: sum(_nbytes(t) for t in (a[1] if len(a) > 1 else k["input_list"])),
    "all_to_all_single": lambda a, k: _nbytes(a[1] if len(a) > 1 else k["input"]),
    "all_to_all": lambda a, k: sum(_nbytes(t) for t in (a[1] if len(a) > 1 else k["input_tensor_list"])),
    "send": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "recv": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "isend": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "irecv": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
}


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


class CommCounter:
    """Context manager: wraps torch.distributed collectives, records (op, bytes) per call."""

    def __init__(self, ops=None):
        self.ops = list(ops or _OPS)
        self.calls: list[tuple[str, int]] = []
        self._saved = {}

    def __enter__(self):
        for name in self.ops:
            orig = getattr(dist, name, None)
            if orig is None:
                continue
            self._saved[name] = orig

            @functools.wraps(orig)
            def wrapper(*args, __name=name, __orig=orig, **kwargs):
                try:
                    self.calls.append((__name, int(_OPS[__name](args, kwargs))))
                except (IndexError, KeyError, TypeError):
                    self.calls.append((__name, 0))
                return __orig(*args, **kwargs)

            setattr(dist, name, wrapper)
        return self

    def __exit__(self, *exc):
        for name, orig in self._saved.items():
            setattr(dist, name, orig)
        self._saved.clear()
        return False

    def summary(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "bytes": 0})
        for name, b in self.calls:
            out[name]["calls"] += 1
            out[name]["bytes"] += b
        return dict(out)

    def total_bytes(self, *names: str) -> int:
        return sum(b for n, b in self.calls if not names or n in names)
