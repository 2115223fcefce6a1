"benchmarks/bench_morph.py: without MORPH's code it says so and times the package's models alone."


def test_bench_morph_without_morphs_code(load_benchmark, capsys, tmp_path):
    bm = load_benchmark('bench_morph')
    assert bm.load_morph_code(None) == (None, 'no --morph-code given')
    cls, why = bm.load_morph_code(tmp_path)
    assert cls is None and 'no src/utils/vit_conv_xatt_axialatt2.py' in why
    bm.main(['--morph-code', str(tmp_path), '--reps', '1', '--warmup', '0', '--batch', '1'])
    out = capsys.readouterr().out
    assert "MORPH's own code: NOT timed" in out and 'MORPH (its code)' not in out
    rows = [l.split()[0] for l in out.splitlines() if l and not l.startswith(('#', 'model'))]
    assert rows == ['MORPH', 'morph', 'fan', 'fno']
