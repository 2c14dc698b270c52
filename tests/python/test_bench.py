"""python -m flashcore.bench runs and prints its table (tiny sizes, no torch column)."""

from flashcore import bench


def test_bench_table(capsys):
    assert bench.main(["--seq-q", "16", "--heads", "2", "--head-dim", "8", "--iters", "2",
                       "--no-overhead", "--no-torch", "--check"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | attention | f32 | B1 H2 S16 D8 |" in out


def test_bench_json_ops(capsys):
    for op in ("softmax-v", "gemm-chain"):
        assert bench.main(["--op", op, "--seq-q", "8", "--seq-k", "9", "--heads", "1",
                           "--head-dim", "4", "--iters", "2", "--no-overhead", "--no-torch",
                           "--json", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.count('"rel_err"') == 2


def test_overhead_measurement():
    o = bench.measure_overhead(iters=30)
    assert o["cpp_loop_p50_us"] > 0 and o["python_p50_us"] > 0
    assert o["overhead_us"] > 0
