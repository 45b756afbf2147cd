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
    # the fixed-capacity dispatch: bytes counted on the real all-to-all are the padded buffer's, 2·E·n_cap·h·4,
    # and the padded layer equals one process at every φ of the sweep
    E, h = data["measurements"]["E"], data["params"]["h"]
    for k in ranks:
        for x in k["padded"]:
            assert x["a2a_bytes"] == 2 * E * x["capacity"] * h * 4 and x["diff"] < 1e-5
