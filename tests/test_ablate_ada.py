"The ablation benchmark's curves: every row's alignment curves written and drawn, the default holdout rule replayed on them."
import json, os
from dataclasses import fields
from simreal_nb.ada.adamog import MOG_PRESETS
from simreal_nb.ada.fit import holdout_stop

def test_rows_of_several_changes_and_their_curves(tmp_path, monkeypatch, load_benchmark):
    monkeypatch.setenv('SIMREAL_CACHE', str(tmp_path / 'cache'))
    ab = load_benchmark('ablate_ada')
    assert ab.parse_change('reference') == {} and ab.parse_change('iters=8+patience=0+stop=holdout') == dict(iters=8, patience=0, stop='holdout')
    test = {f.name: getattr(MOG_PRESETS['test'], f.name) for f in fields(MOG_PRESETS['test'])}   # the test preset's sizes
    recs = ab.ablate([0], ['reference', 'iters=8+patience=0'], str(tmp_path / 'out'), test)
    assert [r['steps'] for r in recs] == [recs[0]['steps'], 8]                                    # the second row ran to its cap
    for row in ('reference', 'iters-8_patience-0'):
        info = json.load(open(tmp_path / 'out' / 'curves' / f'{row}_s0.json'))
        checks = info['checks']['ada']
        assert checks and {'heldout', 'energy_w2', 'P1_radius'} <= set(checks[0])              # held-out score and the truth's curves
        stop, best = holdout_stop([c['heldout'] for c in checks], MOG_PRESETS['default'].patience, MOG_PRESETS['default'].tol)
        assert info['default_rule']['best_at'] == checks[best]['it']
        assert info['default_rule']['stop_at'] == (None if stop is None else checks[stop]['it'])
        assert os.path.getsize(tmp_path / 'out' / 'curves' / f'{row}_s0.png') > 0
