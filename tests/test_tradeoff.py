"The sim-exp trade-off: tables, winners, the Pareto figure, the widget and its graceful failure without ipywidgets."
import subprocess, sys
import numpy as np, pytest, xarray as xr
from matplotlib.figure import Figure
from simreal_nb.core.metrics import MetricInputError
from simreal_nb.reading.analysis import synthetic_score
from simreal_nb.reading.tradeoff import domain_errors, winners, protocol_table, winner_table, pareto_plot, figure_png, pareto_mask
from simreal_nb.reading.inspector import lambda_inspector

ERRS = {'sim_only': (0.02, 1.0), 'exp_only': (1.0, 0.02), 'sim_to_exp': (0.6, 0.1), 'joint': (0.25, 0.15)}


@pytest.fixture
def score():
    return synthetic_score(systems=('A', 'B'), capacities=('S', 'L'), errors=ERRS, noise=0.02)


@pytest.fixture
def exact():
    "No noise: bM(0.5) = 0.51 (sim_only), 0.51 (exp_only), 0.35 (sim_to_exp), 0.2 (joint)."
    return synthetic_score(errors=ERRS)


def test_domain_errors(score):
    e = domain_errors(score, 'rel_l2', 'u')
    assert e.dims == ('setting', 'protocol', 'domain')
    assert e.setting.values.tolist() == ['A/S', 'A/L', 'B/S', 'B/L']
    np.testing.assert_allclose(e.sel(protocol='joint', domain='sim'), 0.25, rtol=0.1)
    one = domain_errors(score.sel(system='B', capacity='S'))  # no setting dims left
    assert one.setting.values.tolist() == ['all']
    with pytest.raises(MetricInputError, match='`metric`'): domain_errors(score, 'mae')
    with pytest.raises(MetricInputError, match='`field`'): domain_errors(score, field='w')
    with pytest.raises(MetricInputError, match='`protocols`'): domain_errors(score, protocols=['pcgrad'])
    with pytest.raises(MetricInputError, match=r"lacks dim\(s\) \['domain'\]"): domain_errors(score.sel(domain='sim'))
    with pytest.raises(TypeError, match='DataArray'): domain_errors(score.values)


def test_domain_errors_exact(exact):
    "Seed-averaged errors equal the constructed ones; a missing seed is ignored by the mean."
    s = exact.copy(); s.loc[dict(seed=1, protocol='joint', domain='sim')] = np.nan
    e = domain_errors(s, 'frmse', 'p')
    assert e.setting.values.tolist() == ['A/S', 'B/S'] and e.protocol.values.tolist() == list(ERRS)
    for p, (sim, exp) in ERRS.items():
        assert e.sel(protocol=p).values.tolist() == [[sim, exp], [sim, exp]]


def test_protocol_table_hand_computed(exact):
    tab = protocol_table(exact, 0.5)
    assert list(tab.columns) == ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'winner']
    np.testing.assert_allclose(tab.iloc[:, :4].values, [[0.51, 0.51, 0.35, 0.2]] * 2)
    # λ = 0.7: sim_only 0.314, exp_only 0.706, sim_to_exp 0.45, joint 0.22
    np.testing.assert_allclose(protocol_table(exact, 0.7).iloc[0, :4].astype(float), [0.314, 0.706, 0.45, 0.22])
    assert protocol_table(exact, 0.7, protocols=['sim_only', 'exp_only']).winner.tolist() == ['sim_only', 'sim_only']
    assert protocol_table(exact, 0.3, protocols=['sim_only', 'exp_only']).winner.tolist() == ['exp_only', 'exp_only']
    # Joint (0.15 + 0.1λ) beats Exp-only (0.02 + 0.98λ) iff λ > 0.148, Sim->Exp (0.1 + 0.5λ) iff λ > 0.125 and
    # Sim-only (1 - 0.98λ) iff λ < 0.787
    wt = winner_table(exact, lams=(0.0, 0.1, 0.2, 0.75, 0.8, 1.0))
    assert wt.loc['A/S'].tolist() == ['exp_only', 'exp_only', 'joint', 'joint', 'sim_only', 'sim_only']


def testpareto_mask():
    x = np.array([1.0, 2.0, 2.0, np.nan, 1.0, 0.5])
    y = np.array([1.0, 0.5, 2.0, 0.0, 1.0, 3.0])
    # (2, 2) is dominated by (1, 1); a NaN point never counts; equal points do not dominate each other
    assert pareto_mask(x, y).tolist() == [True, True, False, False, True, True]


def test_tables_and_winners(score):
    assert (protocol_table(score, 0.5).winner == 'joint').all()
    assert (protocol_table(score, 1.0).winner == 'sim_only').all()
    assert (protocol_table(score, 0.0).winner == 'exp_only').all()
    assert (protocol_table(score, 0.8, protocols=['sim_only', 'exp_only']).winner == 'sim_only').all()
    wt = winner_table(score, lams=(0.0, 0.5, 1.0))
    assert wt.shape == (4, 3) and wt.columns.tolist() == [0.0, 0.5, 1.0]
    assert (wt[0.0] == 'exp_only').all() and (wt[0.5] == 'joint').all() and (wt[1.0] == 'sim_only').all()
    s = score.copy(); s.loc[dict(system='B')] = np.nan
    w = winners(domain_errors(s), 0.5)
    assert w.sel(setting='B/S') == '' and w.sel(setting='A/S') == 'joint'
    with pytest.raises(MetricInputError, match='`lam`'): protocol_table(score, 1.5)


def test_evaluation_layout_mode_dim():
    s = synthetic_score(errors=ERRS, metrics=('rmse', 'rel_l2', 'frmse', 'frmse_low'), modes=('one_step', 'rollout'))
    s.loc[dict(mode='one_step')] = 5.0  # one-step scores must not leak into the default (rollout) view
    assert (protocol_table(s, 0.5).winner == 'joint').all()
    assert (protocol_table(s, 0.5, mode='one_step').iloc[:, :-1] == 5.0).all().all()
    with pytest.raises(MetricInputError, match='`mode`'): domain_errors(s, mode='rollout_8')
    assert isinstance(pareto_plot(s, 'frmse_low', mode='one_step'), Figure)


def test_pareto_plot(score):
    fig = pareto_plot(score, lams=(0.0, 0.2, 0.5, 1.0), ncols=3)
    assert isinstance(fig, Figure)
    vis = [a for a in fig.axes if a.get_visible()]
    assert len(vis) == 4 and len(fig.axes) == 6  # 2 x 3 grid, two hidden
    assert len(vis[0].lines) == 4  # one iso-λ line per λ
    assert figure_png(fig)[:4] == b'\x89PNG'
    s = score.copy(); s.loc[dict(protocol='exp_only')] = np.nan  # a protocol never run is skipped
    s.loc[dict(system='B')] = np.nan  # an empty panel still draws
    assert figure_png(pareto_plot(s, 'frmse', log=True))[:4] == b'\x89PNG'


def test_pareto_iso_line_hand_computed(exact):
    "The dashed line of λ passes through the best protocol: Joint at (0.25, 0.15), level bM(0.5) = 0.2."
    ax = pareto_plot(exact, lams=(0.5,)).axes[0]
    (line,) = ax.lines
    xs, ys = line.get_data()
    np.testing.assert_allclose(0.5 * xs + 0.5 * ys, 0.2)
    assert 'λ=0.5: joint' in [t.get_text() for t in ax.texts]
    assert ax.get_title() == 'A/S' and ax.get_xlim() == pytest.approx((0, 1.15)) and ax.get_ylim() == pytest.approx((0, 1.15))


def test_lambda_inspector(score):
    pytest.importorskip('ipywidgets')
    w = lambda_inspector(score)
    assert 'joint: 4/4' in w.table.value and len(w.image.value) > 100
    w.slider.value = 1.0
    assert 'sim_only: 4/4' in w.table.value
    w.metric.value = 'frmse'; w.field.value = 'u'
    assert 'λ = 1.00' in w.table.value
    with pytest.raises(MetricInputError): lambda_inspector(score, metric='nope')


def test_lambda_inspector_without_ipywidgets(score, monkeypatch):
    monkeypatch.setitem(sys.modules, 'ipywidgets', None)
    with pytest.raises(ImportError, match='needs ipywidgets'): lambda_inspector(score)
    assert isinstance(pareto_plot(score), Figure)  # the rest keeps working


def test_reference_baselines_never_win():
    "Persistence better than every trained protocol stays a reference column and a grey point, never the winner."
    errs = {**ERRS, 'persistence': (0.01, 0.01), 'mean_field': (0.5, 0.5)}
    s = synthetic_score(errors=errs)
    tab = protocol_table(s, 0.5)
    assert list(tab.columns) == ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'persistence', 'mean_field', 'winner']
    assert (tab.winner == 'joint').all() and (tab.persistence == 0.01).all()
    assert (winner_table(s, lams=(0.0, 1.0)).values == [['exp_only', 'sim_only']] * 2).all()
    only_refs = s.sel(protocol=['persistence', 'mean_field'])
    assert (protocol_table(only_refs).winner == '').all()  # no trained protocol: no winner
    ax = pareto_plot(s, lams=(0.5,)).axes[0]
    assert 'λ=0.5: joint' in [t.get_text() for t in ax.texts]
    (line,) = ax.lines
    np.testing.assert_allclose(0.5 * line.get_xdata() + 0.5 * line.get_ydata(), 0.2)  # through Joint, not persistence
    refs = [c for c in ax.collections if c.get_label() in ('persistence', 'mean_field')]
    assert len(refs) == 2 and all(np.allclose(c.get_facecolor()[0][:3], 0.55) for c in refs)  # grey
    fills = {c.get_label(): c.get_facecolor() for c in ax.collections if c.get_label() in ERRS}
    assert len(fills['joint']) and len(fills['sim_only']) and len(fills['exp_only'])  # Pareto front of the trained ones
    from simreal_nb.reading.inspector import _table_html
    html = _table_html(tab, 0.5)
    assert 'joint: 2/2' in html and '<th style="color:grey">persistence (ref.)</th>' in html and 'persistence: ' not in html
