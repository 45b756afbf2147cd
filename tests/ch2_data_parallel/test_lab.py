"""Chapter 2 lab: the hand-made Reducer equals torch DDP bit for bit, and the lab's stated exceptions hold."""
import pytest
import torch

from snippets.ch2_data_parallel import lab

pytestmark = pytest.mark.dist


def _same(r, key):
    return [a == b for a, b in zip(r["ddp"], r[key])]


def test_hand_ddp_bitwise_equals_torch_ddp_at_n3_and_order_matters():
    res = lab.run(lab.compare_worker, 3)
    for r in res:
        assert r["ddp"] == res[0]["ddp"]  # replicas bitwise equal across ranks
        assert all(_same(r, "ddp/ddp"))
        assert not any(_same(r, "sum_then_divide/ddp"))
        assert not any(_same(r, "ddp/per_param"))
        assert all(0 < d < 1e-6 for d in r["max_abs_diff"]["sum_then_divide/ddp"])
    # the rebuilt buckets are the rule applied to the gradient-ready order (head first, embed last)
    names = res[0]["param_names"]
    model = lab.Net()
    flat = [k for b in res[0]["hand_buckets"] for k in b]
    assert flat[:2] == ["head.bias", "head.weight"] and flat[-1] == "embed.weight" and sorted(flat) == sorted(names)
    # against torch's own bucketing (C++ _compute_bucket_assignment_by_size, with the caps torch's DDP config derives
    # from bucket_cap_mb), not against the book's assign_buckets that HandDDP itself calls
    from torch.nn.parallel.distributed import _BucketCapacityConfig

    cfg = _BucketCapacityConfig.create(lab.CAP_MB, None, False)
    params = dict(model.named_parameters())
    want, _ = torch.distributed._compute_bucket_assignment_by_size(
        [params[k].detach() for k in flat], [cfg.first_bucket_bytes_cap, cfg.bucket_bytes_cap], [False] * len(flat))
    assert [[flat[i] for i in b] for b in want] == res[0]["hand_buckets"]


def test_order_does_not_matter_at_n2_and_division_does_not_at_n4():
    two = lab.run(lab.compare_worker, 2)[0]
    assert all(all(_same(two, k)) for k in ("ddp/ddp", "sum_then_divide/ddp", "ddp/per_param"))
    four = lab.run(lab.compare_worker, 4)[0]
    assert all(_same(four, "ddp/ddp")) and all(_same(four, "sum_then_divide/ddp"))
    assert not all(_same(four, "ddp/per_param"))


def test_powers_of_two_are_exact_and_one_third_is_not():
    """The lab's explanation: x·(1/2) == x/2 always; x·fl(1/3) differs from x/3 for some x."""
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.mul(x, 0.5), x / 2) and torch.equal(torch.mul(x, 0.25), x / 4)
    assert not torch.equal(torch.mul(x, 1.0 / 3), x / 3)
