"""Chapter 4 lab: hand-written GPipe / 1F1B with dist.isend/recv equal one process and torch.distributed.pipelining."""
import pytest

from snippets.ch4_pipeline_parallel import lab
from snippets.common import pipeline_sim as ps

pytestmark = pytest.mark.dist


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_hand_written_schedule_matches_reference_library_and_theorems(schedule):
    ref = lab.reference_grads()
    hand = lab.run(lab.manual_worker, schedule)
    lib = lab.run(lab.library_worker, schedule)
    assert lab.max_grad_error(hand, ref) < 1e-6
    assert lab.max_grad_error(lib, ref) < 1e-6
    order = lambda ranks: [[(a["op"], a["mb"]) for a in acts] for acts in lab.rows(ranks)]  # noqa: E731
    sim = [[(o, i) for o, i, _ in ps.rank_order(schedule, r, 2, lab.M)] for r in range(2)]
    assert order(hand) == order(lib) == sim
    want = [lab.M, lab.M] if schedule == "gpipe" else [2, 1]  # Theorems 4.2.5 and 4.3.4
    assert [r["peak_held"] for r in hand] == want
    b = ps.measured_bubbles(lab.rows(hand))
    assert b["fraction"] > 0 and ps.max_overlap(lab.rows(hand)) > 0  # the two ranks do overlap: a pipeline
