"""Results files: schema, provenance, staleness, and the harness's refusal of bad arguments."""
import copy
from pathlib import Path
import json

import pytest

from snippets import results
from tests.conftest import launch


def test_every_committed_result_is_valid_and_current():
    paths = results.all_paths()
    assert paths, "no results committed"
    for p in paths:
        r = results.read(p)
        assert not r.stale, f"{p}: {', '.join(r.stale_reasons())}; rerun it (`make runs`)"
        assert r.data["git"]["commit"] != "unknown"
        assert not r.data["git"]["dirty"], f"{p}: run from a tree whose inputs differ from HEAD; rerun from a clean tree"
        if r.hardware["kind"] == "cpu":
            assert r.hardware["gpu_count"] == 0 and r.hardware["backend"] == "gloo"


def test_committed_results_record_the_shared_modules_they_ran():
    """Independent of the harness: read each program's source for the repository modules it imports."""
    import re

    for p in results.all_paths():
        r = results.read(p)
        src = (results.ROOT / r.data["script"]["path"]).read_text(encoding="utf-8")
        for mod in set(re.findall(r"^\s*from (gpu_runs|snippets)((?:\.\w+)*) import (\w+)", src, re.M)):
            pkg, sub, name = mod
            dotted = (pkg + sub).replace(".", "/")
            candidates = [f"{dotted}/{name}.py", f"{dotted}.py", f"{dotted}/__init__.py"]
            assert any(c in r.inputs for c in candidates), f"{p}: imports {pkg}{sub}.{name}, inputs lack it"
        assert "gpu_runs/harness.py" in r.inputs, p
        if re.search(r"^\s*import deepspeed", src, re.M):
            assert r.data["versions"]["deepspeed"], f"{p}: a DeepSpeed program without versions.deepspeed"


def _one():
    return json.loads(results.all_paths()[0].read_text())


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("command"), "(top level)"),
    (lambda d: d["hardware"].update(world_size=0), "hardware/world_size"),
    (lambda d: d["script"].update(sha256="xyz"), "script/sha256"),
    (lambda d: d["hardware"].update(kind="gpu"), "hardware/backend"),
    (lambda d: d.update(schema_version=3), "schema_version"),
    (lambda d: d["versions"].pop("deepspeed"), "versions"),
    (lambda d: d.update(inputs={"gpu_runs/harness.py": "xyz"}), "inputs/gpu_runs/harness.py"),
])
def test_malformed_file_names_the_field(mutate, field, tmp_path):
    d = copy.deepcopy(_one())
    mutate(d)
    p = tmp_path / d["program"] / f"{d['hardware']['id']}.json"
    p.parent.mkdir()
    p.write_text(json.dumps(d))
    with pytest.raises(results.ResultsError) as e:
        results.read(p)
    assert str(p) in str(e.value) and field in str(e.value)


def test_stale_result_is_detected(tmp_path, monkeypatch):
    d = copy.deepcopy(_one())
    d["script"]["sha256"] = "0" * 64
    d.setdefault("inputs", {})[d["script"]["path"]] = "0" * 64
    p = results.RESULTS / d["program"] / "cpu-test-stale.json"
    d["hardware"]["id"] = "cpu-test-stale"
    try:
        p.write_text(json.dumps(d))
        assert results.read(p).stale
        box = results.provenance_box(results.read(p))
        assert "STALE" in box
    finally:
        p.unlink()


@pytest.mark.dist
def test_harness_refuses_bad_arguments():
    proc, _ = launch("gpu_runs/collectives_bench.py", 2, ["--ops", "all_reduce,nonsense", "--no-save"], check=False)
    assert proc.returncode != 0
    assert "unknown op(s) ['nonsense']" in proc.stderr


def test_harness_refuses_plain_python():
    import subprocess, sys
    proc = subprocess.run([sys.executable, "gpu_runs/collectives_bench.py", "--preset", "tiny"],
                          cwd=results.ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "launch with torchrun" in proc.stderr


# ------------------------------------------------------------------ provenance of every input

def _env():
    import torch
    from gpu_runs import harness

    return harness.Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")


def _fresh_result(program="zero_bench"):
    """A results dict made by the harness in this process (which has imported comm_counter)."""
    from gpu_runs import comm_counter, harness  # noqa: F401  (imported: an input of the result)
    from snippets.common import alphabeta  # noqa: F401

    script = results.ROOT / "gpu_runs" / f"{program}.py"
    return {"program": program, **harness.provenance(_env(), script), "params": {}, "measurements": []}


def test_provenance_hashes_every_imported_repository_module():
    from importlib import metadata

    d = _fresh_result()
    results.validate(d)
    assert d["schema_version"] == 2
    for rel in ("gpu_runs/zero_bench.py", "gpu_runs/harness.py", "gpu_runs/comm_counter.py",
                "snippets/common/alphabeta.py", "snippets/results.py"):
        assert rel in d["inputs"], rel
    for rel, sha in d["inputs"].items():  # the recorded hash is the file's, and only repository files
        assert not rel.startswith((".venv", "node_modules")) and "site-packages" not in rel, rel
        assert sha == results.sha256_of(results.ROOT / rel), rel
    # every library version the pages print; DeepSpeed's is the installed one
    assert d["versions"]["deepspeed"] == metadata.version("deepspeed")
    assert d["versions"]["torch"] == __import__("torch").__version__


def test_editing_a_shared_module_makes_the_result_stale(tmp_path):
    """Edit gpu_runs/comm_counter.py (or harness.py) in a temporary copy: the result goes stale there,
    names the module, and stays current here."""
    import shutil

    d = _fresh_result()
    copy_root = tmp_path / "repo"
    for top in sorted({rel.split("/")[0] for rel in d["inputs"]}):  # gpu_runs, snippets (tests: this process)
        shutil.copytree(results.ROOT / top, copy_root / top, ignore=shutil.ignore_patterns("results", "__pycache__"))
    p = copy_root / "gpu_runs" / "results" / d["program"] / f"{d['hardware']['id']}.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(d))
    r = results.read(p)
    assert r.stale_reasons(copy_root) == [] and r.stale_reasons() == []
    for module in ("gpu_runs/comm_counter.py", "gpu_runs/harness.py", "snippets/common/alphabeta.py"):
        f = copy_root / module
        original = f.read_bytes()
        f.write_bytes(original + b"\n# an edit\n")
        assert r.stale_reasons(copy_root) == [f"{module} changed"], module
        f.unlink()
        assert r.stale_reasons(copy_root) == [f"{module} missing"], module
        f.write_bytes(original)
    assert r.stale_reasons(copy_root) == []
    (copy_root / "gpu_runs" / "fsdp_bench.py").write_text("# not an input of zero_bench\n")
    assert r.stale_reasons(copy_root) == []


def test_schema_1_results_are_read_but_stale(tmp_path):
    d = _fresh_result()
    d["schema_version"] = 1
    del d["inputs"]
    p = tmp_path / d["program"] / f"{d['hardware']['id']}.json"
    p.parent.mkdir()
    p.write_text(json.dumps(d))
    r = results.read(p)
    assert r.stale and r.stale_reasons() == ["schema 1: no input hashes"]
    assert "STALE" in results.provenance_box(r)


def test_results_are_written_atomically(tmp_path, monkeypatch):
    """A write that fails halfway (disk full) leaves the previous file intact and nothing partial."""
    import builtins
    import io

    from gpu_runs import harness

    env = _env()
    target = tmp_path / f"{harness.hardware(env)['id']}.json"
    target.write_text("previous results\n")
    real_open = io.open

    class HalfWriter:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, s):
            if self.n + len(s) > 200:
                self.f.write(s[: 200 - self.n])
                self.f.flush()
                raise OSError(28, "No space left on device (test)")
            self.n += len(s)
            return self.f.write(s)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def failing_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        return HalfWriter(f) if any(c in mode for c in "wax+") else f

    monkeypatch.setattr(io, "open", failing_open)
    monkeypatch.setattr(builtins, "open", failing_open)
    with pytest.raises(OSError, match="No space left"):
        harness.write_results(env, "zero_bench", results.ROOT / "gpu_runs" / "zero_bench.py",
                              {"n": 1}, [{"x": 1}] * 100, out=tmp_path)
    monkeypatch.undo()
    assert target.read_text() == "previous results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name], "a partial file was left behind"
    # and without the fault the same call replaces the file with a complete, valid one
    harness.write_results(env, "zero_bench", results.ROOT / "gpu_runs" / "zero_bench.py",
                          {"n": 1}, [{"x": 1}] * 100, out=tmp_path)
    results.validate(json.loads(target.read_text()))
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


# ------------------------------------------------------------------ every hardware on the page

FIXTURES = results.ROOT / "tests" / "gpu_fixtures" / "results"


def _copy_result(tmp_path, src, **hardware):
    """A copy of a results file with some hardware fields changed, readable by results.read."""
    d = json.loads(Path(src).read_text())
    d["hardware"].update(hardware)
    p = tmp_path / d["program"] / f"{d['hardware']['id']}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(d))
    return results.read(p)


def test_platforms_group_cpu_runs_and_each_gpu_kind_apart(tmp_path):
    cpu = [results.read(p) for p in sorted((results.RESULTS / "collectives_bench").glob("cpu-*.json"))]
    gpu = [results.read(p) for p in sorted((FIXTURES / "collectives_bench").glob("gpu-*.json"))]
    h100 = _copy_result(tmp_path, gpu[0].path, gpu_name="NVIDIA H100 80GB HBM3", id="gpu-nccl-1x2-nvidia-h100-80gb-hbm3")
    two_nodes = _copy_result(tmp_path, gpu[-1].path, nnodes=2, id="gpu-nccl-2x2-nvidia-h200")
    plats = results.platforms([two_nodes, h100, *gpu, *cpu])
    worlds = lambda p: [r.hardware["world_size"] for r in p.runs]  # noqa: E731
    assert [p.kind for p in plats] == ["cpu", "gpu", "gpu", "gpu"]
    assert worlds(plats[0]) == sorted(r.hardware["world_size"] for r in cpu)
    labels = [p.label.rstrip(" ⚠") for p in plats]
    assert labels[0] == "CPU — gloo, " + "·".join(str(w) for w in worlds(plats[0])) + " processes"
    assert labels[1] == "GPU — 2× NVIDIA H100 80GB HBM3, NCCL"
    assert labels[2] == "GPU — " + "·".join(str(w) for w in worlds(plats[2])) + "× NVIDIA H200, NCCL"
    assert labels[3] == "GPU — 2 nodes × 2× NVIDIA H200, NCCL"   # world 4 = 2 nodes × 2 GPUs
    assert plats[3].by_world == {4: two_nodes}


def test_hardware_tabs_render_each_platform_with_its_own_files(tmp_path):
    cpu = [results.read(p) for p in sorted((results.RESULTS / "collectives_bench").glob("cpu-*.json"))]
    gpu = [results.read(p) for p in sorted((FIXTURES / "collectives_bench").glob("gpu-*.json"))]
    seen = []

    def render(plat):
        seen.append(plat)
        return results.markdown_table(["N", "hardware"], [[n, r.hardware["kind"]] for n, r in plat.by_world.items()]) \
            + "\n\n$\\alpha$ per " + ("GPU" if plat.is_gpu else "process")

    out = results.hardware_tabs([*gpu, *cpu], render)
    assert [p.kind for p in seen] == ["cpu", "gpu"]
    import re as _re
    labels = _re.findall(r'<label for="(hw\w+)_(\d)">([^<]+)</label>', out)
    assert [lab for _, _, lab in labels] == [p.label for p in seen]
    ids = _re.findall(r'<input (?:checked )?id="(hw\w+_\d)" name="(hw\w+)" type="radio">', out)
    assert len(ids) == 2 and ids[0][1] == ids[1][1] and out.count("checked ") == 1
    blocks = out.split('<div class="tabbed-block">')[1:]
    assert len(blocks) == 2
    for block, plat in zip(blocks, seen):
        assert "<table>" in block and '<span class="arithmatex">\\(\\alpha\\)</span>' in block
        shown = _re.findall(r"<th>파일</th><td><code>([^<]+)</code>", block)
        assert shown == [results._rel(r.path).as_posix() for r in plat.runs]   # its own files, no other's


def test_stale_gpu_result_goes_to_a_logger_strict_mode_does_not_count(tmp_path, caplog):
    """mkdocs --strict counts warnings of the 'mkdocs' logger tree; a stale GPU result must not be one,
    a stale CPU result must."""
    import logging

    gpu = _copy_result(tmp_path, sorted((FIXTURES / "zero_bench").glob("gpu-*.json"))[0])
    d = gpu.data
    d["inputs"]["gpu_runs/harness.py"] = "0" * 64
    cpu_d = json.loads(sorted((results.RESULTS / "zero_bench").glob("cpu-*.json"))[0].read_text())
    cpu_d["inputs"]["gpu_runs/harness.py"] = "0" * 64
    cpu = results.Result(tmp_path / "cpu.json", cpu_d)
    lg = results._gpu_log()  # created (with its own handler, not propagating) before we let caplog see it
    lg.propagate, lg.disabled = True, False  # let caplog see it (an in-process mkdocs run may disable loggers)
    logging.getLogger("mkdocs.plugins.book.results").disabled = False
    try:
        with caplog.at_level(logging.INFO):
            gbox = results.provenance_box(gpu)
            cbox = results.provenance_box(cpu)
    finally:
        logging.getLogger("book.results").propagate = False
    by_logger = {(r.name, r.levelname) for r in caplog.records}
    assert ("book.results", "INFO") in by_logger
    assert ("mkdocs.plugins.book.results", "WARNING") in by_logger or __import__("os").environ.get("BOOK_ALLOW_STALE")
    assert not any(r.name.startswith("mkdocs") and "GPU" in r.getMessage() for r in caplog.records)
    assert 'class="stale-badge"' in gbox and d["git"]["commit"][:12] in gbox and "gpu_runs/harness.py changed" in gbox
    assert "STALE" in cbox and "stale-badge" not in cbox
    assert gpu.stale and not gpu.strict_stale and cpu.strict_stale


def test_every_gpu_program_has_fixtures_whose_measurements_match_the_cpu_shape():
    """The synthetic GPU fixtures mirror every CPU file of every GPU-plan program; their measurements keep
    the CPU files' structure (keys), so a page that renders the CPU file can render the fixture. When a
    program's output changes, regenerate: python -m tests.gpu_fixtures.make <program>."""
    from tests.gpu_fixtures import make

    def keys(x, depth=0):
        if isinstance(x, dict):
            return {k: keys(v, depth + 1) for k, v in x.items()} if depth < 3 else set(x)
        if isinstance(x, list) and x:
            return [keys(x[0], depth + 1)]
        return type(x).__name__ if x is not None else None

    for program in make.gpu_programs():
        cpu = sorted((results.RESULTS / program).glob("cpu-*.json"))
        fx = sorted((FIXTURES / program).glob("gpu-*.json"))
        assert fx, f"no GPU fixture for {program}: python -m tests.gpu_fixtures.make {program}"
        for c in cpu:
            cd = json.loads(c.read_text())
            n = cd["hardware"]["world_size"]
            match = [f for f in fx if json.loads(f.read_text())["hardware"]["world_size"] == n]
            assert match, f"{program}: no GPU fixture of world size {n} (mirror of {c.name})"
            gd = json.loads(match[0].read_text())
            assert gd["hardware"]["kind"] == "gpu" and gd["hardware"]["backend"] == "nccl"
            assert "synthetic" in gd["command"]
            ck, gk = keys(cd["measurements"]), keys(gd["measurements"])
            if isinstance(ck, dict):
                missing = set(ck) - set(gk)
                assert not missing, f"{match[0].name}: measurements lack {missing}; regenerate the fixtures"
