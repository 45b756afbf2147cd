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
