"""build/build-time.txt: the test suite's build and the benchmark each replace only their own part."""
from __future__ import annotations

from tests.conftest import BENCH_MARK, write_build_time


def test_suite_and_benchmark_keep_each_others_lines(tmp_path):
    f = tmp_path / "build" / "build-time.txt"
    write_build_time(f, "bench", f"{BENCH_MARK}, run 1\ncold strict build: 40 s\n")
    write_build_time(f, "suite", "wall 30.00 s\ncpu 50.00 s\n")
    assert f.read_text() == f"wall 30.00 s\ncpu 50.00 s\n{BENCH_MARK}, run 1\ncold strict build: 40 s\n"
    write_build_time(f, "suite", "wall 31.00 s\n")  # the suite builds again: the benchmark's lines stay
    assert f.read_text() == f"wall 31.00 s\n{BENCH_MARK}, run 1\ncold strict build: 40 s\n"
    write_build_time(f, "bench", f"{BENCH_MARK}, run 2\n")  # the benchmark again: the suite's lines stay
    assert f.read_text() == f"wall 31.00 s\n{BENCH_MARK}, run 2\n"
