"""Ch1-01 Collective Operation 의 분류: the code the page runs and the tests import.

The eight collectives as pure functions from per-rank inputs to per-rank outputs (a NumPy
reference), their names in MPI and torch.distributed, ring schedules for the two halves of an
AllReduce (reduce-scatter and all-gather) with per-rank byte counts, the adjoint (duality)
check, readers for the saved real torch.distributed run, and per-rank bytes of each collective
where DDP, ZeRO, FSDP and MoE use it.

Convention (the same in gpu_runs/collectives_semantics.py): a rank's *full* vector has N·c
elements (N blocks of c); gather / all_gather take a c-element *block* from every rank. Ranks
with no defined input or output (non-root ranks of rooted ops) hold None.
"""
from __future__ import annotations

import numpy as np

from snippets.common.alphabeta import BUSBW_FACTOR, ring_allreduce_time
from snippets.common.zero_memory import zero_comm_volume

COLLECTIVES = ("broadcast", "scatter", "gather", "all_gather",
               "reduce", "reduce_scatter", "all_reduce", "all_to_all")

# (MPI name, torch.distributed names). MPI: MPI Forum, MPI 4.1 (collective communication chapter); torch: torch/distributed/distributed_c10d.py.
NAMES = {
    "broadcast": ("MPI_Bcast", "broadcast"),
    "scatter": ("MPI_Scatter", "scatter"),
    "gather": ("MPI_Gather", "gather"),
    "all_gather": ("MPI_Allgather", "all_gather, all_gather_into_tensor (2.13: all_gather_single)"),
    "reduce": ("MPI_Reduce", "reduce"),
    "reduce_scatter": ("MPI_Reduce_scatter_block (균등), MPI_Reduce_scatter (recvcounts)",
                       "reduce_scatter, reduce_scatter_tensor (2.13: reduce_scatter_single)"),
    "all_reduce": ("MPI_Allreduce", "all_reduce"),
    "all_to_all": ("MPI_Alltoall", "all_to_all, all_to_all_single"),
}
ROOTED = ("broadcast", "scatter", "gather", "reduce")
BLOCK_INPUT = ("gather", "all_gather")  # every rank contributes a c-element block


# --8<-- [start:reference]
def broadcast(xs, root=0):
    """Every rank ends with root's vector; the other ranks' inputs are ignored."""
    return [np.array(xs[root]) for _ in xs]


def scatter(xs, root=0):
    """Root's N·c vector is cut into N blocks; rank r receives block r."""
    return [b.copy() for b in np.split(np.asarray(xs[root]), len(xs))]


def gather(xs, root=0):
    """Root receives the concatenation of every rank's block, in rank order."""
    return [np.concatenate(xs) if r == root else None for r in range(len(xs))]


def all_gather(xs, root=None):
    """Every rank receives the concatenation of every rank's block."""
    return [np.concatenate(xs) for _ in xs]


def reduce(xs, root=0):
    """Root receives the element-wise SUM of all vectors."""
    total = np.sum(xs, axis=0)
    return [total.copy() if r == root else None for r in range(len(xs))]


def reduce_scatter(xs, root=None):
    """Rank r receives block r of the element-wise SUM."""
    return [b.copy() for b in np.split(np.sum(xs, axis=0), len(xs))]


def all_reduce(xs, root=None):
    """Every rank receives the element-wise SUM (not the mean)."""
    total = np.sum(xs, axis=0)
    return [total.copy() for _ in xs]


def all_to_all(xs, root=None):
    """Block j of rank i's input becomes block i of rank j's output (a block transpose)."""
    n = len(xs)
    blocks = [np.split(np.asarray(x), n) for x in xs]
    return [np.concatenate([blocks[i][j] for i in range(n)]) for j in range(n)]


REFERENCE = {name: globals()[name] for name in COLLECTIVES}
# --8<-- [end:reference]


# --8<-- [start:inputs]
def make_inputs(collective: str, n: int, c: int, root: int = 0):
    """The inputs the real run uses: full vector 100·(r+1) + arange(N·c), block 100·(r+1) + arange(c).

    Scatter's input exists only at the root (None elsewhere).
    """
    if collective in BLOCK_INPUT:
        return [100 * (r + 1) + np.arange(c) for r in range(n)]
    xs = [100 * (r + 1) + np.arange(n * c) for r in range(n)]
    if collective == "scatter":
        return [x if r == root else None for r, x in enumerate(xs)]
    return xs


def shape_row(collective: str, n: int, c: int, root: int = 0) -> dict:
    """Input and output element counts on the root and on the other ranks, by running the reference."""
    xs = make_inputs(collective, n, c, root)
    ys = REFERENCE[collective](xs, root)
    other = (root + 1) % n
    size = lambda v: "—" if v is None else str(np.size(v))  # noqa: E731
    return {"collective": collective, "in_root": size(xs[root]), "in_other": size(xs[other]),
            "out_root": size(ys[root]), "out_other": size(ys[other])}
# --8<-- [end:inputs]


def shape_table(n: int = 4, c: int = 2) -> list[list[str]]:
    """Rows for the page: name, MPI, torch, element counts (root / other rank) of input and output."""
    rows = []
    for name in COLLECTIVES:
        s = shape_row(name, n, c)
        mpi, torch_names = NAMES[name]
        rooted = name in ROOTED
        fmt = (lambda a, b: f"{a} / {b}") if rooted else (lambda a, b: a)
        rows.append([f"**{name}**", f"`{mpi}`" if " " not in mpi else mpi, torch_names,
                     "예" if rooted else "아니오", fmt(s["in_root"], s["in_other"]), fmt(s["out_root"], s["out_other"])])
    return rows


# --8<-- [start:theorem]
def check_decomposition(n: int, c: int, trials: int = 20, seed: int = 0) -> bool:
    """all_gather(reduce_scatter(x)) == all_reduce(x) on random integer inputs."""
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        xs = list(rng.integers(-1000, 1000, size=(n, n * c)))
        if not all(np.array_equal(a, b) for a, b in
                   zip(all_gather(reduce_scatter(xs)), all_reduce(xs))):
            return False
    return True


def adjoint_gap(n: int, c: int, seed: int = 0) -> tuple[int, int]:
    """⟨AG(b), x⟩ and ⟨b, RS(x)⟩ for random integer b (N blocks) and x (N full vectors)."""
    rng = np.random.default_rng(seed)
    b = list(rng.integers(-50, 50, size=(n, c)))
    x = list(rng.integers(-50, 50, size=(n, n * c)))
    lhs = sum(int(np.dot(g, xr)) for g, xr in zip(all_gather(b), x))
    rhs = sum(int(np.dot(br, yr)) for br, yr in zip(b, reduce_scatter(x)))
    return lhs, rhs


def ag_backward_by_differences(n: int, c: int, seed: int = 0):
    """∂L/∂b for L(b) = Σ_r ⟨w_r, AG(b)_r⟩, by unit differences (exact: L is linear), and RS(w)."""
    rng = np.random.default_rng(seed)
    b = rng.integers(-9, 9, size=(n, c))
    w = list(rng.integers(-9, 9, size=(n, n * c)))
    loss = lambda bb: sum(int(np.dot(wr, yr)) for wr, yr in zip(w, all_gather(list(bb))))  # noqa: E731
    grad = np.zeros_like(b)
    for r in range(n):
        for k in range(c):
            e = np.zeros_like(b)
            e[r, k] = 1
            grad[r, k] = loss(b + e) - loss(b)
    return grad, np.array(reduce_scatter(w))
# --8<-- [end:theorem]


# --8<-- [start:ring]
def ring_reduce_scatter(xs: np.ndarray):
    """Ring reduce-scatter on x[r] (N full vectors): N−1 steps, rank r sends to r+1.

    Step t: rank r sends its running sum of block (r − t − 1) mod N; the receiver adds it.
    Afterwards rank r holds the complete block r. Returns (blocks, bytes sent per rank).
    """
    x = np.asarray(xs)
    n = x.shape[0]
    data = np.stack(np.split(x, n, axis=1), axis=1).copy()  # data[r, j] = rank r's block j
    ranks, nxt = np.arange(n), (np.arange(n) + 1) % n
    sent = np.zeros(n, dtype=np.int64)
    for t in range(n - 1):
        j = (ranks - t - 1) % n
        data[nxt, j] += data[ranks, j]
        sent += data.shape[2] * x.dtype.itemsize
    return data[ranks, ranks], sent


def ring_all_gather(blocks: np.ndarray):
    """Ring all-gather of blocks[r]: N−1 steps; step t, rank r forwards block (r − t) mod N."""
    b = np.asarray(blocks)
    n, c = b.shape
    data = np.zeros((n, n, c), dtype=b.dtype)
    ranks, nxt = np.arange(n), (np.arange(n) + 1) % n
    data[ranks, ranks] = b
    sent = np.zeros(n, dtype=np.int64)
    for t in range(n - 1):
        j = (ranks - t) % n
        data[nxt, j] = data[ranks, j]
        sent += c * b.dtype.itemsize
    return data.reshape(n, n * c), sent
# --8<-- [end:ring]


def ring_traffic(ns=(2, 3, 4, 8, 16, 64, 256), c: int = 4, seed: int = 0) -> list[dict]:
    """Run RS then AG on real integer data; per-rank bytes of each half against (N−1)/N·S."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        x = rng.integers(-100, 100, size=(n, n * c)).astype(np.int32)
        s = n * c * x.dtype.itemsize
        shards, rs_sent = ring_reduce_scatter(x)
        full, ag_sent = ring_all_gather(shards)
        rows.append({"N": n, "S": s, "rs_max": int(rs_sent.max()), "rs_min": int(rs_sent.min()),
                     "ag_max": int(ag_sent.max()), "ag_min": int(ag_sent.min()),
                     "half": (n - 1) / n * s, "ring_allreduce": float(ring_allreduce_time(n, s, 0.0, 1.0)),
                     "correct": bool(np.array_equal(full, np.broadcast_to(x.sum(0), full.shape)))})
    return rows


def usage_simulated(psi: int, n: int) -> dict[str, int]:
    """Per-rank bytes sent, max over ranks, when the ring simulators above run the three
    gradient/parameter schemes on real 2-byte (int16) arrays of psi elements (psi divisible by n).
    DP's AllReduce runs on Ch1-03's ring_allreduce, a separately written ring, not on RS + AG here."""
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    rng = np.random.default_rng(0)
    grads = rng.integers(-3, 3, size=(n, psi)).astype(np.int16)
    _, ar, _, _ = ring_allreduce(grads)               # DP: one AllReduce
    shards, rs = ring_reduce_scatter(grads)          # gradient reduce-scatter
    _, ag = ring_all_gather(shards)                   # all-gather (of the sums, or of updated params)
    _, ag_p = ring_all_gather(grads[:, : psi // n])   # a parameter all-gather from 1/N shards
    return {"DP (all_reduce)": int(ar.max()), "ZeRO-2 (RS + AG)": int((rs + ag).max()),
            "ZeRO-3 (2·AG + RS)": int((2 * ag_p + rs).max())}


# ---------------------------------------------------------------- the saved real run

def calls(result) -> list[dict]:
    """The recorded calls of a collectives_semantics results file (or its data dict)."""
    data = result.data if hasattr(result, "data") else result
    return data["measurements"]["calls"]


def check_against_reference(data) -> list[dict]:
    """For every recorded call: do the real per-rank outputs equal the reference's on the real inputs?"""
    m = data.data["measurements"] if hasattr(data, "data") else data["measurements"]
    n, root = m["world_size"], m["root"]
    rows = []
    for call in m["calls"]:
        xs = [None if r["input"] is None else np.array(r["input"]) for r in call["ranks"]]
        got = [None if r["output"] is None else np.array(r["output"]) for r in call["ranks"]]
        kind = call["collective"]
        if kind == "rs_then_ag":
            want = all_gather(reduce_scatter(xs))
        elif kind == "all_reduce_avg":  # the mean; None everywhere if the backend refused AVG
            refused = any(r.get("error") for r in call["ranks"])
            want = [None if refused else y / n for y in all_reduce(xs)]
        else:
            want = REFERENCE[kind](xs, root)
        same = all((g is None and w is None) or (g is not None and w is not None and np.array_equal(g, w))
                   for g, w in zip(got, want))
        warning = next((r["warning"] for r in call["ranks"] if r["warning"]), None)
        rows.append({"collective": kind, "api": call["api"], "n": n, "match": same, "warning": warning})
    return rows


def call_table(data, api: str) -> str:
    """Markdown: one row per rank with that rank's real input and output of one recorded call."""
    call = next(c for c in calls(data) if c["api"] == api)
    fmt = lambda v: "—" if v is None else " ".join(str(e) for e in v)  # noqa: E731
    lines = ["| rank | 입력 | 출력 |", "|---:|---|---|"]
    lines += [f"| {r['rank']} | {fmt(r['input'])} | {fmt(r['output'])} |" for r in call["ranks"]]
    return "\n".join(lines)


def reduce_scratch(data) -> list[dict]:
    """What a non-root rank's in-place buffer holds after reduce (undefined by the API)."""
    call = next(c for c in calls(data) if c["api"] == "reduce")
    m = data.data["measurements"] if hasattr(data, "data") else data["measurements"]
    n, c = m["world_size"], m["block"]
    total = np.sum([r["input"] for r in call["ranks"]], axis=0)
    rows = []
    for r in call["ranks"]:
        if r["scratch"] is None:
            continue
        buf = np.array(r["scratch"])
        own = slice(r["rank"] * c, (r["rank"] + 1) * c)
        rows.append({"rank": r["rank"], "buffer": buf.tolist(), "own_block_is_total": bool(np.array_equal(buf[own], total[own])),
                     "equals_input": bool(np.array_equal(buf, r["input"])),
                     "equals_total": bool(np.array_equal(buf, total))})
    return rows


# ---------------------------------------------------------------- one tab per hardware

def _runs_label(run) -> str:
    h = run.hardware
    unit = "GPUs" if h["kind"] == "gpu" else "processes"
    return f"{h['backend']}, N = {h['world_size']} {unit}"


def check_tab(plat) -> str:
    """Experiment 2, one hardware: every recorded call against the reference, per world size."""
    from snippets.results import markdown_table

    out = []
    for run in plat.runs:
        rows = check_against_reference(run)
        warned = sorted({x["api"] for x in rows if x["warning"]})
        out += [f"**{_runs_label(run)}, torch {run.data['versions']['torch']}**",
                markdown_table(["호출한 API", "의미 (reference)", "reference 와 일치", "FutureWarning"],
                               [[f"`{x['api']}`", x["collective"], "✅" if x["match"] else "❌", x["warning"] or ""]
                                for x in rows]),
                f"{len(rows)} 개 호출 중 reference 와 일치: **{sum(x['match'] for x in rows)}**. FutureWarning 을 낸 API: "
                + (", ".join(f"`{a}`" for a in warned) or "없음") + "."]
    return "\n\n".join(out)


def calls_tab(plat) -> str:
    """Experiment 2, one hardware: the real per-rank inputs and outputs of each collective (collapsed)."""
    out = []
    for run in plat.runs:
        out.append(f"**{_runs_label(run)}**")
        for k, api in enumerate(COLLECTIVES):
            table = call_table(run, api).replace("\n", "\n    ")
            out.append(f'???{"+" if k == 0 else ""} example "{api}"\n\n    {table}')
    return "\n\n".join(out)


def reduce_scratch_tab(plat) -> str:
    """What this backend left in the non-root buffers of reduce, and what that reading says."""
    from snippets.results import markdown_table

    out = []
    for run in plat.runs:
        rows = reduce_scratch(run)
        out.append(f"**{_runs_label(run)}**")
        out.append(markdown_table(["rank (root 아님)", "reduce 뒤 buffer", "= 자기 입력?", "= 전체 합?", "자기 블록은 완전한 합?"],
                                  [[x["rank"], " ".join(map(str, x["buffer"])), x["equals_input"], x["equals_total"],
                                    x["own_block_is_total"]] for x in rows]))
        backend = run.hardware["backend"]
        if all(x["equals_input"] for x in rows):
            what = "root 가 아닌 rank 의 buffer 는 입력 그대로 남았습니다"
        elif all(x["equals_total"] for x in rows):
            what = "root 가 아닌 rank 의 buffer 에도 전체 합이 들어 있었습니다"
        else:
            what = "root 가 아닌 rank 의 buffer 는 입력도 합도 아닌 값 (부분합) 으로 덮어써졌습니다"
            if all(x["own_block_is_total"] for x in rows):
                what += (". 자기 블록만은 완전한 합인데, 이는 이 구현이 ReduceScatter 를 먼저 하고 root 가 블록을 모으는 방식으로 "
                         "Reduce 를 수행한다는 흔적으로 보입니다 (관측이며, 문서화된 동작은 아닙니다)")
        out.append(f"이 {backend} 에서 {what}.")
    return "\n\n".join(out)


def decomposition_tab(plat) -> str:
    """Theorem 1.1.10 on the real run: reduce_scatter then all_gather against all_reduce, rank by rank."""
    from snippets.results import markdown_table

    out = []
    for run in plat.runs:
        by_api = {c["api"]: c for c in calls(run)}
        comp = next(c for c in calls(run) if c["collective"] == "rs_then_ag")
        rows = [[rs["rank"], " ".join(map(str, rs["shard"])), " ".join(map(str, rs["output"])),
                 " ".join(map(str, ar["output"])), "✅" if rs["output"] == ar["output"] else "❌"]
                for rs, ar in zip(comp["ranks"], by_api["all_reduce"]["ranks"])]
        out += [f"**{_runs_label(run)}** (`{comp['api']}`)",
                markdown_table(["rank", "RS 의 shard", "RS → AG", "all_reduce", "같음"], rows)]
    return "\n\n".join(out)


def avg_tab(plat) -> str:
    """SUM (the default op) and ReduceOp.AVG as this backend returned them on rank 0."""
    out = []
    for run in plat.runs:
        by_api = {c["api"]: c for c in calls(run)}
        s, a = by_api["all_reduce"]["ranks"][0], by_api["all_reduce(op=ReduceOp.AVG)"]["ranks"][0]
        backend = run.hardware["backend"]
        n = run.hardware["world_size"]
        if a["error"]:
            verdict = f"이 {backend} 는 AVG 를 거절했습니다"
        elif np.allclose(np.asarray(a["output"], float), np.asarray(s["output"], float) / n):
            verdict = f"이 {backend} 는 float 에 대해 AVG 를 받아 평균 (SUM / N) 을 돌려주었습니다"
        else:
            verdict = f"이 {backend} 는 AVG 를 받았지만 SUM / N 과 다른 값을 돌려주었습니다"
        out.append(f"rank 0, SUM: {s['output']}  \nrank 0, AVG: {a['output'] if not a['error'] else a['error']}  \n"
                   f"(torch {run.data['versions']['torch']}, {backend}, N = {run.hardware['world_size']}): {verdict}.")
    return "\n\n".join(out)


# --8<-- [start:usage]
def usage_bytes(psi: float, n: int, elem: int = 2, moe_tokens: int = 4096, moe_hidden: int = 4096,
                moe_topk: int = 2) -> list[dict]:
    """Per-rank bytes *sent* by each use of a collective, ψ parameters, N ranks: per training step,
    except DDP's construction-time broadcast (once) and MoE (per MoE layer).

    S is the collective's nccl-tests size (the full buffer); ring-style algorithms make every rank
    send BUSBW_FACTOR[op](N)·S (nccl-tests' bus-bandwidth factor is exactly that ratio). Broadcast
    is counted for a pipelined chain (every rank but the last forwards S). MoE counts one layer's
    forward: dispatch + combine of tokens·top-k·hidden elements, under uniform routing.
    """
    g = psi * elem  # one copy of the parameters (or gradients) in bytes
    moe = moe_tokens * moe_topk * moe_hidden * elem
    uses = [
        ("DDP 생성", "broadcast", "rank 0 의 parameter/buffer (fp32)", psi * 4, 1),
        ("DDP backward", "all_reduce", "gradient bucket 전체", g, 1),
        ("ZeRO-2 backward", "reduce_scatter", "gradient → 자기 shard", g, 1),
        ("ZeRO-2 step 뒤", "all_gather", "갱신된 parameter shard", g, 1),
        ("ZeRO-3/FSDP forward+backward", "all_gather", "parameter (forward, backward 에 한 번씩)", g, 2),
        ("ZeRO-3/FSDP backward", "reduce_scatter", "gradient → 자기 shard", g, 1),
        ("MoE layer (forward)", "all_to_all", "token dispatch + combine", moe, 2),
    ]
    return [{"use": u, "op": op, "what": what, "S": s, "calls": k, "sent_per_rank": k * BUSBW_FACTOR[op](n) * s}
            for u, op, what, s, k in uses]


def zero_step_bytes(psi: float, n: int, elem: int = 2) -> dict[str, float]:
    """Per-rank bytes sent per step by DP, ZeRO-2 and ZeRO-3, summed from usage_bytes."""
    rows = usage_bytes(psi, n, elem)
    pick = lambda *uses: sum(r["sent_per_rank"] for r in rows if r["use"] in uses)  # noqa: E731
    return {"DP (all_reduce)": pick("DDP backward"),
            "ZeRO-2 (RS + AG)": pick("ZeRO-2 backward", "ZeRO-2 step 뒤"),
            "ZeRO-3 (2·AG + RS)": pick("ZeRO-3/FSDP forward+backward", "ZeRO-3/FSDP backward")}


def zero_paper_bytes(psi: float, n: int, elem: int = 2) -> dict[str, float]:
    """The same three from snippets.common.zero_memory (ZeRO §7: 2ψ, 2ψ, 3ψ elements) × (N−1)/N × bytes."""
    f = (n - 1) / n * elem
    return {"DP (all_reduce)": zero_comm_volume(psi, 0) * f, "ZeRO-2 (RS + AG)": zero_comm_volume(psi, 2) * f,
            "ZeRO-3 (2·AG + RS)": zero_comm_volume(psi, 3) * f}
# --8<-- [end:usage]


# ---------------------------------------------------------------- the picture of §📖 (inline HTML)

def _decode(v: int, n: int) -> tuple[list[int], int]:
    """Inputs are 2**r + 64·j (rank r, block j, c = 1): a sum over ranks R of block j is
    Σ 2**r + 64·j·|R|. Returns (R, j)."""
    mask = int(v) % 64
    ranks = [r for r in range(n) if mask >> r & 1]
    return ranks, int(v) // 64 // len(ranks)


def figure_cells(collective: str, n: int = 4):
    """(inputs, outputs) of one collective on encoded values, as grids of (ranks, block) or None."""
    full = [np.array([2 ** r + 64 * j for j in range(n)]) for r in range(n)]
    if collective in BLOCK_INPUT:
        xs = [np.array([2 ** r + 64 * r]) for r in range(n)]  # rank r's block is "its" block r
    elif collective == "scatter":
        xs = [full[0]] + [None] * (n - 1)
    else:
        xs = full
    ys = REFERENCE[collective](xs, 0)
    grid = lambda vs: [None if v is None else [_decode(e, n) for e in v] for v in vs]  # noqa: E731
    return grid(xs), grid(ys)


def taxonomy_html(n: int = 4) -> str:
    """Eight collectives, before → after, as inline HTML (CSS grids, no tables): a row per rank, a
    cell per block; colour = the rank whose input it is, grey Σj = block j summed over all ranks."""
    colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"]
    cell = "display:block;height:1.45em;line-height:1.45em;text-align:center;font-size:.75rem;border-radius:2px;"

    def grid(cells) -> str:
        spans = []
        for r, row in enumerate(cells):
            spans.append(f'<span style="{cell}color:#888;padding-right:.3em">r{r}</span>')
            if row is None:
                spans.append(f'<span style="{cell}color:#888;grid-column:span {n}">—</span>')
                continue
            for ranks, blk in row:
                if len(ranks) > 1:
                    spans.append(f'<span style="{cell}background:#d0d0d0;color:#000">Σ{blk}</span>')
                else:
                    spans.append(f'<span style="{cell}background:{colors[ranks[0] % len(colors)]};color:#fff">{blk}</span>')
            spans += [f'<span style="{cell}"></span>'] * (n - len(row))
        return (f'<span style="display:inline-grid;grid-template-columns:auto repeat({n},1.8em);gap:2px;'
                f'vertical-align:middle">' + "".join(spans) + "</span>")

    panels = []
    for name in COLLECTIVES:
        ins, outs = figure_cells(name, n)
        title = f"<b>{name}</b>" + (" (root 0)" if name in ROOTED else "")
        panels.append(f'<div style="margin:.4em 0"><div>{title}</div>{grid(ins)}'
                      f'<span style="margin:0 .7em;font-size:1.3em;vertical-align:middle">→</span>{grid(outs)}</div>')
    return ('<div class="collective-taxonomy" style="display:grid;grid-template-columns:repeat(auto-fit,minmax(19em,1fr));'
            'gap:.4em 1.5em">' + "".join(panels) + "</div>")
