"The report on a hand-built results Dataset whose statistics are computed by hand, and the ranking comparison."
import json, math
import numpy as np, pytest, xarray as xr
from simreal_nb.reading import report as R, report_tables as RT, report_verdicts as RV
from simreal_nb.reading.analysis import PAPER, LAMS, synthetic_score, synthetic_results
from simreal_nb.training.protocols import protocol_coords
from simreal_nb.reading.report import report_text, write_report
from simreal_nb.reading.report_tables import md_table, protocol_ranking, ranking_agreement

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
    "A results Dataset as `rundir.collect_results` writes it: 2 systems x 1 capacity x 4 protocols x 1 seed."
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
    res = xr.Dataset(dict(score=score, example=example, truth_score=truth.expand_dims(hidden_field=['p'], metric=['rmse', 'rel_l2', 'frmse']).copy(), grad_cos_mean=scalar(0.25),
                          grad_conflict_frac=scalar(0.125)))
    res.attrs.update(package='simreal_nb', version='9.9.9',
                     config=json.dumps(dict(size='test', steps=8, batch_size=4, horizon=4)))
    return res


@pytest.fixture(scope='module')
def res(): return make_results()


@pytest.fixture(scope='module')
def text(res): return report_text(res, {'_run_s': 12.4})


def test_header(text):
    assert ('Scores are in physical units (this run records no reference scales). '
            'Training budget: not recorded in this run.') in text  # an older results file without the attrs
    assert text.startswith('# Sim+Real on the twin systems\n')
    assert ('simreal_nb 9.9.9; systems: A, B; capacities: S; protocols: sim_only, exp_only, sim_to_exp, joint; seeds: 1; '
            'size preset: test, 8 updates, batch 4, rollout horizon 4 frames. Wall time of the grid: 12 s.') in text


def test_findings_hand_computed(text):
    assert '- Joint has the lowest bRMSE / bRelL2 / bfRMSE at λ = 0.5 in 2/2/2 of 2 settings by seed mean (agrees with the paper).' in text
    assert '- Clear: not counted (one seed).' in text
    assert ("- Joint's bRMSE reduction vs the best non-joint protocol (paired by seed; the paper's statistic, whose best "
            "non-joint protocol may be Sim-only, a model that never saw an experiment): 16.7 to 42.9 % (mean 29.8 %); "
            "paper: 39.0 to 58.4 % (mean 49.1 %).") in text
    assert ('- Sim→Exp forgets (higher held-out sim RMSE than Sim-only) in 1 of 2 settings '
            '(paper: all 8 — the twin data disagree).') in text
    assert '- Joint vs Sim→Exp, sim pressure RMSE: 50.0 to 58.3 % reduction; paper: 52.4 to 86.6 %.' in text


def test_winner_and_reduction_table(text):
    # rows (system, capacity, metric): best non-joint bM, its name, Joint's bM, the two-model pair's, reduction %
    # the pair: A sim_only on sim (0.0) + the first of exp_only / sim_to_exp on exp (0.1) -> 0.05; B exp_only on both -> 0.3
    for m in ('rmse', 'rel_l2', 'frmse'):
        assert f'| A | S | {m} | 0.35 | sim_to_exp | 0.2 | 0.05 | 42.86 |' in text
        assert f'| B | S | {m} | 0.3 | exp_only | 0.25 | 0.3 | 16.67 |' in text


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
    assert '2/2/2 of 2 settings by seed mean (paper: 2/2/1 of 2 — the twin data disagree).' in t2
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
    for name in ('pareto_rmse', 'rollouts_A', 'rollouts_B'):
        png = (run / 'figures' / f'{name}.png').read_bytes()
        assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 1000
        assert f'(figures/{name}.png)' in text
    assert sorted(p.name for p in run.rglob('*')) == ['figures', 'pareto_rmse.png', 'report.md', 'results.nc',
                                                       'rollouts_A.png', 'rollouts_B.png', 'scores.nc', 'timing.json']  # no temporary file left
    with xr.open_dataset(run / 'scores.nc', engine='h5netcdf') as sc:  # the compact copy: every per-cell number, no curves or frames
        xr.testing.assert_identical(sc['score'].load(), res['score']) and None
        assert 'example' not in sc and 'curve_val' not in sc
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


# --- seeds, reference baselines, flags and the optional figures -------------------------------------------------------
# synthetic_results' errors (sim, exp): sim_only (0.05, 1.0), exp_only (1.0, 0.05), sim_to_exp (0.6, 0.1), joint (0.25,
# 0.15), persistence (0.7, 0.6); here mean_field is better than everything (0.01, 0.01) and must still never win.
# Joint of A has sim errors 0.2, 0.3, 0.8 in the three seeds: bM(0.5) 0.175, 0.225, 0.475 vs Sim->Exp's 0.425 (its
# sim error is 0.75 in A) -> a win by seed mean (0.2917) but not in every seed. Failing cells, by hand: Sim-only of A on sim (0.7, equal to persistence:
# does not beat it), Joint of B on exp (0.65 > 0.6); not flagged: Exp-only of B on sim (2.0, it does not train on
# sim) and Sim->Exp of A on sim (0.75 > 0.7, it ends up trained on exp). Capped: Joint of A seed 1, Sim->Exp of B seed 0.
SEEDED = {'sim_only': (0.05, 1.0), 'exp_only': (1.0, 0.05), 'sim_to_exp': (0.6, 0.1),
          'joint': [(0.25, 0.15)] * 3, 'persistence': (0.7, 0.6), 'mean_field': (0.01, 0.01)}


def seeded_results(dims=None, curves=True):
    res = synthetic_results(errors=SEEDED, dims=dims)
    sc = res.score
    for sim, seed in zip((0.2, 0.3, 0.8), (0, 1, 2)): sc.loc[dict(system='A', protocol='joint', seed=seed, domain='sim')] = sim
    sc.loc[dict(system='A', protocol='sim_only', domain='sim')] = 0.7
    sc.loc[dict(system='B', protocol='joint', domain='exp')] = 0.65
    sc.loc[dict(system='B', protocol='exp_only', domain='sim')] = 2.0
    sc.loc[dict(system='A', protocol='sim_to_exp', domain='sim')] = 0.75
    sc.loc[dict(domain='exp', field='p')] = np.nan
    res.capped.loc[dict(system='A', protocol='joint', seed=1)] = 1
    res.capped.loc[dict(system='B', protocol='sim_to_exp', seed=0)] = 1
    return res if curves else res.drop_vars(['curve_step', 'curve_val'])


@pytest.fixture(scope='module')
def seeded(): return seeded_results()


@pytest.fixture(scope='module')
def stext(seeded): return report_text(seeded)


def section(text, title):
    return text.split(f'## {title}', 1)[1].split('\n## ', 1)[0]


def flag_rows(text, start):
    "Table rows of the FLAGS paragraph that begins with the bold `start`, up to the next bold heading."
    part = section(text, 'FLAGS').split(f'**{start}', 1)[1].split('\n**', 1)[0]
    return [l for l in part.splitlines() if l.startswith('| ') and not l.startswith('| system')]


def test_flags_list_exactly_the_failing_cells(stext):
    flags = section(stext, 'FLAGS')
    assert flag_rows(stext, 'Trained protocols that do not beat persistence') == (
        [f'| A | S | sim_only | sim | {m} | 0.7 | 0.7 |' for m in ('rmse', 'rel_l2', 'frmse')]
        + [f'| B | S | joint | exp | {m} | 0.65 | 0.6 |' for m in ('rmse', 'rel_l2', 'frmse')])
    assert flag_rows(stext, 'Cells stopped') == ['| A | S | joint | 1 | 300 |', '| B | S | sim_to_exp | 0 | 300 |']
    assert '| system | capacity | protocol | seed | updates |' in flags
    assert 'Not checked: this run has no analog baseline.' in flags
    # off the training domain, against persistence (0.7, 0.6) and mean_field (0.01, 0.01): every single-domain model
    off = flag_rows(stext, 'Protocols worse than persistence or mean field')
    assert '| A | S | sim_only | exp | rmse | 1 | 0.6 | 0.01 |' in off and '| B | S | exp_only | sim | rmse | 2 | 0.7 | 0.01 |' in off
    assert '| A | S | sim_to_exp | sim | rmse | 0.75 | 0.7 | 0.01 |' in off and not any('| joint |' in r for r in off)
    assert len(off) == 2 * 3 * 3  # sim_only, exp_only, sim_to_exp in A and B, three metrics each


def test_flags_analog_and_off_domain():
    "Analog (0.3, 0.12): Joint's exp error 0.15 does not beat it; off the training domain only Sim-only (1.0 on exp > 0.6) and Exp-only (1.0 on sim > 0.7) are worse than persistence."
    res = synthetic_results(seeds=(0, 1), errors={'sim_only': (0.05, 1.0), 'exp_only': (1.0, 0.05), 'sim_to_exp': (0.6, 0.1),
                                                 'joint': (0.25, 0.15), 'persistence': (0.7, 0.6), 'mean_field': (1.0, 0.9),
                                                 'analog': (0.3, 0.12)})
    text = report_text(res)
    assert flag_rows(text, 'Trained protocols that do not beat analog') == [
        f'| {s} | S | joint | exp | {m} | 0.15 | 0.12 |' for s in ('A', 'B') for m in ('rmse', 'rel_l2', 'frmse')]
    assert flag_rows(text, 'Protocols worse than persistence or mean field') == [
        f'| {s} | S | {p} | {d} | {m} | 1 | {r} | {mf} |' for p, d, r, mf in (('sim_only', 'exp', 0.6, 0.9), ('exp_only', 'sim', 0.7, 1))
        for s in ('A', 'B') for m in ('rmse', 'rel_l2', 'frmse')]
    assert 'reference baselines: persistence, mean_field, analog' in text
    assert 'analog: the frames that followed the nearest training window of the same domain' in text
    good = res.copy(deep=True)
    good.score.loc[dict(protocol='joint', domain='exp')] = 0.1
    assert 'None: every trained protocol beats analog where it trains.' in section(report_text(good), 'FLAGS')


def test_exp_against_the_truth_with_the_floor_and_the_seed_rule():
    res = synthetic_results(seeds=(0, 1, 2))
    res['score_measured'] = res.score.sel(domain='exp', drop=True) + 0.05
    res['noise_floor'] = xr.full_like(res.score_measured, 0.04)
    res.attrs.update(exp_target='truth', exp_target_by_system=json.dumps({'A': 'truth', 'B': 'truth'}),
                     seed_rule='a seed is a replicate: it regenerates the data')
    text = report_text(res)
    assert 'Seeds: a seed is a replicate: it regenerates the data. Exp is scored against the hidden truth' in text
    assert '| system | capacity | protocol | sim | exp | b@0.5 | exp vs measured | exp floor |' in section(text, 'RMSE per domain')
    assert '| A | S | joint | 0.25 ± 0 | 0.15 ± 0 | 0.2 ± 0 | 0.2 ± 0 | 0.04 ± 0 |' in section(text, 'RMSE per domain')
    meas = res.drop_vars(['score_measured']).assign(noise_floor=res.noise_floor * np.nan)
    meas.attrs.update(exp_target='measured')
    t2 = report_text(meas)
    assert 'Exp is scored against the measured data (these data have no hidden truth)' in t2 and 'exp floor' not in t2
    assert 'Seeds: what a seed varies is not recorded in this run.' in report_text(synthetic_results())


def test_hidden_field_baselines_are_the_sim_training_mean():
    "Every baseline predicts the sim training mean of a field its exp inputs lack: one column, named for what it is."
    res = synthetic_results(seeds=(0,), errors={'sim_only': (0.05, 1.0), 'joint': (0.25, 0.15), 'persistence': (0.7, 0.6),
                                               'mean_field': (1.0, 0.9), 'analog': (0.3, 0.12)})
    t = xr.full_like(res.score.sel(domain='sim', field='all', drop=True), 0.5)
    t.loc[dict(protocol=['persistence', 'mean_field', 'analog'])] = 0.9
    res['truth_score'] = t.expand_dims(hidden_field=['p']).rename(None)
    sec = section(report_text(res), "Beyond the paper: the experiment's hidden true p")
    assert '| system | capacity | sim_only | joint | sim training mean (ref.) |' in sec and '| A | S | 0.5 | 0.5 | 0.9 |' in sec
    assert 'persistence' not in sec.split('\n\n', 2)[-1]  # no row or column named persistence


def test_flags_none(res, text):
    clean = synthetic_results(seeds=(0, 1))
    flags = section(report_text(clean), 'FLAGS')
    assert 'None: every trained protocol beats persistence where it trains.' in flags
    assert 'None: the convergence rule ended every trained cell before the cap.' in flags
    assert 'Not checked: this run has no persistence baseline.' in section(text, 'FLAGS')
    assert 'Not recorded in this run.' in section(text, 'FLAGS')


def test_units_budget_and_ci(stext):
    assert ('Scores are nondimensional: each field divided by its reference scale; reference scales: '
            'A: u 2, v 2, p 0.5; B: u 2, v 2, p 0.5. Training budget: every protocol trains until its validation objective '
            'has not improved for 3 evaluations, at most 300 updates; Sim→Exp spends at most 150 on each phase') in stext
    assert 'Tables show the mean ± the 95 % confidence half-width (Student t) over the 3 seeds.' in stext
    # Joint of A: sim 0.2, 0.3, 0.8 -> 0.4333 ± t_{0.975,2}·0.3215/√3 = 0.8; exp 0.15 ± 0; bM 0.2917 ± 0.4
    t = 4.302652729749464
    hw_sim, hw_b = t * np.std([0.2, 0.3, 0.8], ddof=1) / 3 ** 0.5, t * np.std([0.175, 0.225, 0.475], ddof=1) / 3 ** 0.5
    assert f'{hw_sim:.2g}' == '0.8' and f'{hw_b:.2g}' == '0.4'
    assert '| A | S | joint | 0.4333 ± 0.8 | 0.15 ± 0 | 0.2917 ± 0.4 |' in section(stext, 'RMSE per domain')
    assert '| A | S | sim_only | 0.7 ± 0 | 1 ± 0 | 0.85 ± 0 |' in section(stext, 'RMSE per domain')  # no 1e-16 noise
    # Joint vs Sim->Exp in A, paired: 58.8, 47.1, -11.8 % per seed
    red = [100 * (0.425 - b) / 0.425 for b in (0.175, 0.225, 0.475)]
    ci = f'{np.mean(red):.4g} ± {t * np.std(red, ddof=1) / 3 ** 0.5:.2g}'
    assert ci == '31.37 ± 94'
    # beside Joint, the two-model pair: A sim_only on sim (0.7) + exp_only on exp (0.05) -> 0.375; B sim_only + exp_only, 0.05 each
    assert f'| A | S | rmse | 0.425 ± 0 | sim_to_exp | 0.2917 ± 0.4 | 0.375 ± 0 | {ci} | yes | no | 0.65 | 0.01 |' in stext
    assert '| B | S | rmse | 0.35 ± 0 | sim_to_exp | 0.45 ± 0 | 0.05 ± 0 | -28.57 ± 0 | no | no | 0.65 | 0.01 |' in stext
    assert '| A | S | two-model pair (ref.) | 0.7 ± 0 | 0.05 ± 0 | 0.375 ± 0 |' in section(stext, 'RMSE per domain')


def test_baselines_reference_rows_never_winners(seeded, stext):
    assert ('protocols: sim_only, exp_only, sim_to_exp, joint; reference baselines: persistence, mean_field; seeds: 3' in stext)
    for title in ('RMSE per domain', 'RelL2 per domain', 'fRMSE per domain', 'RMSE in physical units'):
        sec = section(stext, title)
        assert '| A | S | persistence (ref.) |' in sec and '| B | S | mean_field (ref.) |' in sec, title
    assert '| persistence (ref.) | mean_field (ref.) | joint vs sim_to_exp % |' in section(stext, 'Pressure')
    red = section(stext, "The paper's comparison")
    assert 'persistence |' not in red.replace('persistence (ref.) |', '') and '| mean_field |' not in red
    # mean_field has the lowest bM everywhere, yet Joint wins A by seed mean (1/1/1) and nothing in every seed
    assert '- Joint has the lowest bRMSE / bRelL2 / bfRMSE at λ = 0.5 in 1/1/1 of 2 settings by seed mean' in stext
    assert '- Clear (the paired 95 % interval excludes zero): 0/0/0 of 2 settings.' in stext
    assert '| 0.5 | 3 | 6 | 24 | 0 |' in section(stext, 'Win counts')
    assert protocol_ranking(seeded.score)['A/S'][0] == 'joint'  # reference baselines are not ranked
    assert all('mean_field' not in r and 'persistence' not in r for r in protocol_ranking(seeded.score).values())
    assert 'nan' not in stext.lower()


def test_optional_figures_and_sections(tmp_path):
    def write(res, name):
        run = tmp_path / name; run.mkdir()
        res.to_netcdf(run / 'results.nc', engine='h5netcdf')
        text = write_report(run).read_text()
        return text, sorted(p.name for p in (run / 'figures').iterdir())
    text, figs = write(seeded_results(dims={'arch': ('fan', 'fno'), 'exp_trajs': (2, 8)}).sel(system=['A']), 'full')
    assert figs == ['error_vs_n.png', 'learning_curves.png', 'pareto_rmse.png']
    for f in figs: assert f'(figures/{f})' in text
    n = section(text, 'Error against the number of experimental training trajectories')
    assert '| system | capacity | arch | protocol | domain | N=2 | N=8 |' in n
    assert '| A | S | fan | joint | sim | 0.4333 ± 0.8 | 0.4333 ± 0.8 |' in n and '| A | S | fan | persistence (ref.) | exp | 0.6 ± 0 | 0.6 ± 0 |' in n
    arch = section(text, 'Architectures')
    assert '| system | capacity | exp_trajs | protocol | fan | fno |' in arch
    assert '- fan: Joint has the lowest bRMSE in 2 of 2 settings by seed mean, clearly (interval excluding zero) 0; mean bRMSE reduction 31.4 %.' in arch
    text, figs = write(seeded_results(dims={'exp_trajs': (8,)}, curves=False), 'plain')
    assert figs == ['pareto_rmse.png']
    assert 'learning_curves' not in text and 'error_vs_n' not in text and '## Architectures' not in text
    assert '## Error against the number' not in text


def test_figures_small(seeded):
    from simreal_nb.reading.report_figures import learning_curves, error_vs_n_figure
    fig = learning_curves(seeded)
    assert fig.dpi <= 80 and all(a.get_yscale() == 'log' for a in fig.axes if a.get_visible())
    assert [a.get_title() for a in fig.axes] == [f'{s}/S: {o}' for s in 'AB' for o in ('sim', 'exp', 'sim + exp')]  # one objective per axis
    assert [len(a.lines) for a in fig.axes[:3]] == [2 * 3, 3, 3 + 1]  # sim: Sim-only, Sim→Exp; exp: Exp-only; both: Joint + its ▸
    # a phase that stopped early: the next starts at its cap; it is drawn as its own phase, on the axis of its own objective,
    # from its own start (Sim→Exp's fine-tune beside Exp-only)
    two = seeded.copy(deep=True)
    at = dict(system='A', protocol='sim_to_exp', seed=0)
    st = two['curve_step'].loc[at]
    two['curve_step'].loc[at] = st + 2000.0 * (st.eval_index >= 3)  # evaluations 0-2 in the first phase, the rest after the jump
    fig2 = learning_curves(two)
    assert [len(a.lines) for a in fig2.axes[:3]] == [2 * 3, 3 + 1, 3 + 1]
    fine = [l for l in fig2.axes[1].lines if l.get_linestyle() == '--'][0].get_xdata()
    assert fine[0] == st.values[0] and fine.max() < 2000  # counted from the fine-tune's own start, not from the cap
    fig = error_vs_n_figure(seeded_results(dims={'exp_trajs': (2, 4)}).score)
    assert fig.dpi <= 80 and [a.get_title() for a in fig.axes] == ['A/S: exp rmse', 'A/S: sim rmse', 'B/S: exp rmse', 'B/S: sim rmse']


def test_two_model_pair_by_hand():
    "Per setting: the lowest seed-mean sim error of the non-joint protocols beside the lowest seed-mean exp error, the same two in every seed; a reference, never a winner."
    # seed means, sim: sim_only 0.2, sim_to_exp 0.275, exp_only 0.9; exp: sim_to_exp 0.225, exp_only 0.25, sim_only 0.9
    # (seed by seed sim_to_exp is lowest on sim in seed 1 and exp_only on exp in seed 0: never chosen so);
    # joint_mgda is lower on both but of Joint's family: never a candidate
    errs = {'sim_only': [(0.1, 0.9), (0.3, 0.9)], 'exp_only': [(0.9, 0.2), (0.9, 0.3)], 'sim_to_exp': [(0.5, 0.4), (0.05, 0.05)],
            'joint': [(0.3, 0.3), (0.3, 0.3)], 'joint_mgda': [(0.01, 0.01), (0.01, 0.01)], 'persistence': (0.001, 0.001)}
    score = synthetic_score(systems=('A',), seeds=(0, 1), errors=errs)
    score.loc[dict(protocol='sim_only', metric='frmse')] = np.nan  # the member chosen on RMSE, not scored on fRMSE
    pair, which = RT.two_model_pair(score)
    p = pair.sel(protocol=RT.TWO_MODEL, field='all').squeeze(drop=True)
    np.testing.assert_allclose(p.sel(metric='rmse').transpose('seed', 'domain').values, [[0.1, 0.4], [0.3, 0.05]])
    np.testing.assert_allclose(p.sel(metric='frmse').transpose('seed', 'domain').values, [[np.nan, 0.4], [np.nan, 0.05]])
    w = which.squeeze(drop=True)
    assert w.sim.item() == 'sim_only' and w.exp.item() == 'sim_to_exp'
    assert which.attrs == {'sim chosen on': 'test', 'exp chosen on': 'test'}
    # bM(λ) = λ·M_sim(sim member) + (1 − λ)·M_exp(exp member), per seed: 0.25 and 0.175 at λ = 0.5
    res = RT.with_two_model_pair(synthetic_results(systems=('A',), seeds=(0, 1), errors=errs))
    b = R.balanced_score(res.score, [0.2, 0.5], seed_mean=False).sel(protocol=RT.TWO_MODEL, metric='rmse').squeeze(drop=True)
    np.testing.assert_allclose(b.transpose('lam', 'seed').values, [[0.2 * 0.1 + 0.8 * 0.4, 0.2 * 0.3 + 0.8 * 0.05], [0.25, 0.175]])
    assert list(res.protocol.values).index(RT.TWO_MODEL) == list(res.protocol.values).index('joint') + 1  # beside Joint
    # lower than Joint (0.3), yet never the best non-joint protocol nor a winner; not ranked
    assert RT.reduction_table(res.score).loc[('A', 'S', 'rmse'), 'which'] == 'sim_to_exp'
    assert RT.wins_table(res.score).equals(RT.wins_table(res.score.drop_sel(protocol=RT.TWO_MODEL)))
    pr = RT.pooled_ranking(res)
    assert np.isnan(pr.loc[RT.TWO_MODEL, 'mean rank']) and pr.loc['joint_mgda', 'mean rank'] == 1
    assert RT.pair_choices(res.score).loc[('A', 'S')].tolist() == ['sim_only', 'sim_to_exp', 'test', 'test']
    text = report_text(res.drop_sel(protocol=RT.TWO_MODEL))
    for title in ('RMSE per domain', "The paper's comparison", 'Every protocol ranked'):
        assert 'two-model pair (ref.)' in section(text, title), title
    assert '| A | S | two-model pair (ref.) | 0.2 ± 1.3 | 0.225 ± 2.2 | 0.2125 ± 0.48 |' in section(text, 'RMSE per domain')
    assert 'protocols: sim_only, exp_only, sim_to_exp, joint, joint_mgda;' in text  # not a protocol of the run


def control_results(eq_exp):
    "Joint, Exp-only, Sim→Exp and their controls on one setting, three seeds; `eq_exp`: exp_only_eq's exp error per seed."
    errs = {'sim_only': (0.05, 1.0), 'exp_only': [(1.0, 0.20), (1.0, 0.22), (1.0, 0.18)], 'sim_to_exp': [(0.6, 0.2)] * 3,
            'joint': [(0.25, 0.10), (0.25, 0.11), (0.25, 0.09)], 'exp_only_eq': [(1.0, e) for e in eq_exp],
            'sim_to_exp_eq': [(0.6, 0.15)] * 3, 'persistence': (0.7, 0.6)}
    res = synthetic_results(systems=('A',), errors=errs)
    n = {'sim_only': 0, 'exp_only': 500, 'sim_to_exp': 400, 'joint': 1300, 'exp_only_eq': 1300, 'sim_to_exp_eq': 1300}
    nb = xr.DataArray(list(n.values()), dims='protocol', coords=dict(protocol=list(n))).reindex(protocol=res.protocol.values)
    return res.assign(exp_batches=nb.broadcast_like(res.steps_done) * 1.0, sim_batches=res.steps_done * 1.0)


def test_exposure_control_table_and_verdict():
    "Joint's paired exp margin over each protocol and its control, by hand; the report's sentence says whether it survives."
    res = control_results([0.15, 0.16, 0.14])
    t = RV.control_table(res)
    assert list(t.index.get_level_values('protocol')) == ['joint', 'exp_only', 'exp_only_eq', 'sim_to_exp', 'sim_to_exp_eq']
    j = np.array([0.10, 0.11, 0.09])
    by_hand = lambda other: 100 * (1 - np.exp(-np.mean(np.log(np.asarray(other) / j))))
    assert np.isclose(t.loc[('A', 'S', 'exp_only_eq'), 'joint margin %'], by_hand([0.15, 0.16, 0.14]))
    assert np.isclose(t.loc[('A', 'S', 'sim_to_exp'), 'joint margin %'], by_hand([0.2] * 3))
    assert t.loc[('A', 'S', 'exp_only_eq'), 'exp batches'] == 1300 and t.loc[('A', 'S', 'exp_only'), 'exp batches'] == 500
    assert (t.loc[[('A', 'S', p) for p in ('exp_only', 'exp_only_eq', 'sim_to_exp', 'sim_to_exp_eq')], 'verdict'] == 'better').all()
    assert RV.control_verdicts(res)[0].startswith("**A/S**: Joint's exp margin survives equal exposure")
    text = report_text(res)
    sec = section(text, 'Exposure')
    assert "### Does Joint's exp margin survive equal exposure?" in sec and '**A**' in sec
    assert '| S | exp_only_eq | 0.15 ± 0.025 | 1300 |' in sec and "- **A/S**: Joint's exp margin survives equal exposure" in sec
    assert '| A | S | exp_only_eq | 300 ± 0 | 300 ± 0 | 1300 ± 0 |' in sec  # updates, sim and exp batches of every protocol
    # with Joint's exp batches Exp-only matches Joint: the margin over it was the extra exposure
    lost = RV.control_verdicts(control_results([0.09, 0.12, 0.10]))[0]
    assert lost.startswith("**A/S**: Joint's exp margin does not survive equal exposure — its paired exp rmse margin over exp_only lost")
    assert 'over sim_to_exp kept' in lost
    none = control_results([0.15, 0.16, 0.14])
    none.score.loc[dict(protocol=['exp_only', 'sim_to_exp'], domain='exp')] = 0.1  # no margin at their own exposure
    assert RV.control_verdicts(none)[0].startswith("**A/S**: no exp margin to test: Joint is not clearly lower at the others' own exposure")
    assert "### Does Joint" not in report_text(res.drop_sel(protocol=['exp_only_eq', 'sim_to_exp_eq']))  # no control, no section
    assert protocol_coords(['exp_only_eq', 'sim_to_exp_eq'])['domains'] == ['exp', 'exp']  # the FLAGS judge a control where it trains


def test_report_of_a_grid_without_single_domain_models():
    "A grid of Joint and its variants only (no Sim-only, no Exp-only) still gets a report; the extrapolation section says what it can."
    res = synthetic_results(errors={'joint': (0.25, 0.15), 'sim_to_exp': (0.6, 0.1), 'persistence': (0.7, 0.6), 'mean_field': (1.0, 0.9)},
                            dims={'group': ('in_dist', 'out_dist')})
    text = report_text(res)
    assert '## Extrapolation' in text and 'Single-domain models on their own domain' not in text
    full = report_text(synthetic_results(dims={'group': ('in_dist', 'out_dist')}))
    assert 'Single-domain models on their own domain' in full



def test_tuning_section_rows_of_variants():
    "A protocol tuned on its own gets a row of its own, a Sim→Exp variant its fine-tune scale, and every column is explained."
    res = synthetic_results()
    tuned = {'grid': {'lr': [0.004, 0.002], 'finetune_lr_scale': [1.0, 0.3]}, 'seed': 0, 'rule': 'the lowest validation error',
             'systems': {'A': {'joint': {'lr': 0.002, 'finetune_lr_scale': 1.0}, 'sim_to_exp': {'lr': 0.004, 'finetune_lr_scale': 0.3},
                               'sim_to_exp_replay': {'lr': 0.002, 'finetune_lr_scale': 0.3}, 'joint_pcgrad': {'lr': 0.004, 'finetune_lr_scale': 1.0}}}}
    res.attrs['config'] = json.dumps({'lr': 0.002, 'tuned': tuned})
    text = report_text(res)
    tuning = section(text, 'Tuning')
    assert '| system | tuned as | lr | fine-tune scale |' in tuning
    assert '| A | sim_to_exp_replay | 0.002 | 0.3 |' in tuning and '| A | joint_pcgrad | 0.004 | – |' in tuning
    assert 'not explained' not in text


def test_one_seed_report_gives_margins_without_verdicts():
    "With one seed the first lines say so, give Joint's margins as measured and never 'no clear difference'."
    # bRMSE(0.5): Joint 0.2 in A, 0.3 in B; pooled 0.25, the best single exp-seeing model (A: Joint 20 % lower, B: 20 %
    # higher); the pair Sim-only on sim, any exp model on exp: 0.15; on exp every model 0.2
    errs = {'A': {'sim_only': (0.1, 0.9), 'exp_only': (0.9, 0.2), 'sim_to_exp': (0.5, 0.2), 'joint': (0.2, 0.2),
                  'pooled': (0.3, 0.2)},
            'B': {'sim_only': (0.1, 0.9), 'exp_only': (0.9, 0.2), 'sim_to_exp': (0.5, 0.2), 'joint': (0.4, 0.2),
                  'pooled': (0.3, 0.2)}}
    one = xr.concat([synthetic_results(systems=(s,), seeds=(0,), errors=e) for s, e in errs.items()], 'system')
    lines = report_text(one).splitlines()
    assert lines[2].startswith('**Finding.** 1 seed: margins without verdicts; `--seeds 3` or more for verdicts. ')
    assert 'over the pooled model: Joint lower in 1 of 2 settings (A +20.0 %; B -20.0 %)' in lines[2]
    assert 'On exp alone: over the best single exp-seeing model: Joint lower in 0 of 2 settings (A +0.0 %; B +0.0 %)' in lines[2]
    assert '(one seed: no interval) and its margin over each alternative' in lines[4]
    assert '| A | 0.2 | +20.0 | -33.3 | +20.0 |' in lines and '| B | 0.3 | -20.0 | -100.0 | -20.0 |' in lines
    answer = section('\n'.join(lines), 'The answer')
    assert '- **vs pooled**: one seed, no verdict: Joint lower on exp in 0 of 2 settings, on brmse@0.5 in 1.' in answer
    assert 'no clear difference' not in '\n'.join(lines[:12]) + answer


def test_pareto_figure_one_panel_per_setting_named_in_the_legend():
    "A row per system, a column per test group; every protocol named once in the legend, no control, the pair a star."
    errs = {'sim_only': (0.05, 1.0), 'exp_only': [(1.0, 0.20), (1.0, 0.21), (1.0, 0.19)], 'sim_to_exp': (0.6, 0.1),
            'joint': [(0.25, 0.10), (0.25, 0.11), (0.25, 0.09)], 'pooled': [(0.20, 0.10), (0.20, 0.11), (0.20, 0.09)],
            'exp_only_more': (1.0, 0.05), 'persistence': (0.7, 0.6)}
    res = synthetic_results(systems=('A', 'B'), errors=errs, dims={'group': ('in_dist', 'out_dist')})
    (name, caption, make), *_ = R._figures(res)
    fig = make()
    assert name == 'pareto_rmse' and 'seed means with 95 % seed intervals on both axes' in caption
    # pooled (0.15) is the lowest single model at λ = 0.5; the pair (Sim-only on sim, Sim→Exp on exp: 0.075) is lower
    # but a reference
    assert [a.get_title() for a in fig.axes] == [f'{s}, {g}\nlowest at λ = 0.2, 0.5, 0.8: pooled'
                                                 for s in 'AB' for g in ('in_dist', 'out_dist')]
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert names[:6] == ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'two-model pair (ref.)', 'pooled']
    assert 'exp_only_more' not in names and not [t for t in fig.axes[0].texts if t.get_text() in names]
    assert [t.get_text() for t in fig.axes[0].texts if t.get_text() == 'persistence']  # a baseline keeps its name
    star = [c for c in fig.axes[0].collections if c.get_label() == 'two-model pair']
    assert len(star) == 1 and len(fig.axes[0].containers) == 6  # seed bars on the five trained models and the pair


def test_imported_data_named_and_empty_settings_not_counted(res):
    "A run on imported data is titled by its system's name; a setting no trajectory fills is not counted."
    imp = res.assign(data_seed=xr.full_like(res.score.isel(domain=0, field=0, metric=0, drop=True), np.nan))
    assert report_text(imp, {'_run_s': 12.4}).startswith('# Sim+Real on A, B\n')
    from simreal_nb.reading.analysis import count_settings
    n = count_settings(res.score)
    assert n == res.sizes['system'] * res.sizes['capacity']
    assert count_settings(res.score.where(res.system != 'B')) == n - res.sizes['capacity']
