"The report on a hand-built results Dataset whose statistics are computed by hand, and the ranking comparison."
import json, math
import numpy as np, pytest, xarray as xr
from simreal_nb import report as R
from simreal_nb.metrics import PAPER, LAMS, synthetic_score
from simreal_nb.report import report_text, write_report, md_table, protocol_ranking, ranking_agreement

# Per setting, (held-out sim error, held-out exp error) of each protocol, the same on every field and metric.
# bM(0.5): A: joint 0.2 < sim_to_exp 0.35 < sim_only 0.5 < exp_only 0.55  -> reduction (0.35-0.2)/0.35  = 42.857 %
#          B: joint 0.25 < exp_only 0.3 < sim_to_exp 0.35 < sim_only 0.85 -> reduction (0.3-0.25)/0.3   = 16.667 %
# Sim->Exp forgets in A (0.6 > 0.0 on sim) but not in B (0.6 < 0.7). Pressure, Joint vs Sim->Exp on sim:
# A (0.6-0.25)/0.6 = 58.33 %, B (0.6-0.3)/0.6 = 50 %.
# Joint strictly best per λ: A for λ in 0.2..0.7 (λ = 0.1: sim_to_exp 0.15 < 0.16; λ >= 0.8: sim_only), B for λ >= 0.4
# (λ = 0.3: exp_only 0.22 < 0.23); 3 metrics per setting.
ERRS = {'A': {'sim_only': (0.0, 1.0), 'exp_only': (1.0, 0.1), 'sim_to_exp': (0.6, 0.1), 'joint': (0.25, 0.15)},
        'B': {'sim_only': (0.7, 1.0), 'exp_only': (0.5, 0.1), 'sim_to_exp': (0.6, 0.1), 'joint': (0.3, 0.2)}}
WINS = {0.1: 0, 0.2: 3, 0.3: 3, 0.4: 6, 0.5: 6, 0.6: 6, 0.7: 6, 0.8: 3, 0.9: 3}


def make_results():
    "A results Dataset as `experiment.collect_results` writes it: 2 systems x 1 capacity x 4 protocols x 1 seed."
    score = xr.concat([synthetic_score(systems=(s,), seeds=(0,), errors=e) for s, e in ERRS.items()], 'system')
    score.loc[dict(domain='exp', field='p')] = np.nan           # the experiment measures no pressure
    score.loc[dict(protocol='exp_only', domain='sim', field='p')] = np.nan  # a cell not scored: rendered as '–'
    dims = ('system', 'capacity', 'protocol', 'seed')
    scalar = lambda v: xr.full_like(score.isel(domain=0, field=0, metric=0, drop=True), v).rename(None)
    truth = scalar(0.5); truth.loc[dict(system='B', protocol='sim_only')] = np.nan
    rng = np.random.default_rng(0)
    ex = rng.normal(size=(2, 1, 4, 1, 2, 4, 2, 6, 8)).astype(np.float32)
    ex[:, :, :, :, 1, 2] = np.nan  # exp: no pressure
    ex[:, :, :, :, :, 3] = np.nan  # 'all' is not a field
    example = xr.DataArray(ex, dims=dims + ('domain', 'field', 'kind', 'ey', 'ex'),
                           coords=dict(domain=['sim', 'exp'], field=['u', 'v', 'p', 'all'], kind=['true', 'pred'],
                                       ey=np.arange(6), ex=np.arange(8)))
    res = xr.Dataset(dict(score=score, example=example, truth_p_rmse=truth, grad_cos_mean=scalar(0.25),
                          grad_conflict_frac=scalar(0.125)))
    res.attrs.update(package='simreal_nb', version='9.9.9',
                     config=json.dumps(dict(size='test', steps=8, batch=4, horizon=4)))
    return res


@pytest.fixture(scope='module')
def res(): return make_results()


@pytest.fixture(scope='module')
def text(res): return report_text(res, {'_run_s': 12.4})


def test_header(text):
    assert text.startswith('# Sim+Real on the twin systems\n')
    assert ('simreal_nb 9.9.9; systems: A, B; capacities: S; protocols: sim_only, exp_only, sim_to_exp, joint; seeds: 1; '
            'size preset: test, 8 updates, batch 4, rollout horizon 4 frames. Wall time of the grid: 12 s.') in text


def test_findings_hand_computed(text):
    assert '- Joint has the lowest bRMSE / bRelL2 / bfRMSE at λ = 0.5 in 2/2/2 of 2 settings (agrees with the paper).' in text
    assert ("- Joint's bRMSE reduction vs the best non-joint protocol: 16.7 to 42.9 % (mean 29.8 %); "
            "paper: 39.0 to 58.4 % (mean 49.1 %).") in text
    assert ('- Sim→Exp forgets (higher held-out sim RMSE than Sim-only) in 1 of 2 settings '
            '(paper: all 8 — the twin data disagree).') in text
    assert '- Joint vs Sim→Exp, sim pressure RMSE: 50.0 to 58.3 % reduction; paper: 52.4 to 86.6 %.' in text


def test_winner_and_reduction_table(text):
    # rows (system, capacity, metric): best non-joint bM, its name, Joint's bM, reduction %
    for m in ('rmse', 'rel_l2', 'frmse'):
        assert f'| A | S | {m} | 0.35 | sim_to_exp | 0.2 | 42.86 |' in text
        assert f'| B | S | {m} | 0.3 | exp_only | 0.25 | 16.67 |' in text


def test_tables_and_nan_cells(text):
    assert '| A | S | sim_only | 0 | 1 | 0.5 |' in text and '| B | S | exp_only | 0.5 | 0.1 | 0.3 |' in text  # sim, exp, b@0.5
    assert '| A | S | 0 | 0.6 | True |' in text and '| B | S | 0.7 | 0.6 | False |' in text  # forgetting
    # pressure: exp_only was not scored on sim pressure -> '–'
    assert '| system | capacity | sim_only | exp_only | sim_to_exp | joint | joint vs sim_to_exp % |' in text
    assert '| A | S | 0 | – | 0.6 | 0.25 | 58.33 |' in text and '| B | S | 0.7 | – | 0.6 | 0.3 | 50 |' in text
    assert '| B | S | – | 0.5 | 0.5 | 0.5 |' in text  # hidden true pressure, sim_only of B missing
    assert '| A | S | joint | 0.25 | 0.125 |' in text  # gradient conflict, Joint only
    assert 'nan' not in text.lower()  # a missing value is '–', never 'nan'


def test_paper_column_is_metrics_paper(text, res, monkeypatch):
    for lam, w in WINS.items():
        assert f"| {lam:g} | {w} | 6 | {PAPER['win_counts'][lam]} |" in text
    p = PAPER['brmse_reduction_pct']
    assert f"| brmse_reduction_pct[mean] | {p['mean']:g} | 29.76 |" in text
    assert f"| sim_to_exp_forgets | {PAPER['sim_to_exp_forgets']} | 1 |" in text
    # every paper number in the report comes from `PAPER`: change it there and the report follows
    monkeypatch.setitem(PAPER, 'brmse_reduction_pct', dict(min=1.0, max=2.0, mean=1.5))
    monkeypatch.setitem(PAPER, 'pressure_reduction_pct', dict(min=3.0, max=4.0))
    monkeypatch.setitem(PAPER, 'sim_to_exp_forgets', 1)
    monkeypatch.setitem(PAPER, 'n_settings', 2)
    monkeypatch.setitem(PAPER, 'joint_best_at_0_5', {'rmse': 2, 'rel_l2': 2, 'frmse': 1})
    monkeypatch.setitem(PAPER, 'win_counts', {**PAPER['win_counts'], 0.9: 7})
    t2 = report_text(res)
    assert "paper: 1.0 to 2.0 % (mean 1.5 %)." in t2 and 'paper: 3.0 to 4.0 %.' in t2
    assert 'in 1 of 2 settings (agrees with the paper).' in t2
    assert '2/2/2 of 2 settings (paper: 2/2/1 of 2 — the twin data disagree).' in t2
    assert '| 0.9 | 3 | 6 | 7 |' in t2
    for num in ('39.0', '58.4', '49.1', '52.4', '86.6', 'all 8'): assert num not in t2, num


def test_md_table_nan():
    import pandas as pd
    df = pd.DataFrame({'a': [1.23456, np.nan, None], 'b': ['x', 'y', 'z']}, index=pd.Index([1, 2, 3], name='row'))
    assert md_table(df) == '| row | a | b |\n|---|---|---|\n| 1 | 1.235 | x |\n| 2 | – | y |\n| 3 | – | z |'


def test_write_report(tmp_path, res, monkeypatch):
    run = tmp_path / 'run'; run.mkdir()
    with pytest.raises(FileNotFoundError, match='results.nc'): write_report(run)
    res.to_netcdf(run / 'results.nc', engine='h5netcdf')
    (run / 'timing.json').write_text(json.dumps({'_run_s': 12.4}))
    path = write_report(run)
    assert path == run / 'report.md'
    text = path.read_text()
    assert text == report_text(res, {'_run_s': 12.4})
    for name in ('pareto_rmse', 'rollouts'):
        png = (run / 'figures' / f'{name}.png').read_bytes()
        assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 1000
        assert f'(figures/{name}.png)' in text
    assert sorted(p.name for p in run.rglob('*')) == ['figures', 'pareto_rmse.png', 'report.md', 'results.nc',
                                                       'rollouts.png', 'timing.json']  # no temporary file left
    # a failure while writing leaves the previous report whole and no temporary file behind
    def boom(*a, **k): raise RuntimeError('boom')
    monkeypatch.setattr(R, 'report_text', boom)
    with pytest.raises(RuntimeError, match='boom'): write_report(run)
    assert path.read_text() == text and not list(run.rglob('*.tmp'))


def test_protocol_ranking_hand_computed(res):
    r5 = protocol_ranking(res.score)
    assert r5 == {'A/S': ['joint', 'sim_to_exp', 'sim_only', 'exp_only'], 'B/S': ['joint', 'exp_only', 'sim_to_exp', 'sim_only']}
    # λ = 0.9: A: sim_only 0.1 < joint 0.24 < sim_to_exp 0.55 < exp_only 0.91; B unchanged (0.29 < 0.46 < 0.55 < 0.73)
    r9 = protocol_ranking(res.score, lam=0.9)
    assert r9 == {'A/S': ['sim_only', 'joint', 'sim_to_exp', 'exp_only'], 'B/S': r5['B/S']}
    ag = ranking_agreement(r5, r9)
    # A: pairs (joint, sim_only) and (sim_to_exp, sim_only) flip: 4 concordant, 2 discordant of 6 -> tau = 1/3
    assert ag['settings'] == 2 and ag['same_winner'] == 0.5 and ag['same_order'] == 0.5
    assert ag['kendall_tau']['A/S'] == pytest.approx(1 / 3) and ag['kendall_tau']['B/S'] == pytest.approx(1.0)
    # a protocol with no score is left out
    s = res.score.copy(); s.loc[dict(system='B', protocol='exp_only')] = np.nan
    assert protocol_ranking(s)['B/S'] == ['joint', 'sim_to_exp', 'sim_only']


def test_ranking_agreement_hand_built():
    a = {'X': ['p', 'q', 'r'], 'Y': ['p', 'q', 'r', 's'], 'Z': ['p', 'q'], 'only_a': ['p']}
    b = {'X': ['r', 's', 'q', 'p'], 'Y': ['p', 'r', 'q', 's'], 'Z': ['q', 'x'], 'only_b': ['q']}
    ag = ranking_agreement(a, b)
    assert ag['settings'] == 3                                  # X, Y, Z are common
    assert ag['same_winner'] == pytest.approx(1 / 3)            # Y only
    assert ag['same_order'] == 0.0
    assert ag['kendall_tau']['X'] == pytest.approx(-1.0)        # p, q, r fully reversed (s is not in a)
    assert ag['kendall_tau']['Y'] == pytest.approx(2 / 3)       # one of 6 pairs swapped: (5 - 1) / 6
    assert math.isnan(ag['kendall_tau']['Z'])                   # one common protocol: no pair
    assert ranking_agreement({}, b) == dict(settings=0, same_winner=0.0, same_order=0.0, kendall_tau={})
