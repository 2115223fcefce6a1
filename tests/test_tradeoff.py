"The sim-exp trade-off: tables, winners, the Pareto figure, the widget and its graceful failure without ipywidgets."
import subprocess, sys
import numpy as np, pytest, xarray as xr
from matplotlib.figure import Figure
from simreal_nb.metrics import MetricInputError, synthetic_score
from simreal_nb.tradeoff import domain_errors, winners, protocol_table, winner_table, pareto_plot, figure_png, lambda_inspector

ERRS = {'sim_only': (0.02, 1.0), 'exp_only': (1.0, 0.02), 'sim_to_exp': (0.6, 0.1), 'joint': (0.25, 0.15)}


@pytest.fixture
def score():
    return synthetic_score(systems=('cylinder', 'foil'), capacities=('S', 'L'), errors=ERRS, noise=0.02)


def test_domain_errors(score):
    e = domain_errors(score, 'rel_l2', 'u')
    assert e.dims == ('setting', 'protocol', 'domain')
    assert e.setting.values.tolist() == ['cylinder/S', 'cylinder/L', 'foil/S', 'foil/L']
    np.testing.assert_allclose(e.sel(protocol='joint', domain='sim'), 0.25, rtol=0.1)
    one = domain_errors(score.sel(system='foil', capacity='S'))  # no setting dims left
    assert one.setting.values.tolist() == ['all']
    with pytest.raises(MetricInputError, match='`metric`'): domain_errors(score, 'mae')
    with pytest.raises(MetricInputError, match='`field`'): domain_errors(score, field='w')
    with pytest.raises(MetricInputError, match='`protocols`'): domain_errors(score, protocols=['pcgrad'])
    with pytest.raises(MetricInputError, match='lacks'): domain_errors(score.sel(domain='sim'))
    with pytest.raises(TypeError, match='DataArray'): domain_errors(score.values)


def test_tables_and_winners(score):
    assert (protocol_table(score, 0.5).winner == 'joint').all()
    assert (protocol_table(score, 1.0).winner == 'sim_only').all()
    assert (protocol_table(score, 0.0).winner == 'exp_only').all()
    assert (protocol_table(score, 0.5, protocols=['sim_only', 'exp_only']).winner.isin(['sim_only', 'exp_only'])).all()
    wt = winner_table(score, lams=(0.0, 0.5, 1.0))
    assert wt.shape == (4, 3) and (wt[0.5] == 'joint').all()
    s = score.copy(); s.loc[dict(system='foil')] = np.nan
    w = winners(domain_errors(s), 0.5)
    assert w.sel(setting='foil/S') == '' and w.sel(setting='cylinder/S') == 'joint'
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
    s.loc[dict(system='foil')] = np.nan  # an empty panel still draws
    assert figure_png(pareto_plot(s, 'frmse', log=True))[:4] == b'\x89PNG'


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
