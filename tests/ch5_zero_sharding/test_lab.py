"""Chapter 5 lab: the spawned workers reproduce unsharded Adam and the ZeRO byte formulas."""
import pytest

from snippets.ch5_zero_sharding import lab
from snippets.common.zero_memory import zero_memory_breakdown, zero_memory_bytes

pytestmark = pytest.mark.dist


def test_manual_zero1_matches_unsharded_adam_and_formula():
    ranks = lab.run(lab.manual_zero1_worker, 2)
    ref = lab.reference_checksum(2)
    psi = ranks[0]["psi"]
    want = zero_memory_breakdown(psi, 2, stage=1)
    for m in ranks:
        assert m["checksum"] == ref
        assert (m["params"], m["grads"], m["optimizer"]) == (want["params"], want["grads"], want["optimizer"])


def test_fsdp2_total_equals_zero3_formula():
    ranks = lab.run(lab.fsdp2_worker, 2)
    psi = ranks[0]["psi"]
    for m in ranks:
        assert m["params"] == m["grads"] == 4 * psi // 2
        assert m["optimizer"] == 8 * psi // 2
        assert m["params"] + m["grads"] + m["optimizer"] == zero_memory_bytes(psi, 2, 3)


def test_lab_uses_current_collectives_without_future_warning():
    """Lab 5 calls all_gather_single / reduce_scatter_single (torch 2.13 marks the *_tensor names deprecated with a
    FutureWarning); with FutureWarning turned into an error, the forked workers still finish and agree."""
    import inspect
    import warnings

    src = inspect.getsource(lab.manual_zero1_worker)
    assert "reduce_scatter_single" in src and "all_gather_single" in src
    assert "all_gather_into_tensor" not in src and "reduce_scatter_tensor" not in src
    import torch.distributed as dist

    with warnings.catch_warnings():          # the sanity check: the old name does warn in this torch
        warnings.simplefilter("error", FutureWarning)
        with pytest.raises(FutureWarning):
            dist.all_gather_into_tensor(None, None)
    with warnings.catch_warnings():          # fork copies this filter into the workers
        warnings.simplefilter("error", FutureWarning)
        ranks = lab.run(lab.manual_zero1_worker, 2)
        fsdp = lab.run(lab.fsdp2_worker, 2)
    assert all(m["checksum"] == lab.reference_checksum(2) for m in ranks) and len(fsdp) == 2
