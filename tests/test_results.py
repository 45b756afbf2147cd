"""Results files: schema, provenance, staleness, and the harness's refusal of bad arguments."""
import copy
import json

import pytest

from snippets import results
from tests.conftest import launch


def test_every_committed_result_is_valid_and_current():
    paths = results.all_paths()
    assert paths, "no results committed"
    for p in paths:
        r = results.read(p)
        assert not r.stale, f"{p}: script changed since the run; rerun `make runs`"
        assert r.data["git"]["commit"] != "unknown"
        if r.hardware["kind"] == "cpu":
            assert r.hardware["gpu_count"] == 0 and r.hardware["backend"] == "gloo"


def _one():
    return json.loads(results.all_paths()[0].read_text())


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("command"), "(top level)"),
    (lambda d: d["hardware"].update(world_size=0), "hardware/world_size"),
    (lambda d: d["script"].update(sha256="xyz"), "script/sha256"),
    (lambda d: d["hardware"].update(kind="gpu"), "hardware/backend"),
    (lambda d: d.update(schema_version=2), "schema_version"),
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
