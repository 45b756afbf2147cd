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


def test_f_and_g_directions(monkeypatch):
    """f: identity forward / all-reduce backward; g: the reverse. Run through autograd with dist.all_reduce
    replaced by a two-rank sum of equal tensors (× 2, in place) that records which pass called it."""
    import torch

    calls = []
    phase = {"now": None}

    def fake_all_reduce(tensor, *args, **kwargs):
        calls.append(phase["now"])
        tensor.mul_(2)  # the sum over 2 ranks holding the same tensor

    monkeypatch.setattr(lab.dist, "all_reduce", fake_all_reduce)
    x = torch.arange(1.0, 4.0, requires_grad=True)
    g = torch.tensor([1.0, -2.0, 0.5])

    phase["now"] = "forward"
    y = lab.CopyToTP.apply(x)
    assert torch.equal(y, x)
    phase["now"] = "backward"
    y.backward(g)
    assert calls == ["backward"] and torch.equal(x.grad, 2 * g)

    calls.clear()
    x.grad = None
    phase["now"] = "forward"
    y = lab.ReduceFromTP.apply(x)
    assert torch.equal(y, 2 * x.detach())
    phase["now"] = "backward"
    y.backward(g)
    assert calls == ["forward"] and torch.equal(x.grad, g)
