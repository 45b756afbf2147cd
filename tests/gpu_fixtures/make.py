"""Synthetic GPU results files for the tests: never committed under gpu_runs/results/.

For every program with a `gpu` preset, every committed CPU results file of it becomes a GPU-shaped
copy at the same world size, whose provenance is what gpu_runs/harness.py writes on a CUDA machine
(`harness.hardware()` and `harness.provenance()` run here with torch.cuda mocked: NVIDIA H200, one
node, one GPU per rank). The measurements are the CPU file's, plus whatever the program writes only
on CUDA (tests/gpu_fixtures/augment/<program>.py): the numbers are not GPU measurements, and the
`command` field says so. A program whose results exist only on GPUs (nccl_debug_capture) has its
whole fixture made by its augment module.

The build test (tests/site/test_gpu_fixtures.py) copies these files into a scratch checkout and
builds strictly, so that every page must show them beside the CPU results.

    python -m tests.gpu_fixtures.make          # rewrite tests/gpu_fixtures/results/
    python -m tests.gpu_fixtures.make zero_bench   # only one program's
    python -m tests.gpu_fixtures.make --check  # exit 1 if the committed fixtures differ
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "results"
GPU_NAME = "NVIDIA H200"
CUDA_VERSION = "12.9"
NCCL_VERSION = (2, 27, 7)

sys.path.insert(0, str(ROOT))


@contextmanager
def mocked_cuda(gpu_name: str = GPU_NAME, count: int = 8):
    """torch.cuda as a CUDA build sees an 8-GPU node; nothing is allocated."""
    import torch

    with mock.patch.object(torch.cuda, "is_available", return_value=True), \
            mock.patch.object(torch.cuda, "device_count", return_value=count), \
            mock.patch.object(torch.cuda, "get_device_name", return_value=gpu_name), \
            mock.patch.object(torch.cuda.nccl, "version", return_value=NCCL_VERSION), \
            mock.patch.object(torch.version, "cuda", CUDA_VERSION):
        yield


def gpu_env(world_size: int, rank: int = 0, nnodes: int = 1):
    import torch

    from gpu_runs import harness

    per_node = world_size // nnodes
    return harness.Env(rank=rank, world_size=world_size, local_rank=rank % per_node,
                       device=torch.device("cuda", rank % per_node), backend="nccl")


def hardware_on_cuda(world_size: int, nnodes: int = 1, gpu_name: str = GPU_NAME) -> dict:
    """What harness.hardware() writes on a CUDA node (torchrun sets GROUP_WORLD_SIZE to the node count)."""
    from gpu_runs import harness

    env = {"GROUP_WORLD_SIZE": str(nnodes), "WORLD_SIZE": str(world_size),
           "LOCAL_WORLD_SIZE": str(world_size // nnodes)}
    with mocked_cuda(gpu_name), mock.patch.dict("os.environ", env):
        return harness.hardware(gpu_env(world_size, nnodes=nnodes))


def versions_on_cuda() -> dict:
    from gpu_runs import harness

    script = ROOT / "gpu_runs" / "harness.py"
    with mocked_cuda():
        return harness.provenance(gpu_env(1), script)["versions"]


def gpu_programs() -> list[str]:
    """Programs that produce GPU results: every program of the GPU refresh plan (runs.GPU_RUNS) and
    every program with a `gpu` preset, except host-memory programs that hide the GPUs
    (CUDA_VISIBLE_DEVICES="": their results on a GPU box are CPU results)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import runs

    names = {r.program for r in runs.GPU_RUNS} | {
        p.stem for p in (ROOT / "gpu_runs").glob("*.py")
        if p.stem not in ("harness", "comm_counter", "__init__") and "gpu" in runs.program_facts(p.stem)["presets"]}
    hides = {n for n in names if (ROOT / "gpu_runs" / f"{n}.py").exists() and
             'os.environ["CUDA_VISIBLE_DEVICES"] = ""' in (ROOT / "gpu_runs" / f"{n}.py").read_text()}
    return sorted(n for n in names - hides if (ROOT / "gpu_runs" / f"{n}.py").exists())


def _augment(program: str):
    try:
        return importlib.import_module(f"tests.gpu_fixtures.augment.{program}").augment
    except ModuleNotFoundError as exc:
        if exc.name != f"tests.gpu_fixtures.augment.{program}":
            raise
        return None


def fixture_from_cpu(cpu: dict, cpu_rel: str) -> dict:
    """A GPU-shaped copy of one CPU results file (same world size and measurements)."""
    d = copy.deepcopy(cpu)
    n = cpu["hardware"]["world_size"]
    d["hardware"] = hardware_on_cuda(n)
    d["versions"] = {**d["versions"], **{k: v for k, v in versions_on_cuda().items() if k in ("cuda", "nccl")},
                     "torch": d["versions"]["torch"].split("+")[0] + "+cu" + CUDA_VERSION.replace(".", "")}
    d["command"] = (f"synthetic test fixture (tests/gpu_fixtures/make.py) from {cpu_rel}: "
                    f"not a GPU measurement; a real run is torchrun --nproc_per_node={n} "
                    f"{cpu['script']['path']} --preset gpu")
    aug = _augment(cpu["program"])
    if aug:
        aug(d)
    return d


def make(only=()) -> dict[Path, dict]:
    from snippets import results

    out: dict[Path, dict] = {}
    for program in gpu_programs():
        if only and program not in only:
            continue
        cpu_files = [p for p in sorted((results.RESULTS / program).glob("*.json"))
                     if json.loads(p.read_text())["hardware"]["kind"] == "cpu"]
        for p in cpu_files:
            d = fixture_from_cpu(json.loads(p.read_text()), p.relative_to(ROOT).as_posix())
            results.validate(d, f"{program}/{d['hardware']['id']}.json")
            out[OUT / program / f"{d['hardware']['id']}.json"] = d
        if not cpu_files:
            aug = _augment(program)
            if aug is None:
                print(f"warning: {program}: no CPU result and no tests/gpu_fixtures/augment/{program}.py: "
                      "no fixture", file=sys.stderr)
                continue
            d = {"program": program}
            aug(d)
            results.validate(d, f"{program}/{d['hardware']['id']}.json")
            out[OUT / program / f"{d['hardware']['id']}.json"] = d
    return out


def _text(d: dict) -> str:
    return json.dumps(d, indent=1, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="*", help="only these programs' fixtures (default: all)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    made = make(a.programs)
    mine = lambda p: not a.programs or p.parent.name in a.programs  # noqa: E731
    if a.check:
        old = {p: p.read_text() for p in OUT.glob("*/*.json") if mine(p)}
        new = {p: _text(d) for p, d in made.items()}
        bad = sorted(set(old) ^ set(new) | {p for p in old.keys() & new.keys() if old[p] != new[p]})
        for p in bad:
            print(f"differs: {p.relative_to(ROOT)}")
        return 1 if bad else 0
    for p in OUT.glob("*/*.json"):
        if mine(p):
            p.unlink()
    for d in OUT.glob("*/"):
        if not any(d.iterdir()):
            d.rmdir()
    for p, d in made.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(_text(d), encoding="utf-8")
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
