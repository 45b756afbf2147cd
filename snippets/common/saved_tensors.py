"""Count the bytes autograd saves for backward, exactly (shared by Ch6 pages, tests and gpu_runs).

Two independent routes:

* ``SavedTensorCounter``: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an
  autograd node packs during the forward. A storage is counted once however many views of it are
  saved (Q, K, V are views of one QKV output), and parameters (and any storage passed in
  ``exclude``) are not counted: they live in memory whether or not we train.
* ``graph_saved_tensors``: walks the finished autograd graph from the loss and reads each node's
  ``_saved_*`` attributes, which names the op that keeps each tensor.

A DTensor is counted by its local shard (what the rank really holds). Works on CPU, CUDA, the
``meta`` device and under ``FakeTensorMode`` (storage identity, not data pointers, is the key).
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass, field

import torch


def _local(t: torch.Tensor) -> torch.Tensor:
    # no tensor can be a DTensor unless torch.distributed.tensor was imported (importing it costs seconds)
    mod = sys.modules.get("torch.distributed.tensor")
    return t.to_local() if mod is not None and isinstance(t, mod.DTensor) else t


def storage_key(t: torch.Tensor) -> int:
    """Identity of the storage behind t (the StorageImpl pointer; also valid on meta/fake tensors)."""
    return _local(t).untyped_storage()._cdata


def storage_nbytes(t: torch.Tensor) -> int:
    return _local(t).untyped_storage().nbytes()


# --8<-- [start:counter]
@dataclass
class SavedTensorCounter:
    """``with SavedTensorCounter(model) as c: loss = model(x)`` → c.total_bytes, c.entries."""
    module: torch.nn.Module | None = None
    exclude: tuple = ()
    entries: "OrderedDict[int, dict]" = field(default_factory=OrderedDict)

    def __post_init__(self):
        params = list(self.module.parameters()) if self.module is not None else []
        self._skip = {storage_key(p) for p in [*params, *self.exclude]}

    def _pack(self, t: torch.Tensor):
        key = storage_key(t)
        if key not in self._skip:
            if key not in self.entries:
                loc = _local(t)
                self.entries[key] = {"bytes": storage_nbytes(t), "dtype": str(loc.dtype).replace("torch.", ""),
                                     "shape": tuple(loc.shape), "saves": 0}
            self.entries[key]["saves"] += 1
        return t  # keep the tensor as is: we only count

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)

    @property
    def total_bytes(self) -> int:
        return sum(e["bytes"] for e in self.entries.values())
# --8<-- [end:counter]


def graph_saved_tensors(root: torch.Tensor, exclude=()) -> list[dict]:
    """Walk the autograd graph behind ``root``; one row per (node, saved tensor attribute).

    Each row: node (e.g. 'BmmBackward0'), attr (e.g. '_saved_self'), key (storage identity),
    bytes (storage bytes), dtype, shape. Storages in ``exclude`` (parameters) are skipped.
    """
    skip = {storage_key(p) for p in exclude}
    rows, seen, stack = [], set(), [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in sorted(dir(node)):
            if not attr.startswith("_saved_"):
                continue
            try:
                val = getattr(node, attr)
            except RuntimeError:  # freed by an earlier backward
                continue
            vals = val if isinstance(val, (tuple, list)) else [val]
            for v in vals:
                if isinstance(v, torch.Tensor) and storage_key(v) not in skip:
                    loc = _local(v)
                    rows.append({"node": type(node).__name__, "attr": attr, "key": storage_key(v),
                                 "bytes": storage_nbytes(v), "dtype": str(loc.dtype).replace("torch.", ""),
                                 "shape": tuple(loc.shape)})
        stack.extend(fn for fn, _ in node.next_functions)
    return rows


def unique_bytes(rows) -> int:
    """Bytes of the distinct storages among rows (a storage saved by several nodes counts once)."""
    return sum({r["key"]: r["bytes"] for r in rows}.values())


def activation_peak_tracker():
    """A ``torch.distributed._tools.mem_tracker.MemTracker`` that also keeps the peak of
    activation + backward-temporary bytes (its ACT and TEMP categories), updated after every op.

    MemTracker's own "peak" snapshot is the breakdown at the peak of the *total* (parameters and
    gradients included); checkpointing changes activations, so we follow ACT + TEMP alone.
    """
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class _Tracker(MemTracker):
        act_peak = 0

        def _update_peak_stats(self, peak_state):
            super()._update_peak_stats(peak_state)
            for snap in self._curr_mem_snap.values():
                self.act_peak = max(self.act_peak, snap[_MemRefType.ACT] + snap[_MemRefType.TEMP])

        def activation_now(self) -> int:
            return sum(snap[_MemRefType.ACT] + snap[_MemRefType.TEMP] for snap in self._curr_mem_snap.values())

    return _Tracker()
