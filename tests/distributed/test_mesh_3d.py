"""Distributed smoke run: mesh_3d's tiny preset on a 2×2 (dp, tp) mesh of 4 CPU processes (gloo)."""
import pytest

from snippets import results
from snippets.ch7_3d_parallelism import d01_3d_parallelism as page

pytestmark = pytest.mark.dist


def test_mesh_3d_tiny(run_tiny, tmp_path):
    data, _ = run_tiny("mesh_3d", nproc=4)
    results.validate(data)
    r = results.Result(tmp_path / "x.json", data)
    m = r.measurements
    assert m["max_abs_loss_diff"] < 1e-6 and m["max_abs_param_diff"] < 1e-6
    for row in page.mesh_rows(r):
        assert row["measured"] == row["predicted"], row
