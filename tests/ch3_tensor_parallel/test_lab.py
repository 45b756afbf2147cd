"""Chapter 3 lab: the hand-built f/g MLP equals the unsharded MLP and DTensor's, with one all-reduce per pass."""
import pytest

from snippets.ch3_tensor_parallel import lab

pytestmark = pytest.mark.dist


def test_hand_built_tp_mlp_against_unsharded_and_dtensor():
    ranks = lab.run(lab.tp_mlp_worker, 2)
    for m in ranks:
        assert m["comm"]["hand"] == {"forward": {"allreduce_": 1}, "backward": {"allreduce_": 1}}
        assert m["comm"]["dtensor"] == {"forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}}
        assert max(m["hand_vs_ref"].values()) <= 1e-5
        assert max(m["dtensor_vs_ref"].values()) <= 1e-5
        assert max(m["hand_vs_dtensor"].values()) <= 1e-5
        assert m["local_shapes"]["hand_w1"] == m["local_shapes"]["dtensor_fc1"] == [4 * lab.H // 2, lab.H]


def test_f_and_g_directions():
    """f: identity forward / all-reduce backward; g: the reverse (read from the functions' code)."""
    import inspect

    assert "all_reduce" in inspect.getsource(lab.CopyToTP.backward)
    assert "all_reduce" not in inspect.getsource(lab.CopyToTP.forward)
    assert "all_reduce" in inspect.getsource(lab.ReduceFromTP.forward)
    assert "all_reduce" not in inspect.getsource(lab.ReduceFromTP.backward)
