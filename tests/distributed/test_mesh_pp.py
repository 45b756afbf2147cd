"""Distributed smoke runs: mesh_pp's tiny preset, (pp, tp) = (2, 2) on 4 CPU processes and (dp, pp, tp) = (2, 2, 2)
on 8 (gloo): loss and parameters equal to one process, every rank's collectives equal to the prediction."""
import pytest

from snippets import results
from snippets.ch7_3d_parallelism import d01_3d_parallelism as page

pytestmark = pytest.mark.dist


@pytest.mark.parametrize("nproc, d", [(4, 1), (8, 2)])
def test_mesh_pp_tiny(run_tiny, tmp_path, nproc, d):
    data, _ = run_tiny("mesh_pp", nproc=nproc)
    results.validate(data)
    m = results.Result(tmp_path / "x.json", data).measurements
    assert (m["d"], m["p"], m["t"]) == (d, 2, 2)
    assert m["max_abs_loss_diff"] < 1e-6 and m["max_abs_param_diff"] < 1e-6
    for rk in m["ranks"]:
        assert page.mesh_pp_measured(rk) == page.mesh_pp_prediction(data["params"], d, 2, 2, rk["pp_rank"]), rk
        assert rk["counts_same_every_step"]
