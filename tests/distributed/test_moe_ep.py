"""Distributed smoke run: moe_ep's tiny preset on 2 CPU processes (gloo): expert parallelism equals one process."""
import pytest

from snippets import results

pytestmark = pytest.mark.dist


def test_moe_ep_tiny(run_tiny):
    data, _ = run_tiny("moe_ep", nproc=2)
    results.validate(data)
    ranks = data["measurements"]["ranks"]
    for k in ranks:
        assert max(k["diff"].values()) < 1e-5, k["diff"]
    for i in range(2):
        for j in range(2):
            assert ranks[i]["send"][j] == ranks[j]["recv"][i]
