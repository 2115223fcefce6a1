"The λ inspector without a browser: `state_at` against hand-computed numbers, the view against `state_at`, the widget's kernel side, the Pareto figure's labels, and the docs pages' plumbing."
import re
import numpy as np, pytest, xarray as xr
from simreal_nb.core.metrics import MetricInputError
from simreal_nb.core.names import COORDS
from simreal_nb.reading.analysis import synthetic_score
from simreal_nb.training.protocols import with_protocol_coords
from simreal_nb.reading.tradeoff import pareto_plot, protocol_table, lam_train_of, protocol_colors, place_labels, _overlap
from simreal_nb.reading.inspector import (state_at, lambda_inspector, state_html, plane_svg, inspector_demo, results_score, inspector_choices,
                                  INSPECT_LAMS, _num)

ERRS = {'sim_only': (0.02, 1.0), 'exp_only': (1.0, 0.02), 'sim_to_exp': (0.6, 0.1), 'joint': (0.25, 0.15),
        'joint@0.1': (0.6, 0.08), 'joint@0.3': (0.35, 0.12), 'joint@0.7': (0.15, 0.27), 'joint@0.9': (0.08, 0.45),
        'persistence': (0.01, 0.01), 'mean_field': (1.0, 0.9)}


@pytest.fixture(scope='module')
def exact():
    "No noise, three seeds: every seed has the errors of ERRS; each protocol's coordinates recorded, as a run records them."
    return with_protocol_coords(synthetic_score(systems=('A', 'B'), capacities=('S', 'L'), seeds=(0, 1, 2), errors=ERRS))


@pytest.fixture(scope='module')
def demo():
    return inspector_demo()


def test_state_hand_computed(exact):
    st = state_at(exact, 0.5, system='B', capacity='L')
    assert st.selection == {'system': 'B', 'capacity': 'L'} and st.metric == 'rmse' and st.field == 'all'
    assert st.winner == 'joint' and st.level == pytest.approx(0.2)  # persistence (0.01) is lower but never wins
    assert st.values['persistence'] == pytest.approx(0.01) and st.values['sim_only'] == pytest.approx(0.51)
    assert all(abs(c) < 1e-12 for c in st.ci.values()) and st.n_seeds['joint'] == 3  # identical seeds
    assert st.front == ['joint@0.9', 'joint@0.7', 'joint', 'joint@0.3', 'joint@0.1']
    assert st.lam_train == {'joint': 0.5, 'joint@0.1': 0.1, 'joint@0.3': 0.3, 'joint@0.7': 0.7, 'joint@0.9': 0.9}
    assert st.wins == {'joint': 4} and st.n_settings == 4
    # λ = 0.8: Joint@0.9 0.8·0.08 + 0.2·0.45 = 0.154 < Joint@0.7 0.8·0.15 + 0.2·0.27 = 0.174 < Sim-only 0.016 + 0.2 = 0.216
    st8 = state_at(exact, 0.8)
    assert st8.winner == st8.best_joint == 'joint@0.9' and st8.level == pytest.approx(0.154)
    assert st8.values['joint@0.7'] == pytest.approx(0.174) and st8.values['sim_only'] == pytest.approx(0.216)
    assert state_at(exact, 1.0).winner == 'sim_only' and state_at(exact, 0.0).winner == 'exp_only'
    t = st8.table()
    assert t.loc['joint@0.9', 'winner'] and t.loc['joint@0.3', 'lam_train'] == 0.3 and np.isnan(t.loc['sim_only', 'lam_train'])


def test_state_matches_protocol_table(demo):
    for lam in (0.0, 0.35, 0.5, 1.0):
        tab = protocol_table(demo, lam, 'frmse', 'u')
        for system in ('cylinder', 'kolmogorov'):
            st = state_at(demo, lam, system=system, metric='frmse', field='u')
            row = tab.loc[f'{system}/S']
            assert st.winner == row.winner
            for p in st.protocols: assert st.values[p] == pytest.approx(row[p], rel=1e-12)


def test_state_ci_is_the_seed_interval(demo):
    "The interval is the Student-t interval of the per-seed bM(λ) (`analysis.mean_ci` on the same numbers)."
    from simreal_nb.reading.analysis import mean_ci
    st = state_at(demo, 0.3, system='kolmogorov')
    s = demo.sel(system='kolmogorov', capacity='S', field='all', metric='rmse')
    per_seed = 0.3 * s.sel(domain='sim') + 0.7 * s.sel(domain='exp')
    m, h = mean_ci(per_seed, 'seed')
    for p in st.protocols:
        assert st.ci[p] == pytest.approx(float(h.sel(protocol=p)), rel=1e-9)
        assert st.values[p] == pytest.approx(float(m.sel(protocol=p)), rel=1e-9)  # no missing seed: the same mean


def test_state_edge_cases(exact, tmp_path):
    one = exact.isel(seed=0)  # no seed dim: no interval
    st = state_at(one, 0.5)
    assert st.winner == 'joint' and all(np.isnan(c) for c in st.ci.values())
    assert '± ' not in state_html(st).split('<table class="si-table">')[1].split('</table>')[0]
    s = exact.copy(); s.loc[dict(system='A', capacity='S')] = np.nan
    st = state_at(s, 0.5, system='A', capacity='S')
    assert st.winner == '' and st.front == [] and 'none' in state_html(st)
    few = exact.sel(protocol=['sim_only', 'joint', 'persistence'])  # one Joint model: no front
    assert state_at(few, 0.5).front == []
    with pytest.raises(MetricInputError, match="`system`='C' is not in"): state_at(exact, 0.5, system='C')
    with pytest.raises(MetricInputError, match='no setting dim'): state_at(exact, 0.5, arch='fno')
    with pytest.raises(MetricInputError, match='`lam`'): state_at(exact, 1.5)
    with pytest.raises(MetricInputError, match='`metric`'): state_at(exact, 0.5, metric='mae')
    with pytest.raises(MetricInputError, match='`scale`'): state_at(exact, 0.5, scale='loglog')
    # a results file (or its folder) reads the same as the array; setting values match as text (7 and '7')
    ds = exact.expand_dims(exp_trajs=[7]).to_dataset(name='score')
    ds.to_netcdf(tmp_path / 'results.nc')
    assert state_at(tmp_path, 0.5, exp_trajs='7').values == state_at(ds.score, 0.5, exp_trajs=7).values
    assert inspector_choices(tmp_path / 'results.nc')['exp_trajs'] == [7]
    with pytest.raises(FileNotFoundError, match='results.nc'): results_score(tmp_path / 'nope')


def test_scale(demo):
    "Errors spanning more than a factor 10 give log axes under 'auto'; the limits hold every point."
    st = state_at(demo, 0.5)
    assert st.scale == 'log' and st.limits[0] > 0
    assert state_at(demo, 0.5, scale='linear').limits[0] == 0
    near = synthetic_score(errors={'sim_only': (0.2, 0.5), 'joint': (0.3, 0.3)})
    assert state_at(near, 0.5).scale == 'linear'
    for s in ('auto', 'linear'):
        st = state_at(demo, 0.5, scale=s)
        x0, x1, y0, y1 = st.limits
        assert all(x0 <= st.sim[p] <= x1 and y0 <= st.exp[p] <= y1 for p in st.protocols)


def test_view_shows_the_state(demo):
    "The HTML names the winner, prints every value as `_num` and draws one point per protocol."
    for lam in (0.0, 0.55, 1.0):
        st = state_at(demo, lam, system='kolmogorov', metric='rel_l2')
        h = state_html(st)
        assert f'data-lam="{lam:.2f}"' in h and f'<b class="si-winner">{st.winner}</b>' in h
        for p in st.protocols:
            row = re.search(rf'<tr data-protocol="{re.escape(p)}"[^>]*>(.*?)</tr>', h).group(1)
            assert f'>{_num(st.values[p])}' in row and f'>{_num(st.sim[p])}<' in row
        svg = plane_svg(st)
        assert svg.startswith('<svg') and svg.count('data-protocol=') == len(st.protocols)
        assert 'class="iso"' in svg and 'class="front"' in svg


def test_widget_kernel_side(demo):
    pytest.importorskip('ipywidgets')
    w = lambda_inspector(demo, lam=0.52)  # snapped to the grid
    assert w.slider.value == 0.5 and w.stack.selected_index == 10 and len(w.pages) == len(INSPECT_LAMS) == 21
    strip = lambda h: re.sub(r'si-clip-\d+', '', h)  # the SVG clip ids are unique per drawing
    assert w.state.winner == state_at(demo, 0.5).winner and strip(w.table.value) == strip(state_html(state_at(demo, 0.5), css=False))
    w.slider.value = 0.85
    assert w.stack.selected_index == 17 and w.state.values == state_at(demo, 0.85).values
    assert 'data-lam="0.85"' in w.table.value
    w.system.value = 'kolmogorov'; w.metric.value = 'frmse'; w.field.value = 'v'
    assert w.state.values == state_at(demo, 0.85, system='kolmogorov', metric='frmse', field='v').values
    w.selectors['scale'].value = 'linear'
    assert w.state.scale == 'linear' and w.pages[0].value != w.pages[20].value
    assert set(w.selectors) == {'system', 'capacity', 'metric', 'field', 'scale'} and w.capacity.disabled  # one capacity


def test_joint_names_and_colours():
    names = xr.Dataset(coords=dict(protocol=['joint', 'joint@0.3', 'joint_mgda@0.3', 'sim_only', 'two-model pair']))
    assert lam_train_of(names) == {'joint': 0.5}  # no λ recorded: the names without a setting alone (`PLAIN_COORDS`)
    recorded = with_protocol_coords(names.sel(protocol=names.protocol.values[:-1]))  # the pair is no protocol object
    assert lam_train_of(recorded) == {'joint': 0.5, 'joint@0.3': 0.3}  # recorded: a plain Joint's λ alone
    c = protocol_colors(['sim_only', 'joint', 'joint@0.1', 'joint@0.9', 'persistence'])
    assert c['persistence'] == '#8c8c8c' and c['sim_only'] == '#1f77b4' and len(set(c.values())) == 5
    assert protocol_colors(['joint'])['joint'] == '#d62728'


def test_lam_train_is_read_from_the_coordinate(exact):
    "A protocol's λ_train comes from the results' `lam_train` coordinate, whatever its name; without it only a name without a setting has one."
    names = [str(p) for p in exact.protocol.values]
    lam = [{'joint': 0.5, 'joint@0.1': 0.1, 'joint@0.7': 0.7, 'joint@0.9': 0.9}.get(p, 0.3 if p == 'joint@0.3' else np.nan) for p in names]
    odd = exact.assign_coords(protocol=['odd_name' if p == 'joint@0.3' else p for p in names], lam_train=('protocol', lam))
    assert lam_train_of(odd) == {'joint': 0.5, 'joint@0.1': 0.1, 'odd_name': 0.3, 'joint@0.7': 0.7, 'joint@0.9': 0.9}
    assert lam_train_of(odd.to_dataset(name='score')) == lam_train_of(odd)
    assert lam_train_of(exact) == {'joint': 0.5, 'joint@0.1': 0.1, 'joint@0.3': 0.3, 'joint@0.7': 0.7, 'joint@0.9': 0.9}
    assert lam_train_of(exact.drop_vars(list(COORDS))) == {'joint': 0.5}  # older results: no name is parsed
    st = state_at(odd, 0.5, system='B', capacity='L')
    assert st.lam_train['odd_name'] == 0.3 and 'odd_name' in st.front and st.table().loc['odd_name', 'lam_train'] == 0.3
    nan_joint = exact.assign_coords(lam_train=('protocol', [np.nan] * len(names)))  # the coordinate rules: no Joint at all
    assert lam_train_of(nan_joint) == {} and state_at(nan_joint, 0.5, system='B', capacity='L').front == []


def test_place_labels_avoid_each_other():
    rng = np.random.default_rng(0)
    pts = [tuple(p) for p in rng.uniform(40, 60, (6, 2))]  # six points crowded in a 20-px square
    sizes = [(40, 12)] * 6
    where = place_labels(pts, sizes, (0, 0, 300, 300))
    rects = [(x, y, x + w, y + h) for (x, y), (w, h) in zip(where, sizes)]
    assert sum(_overlap(a, b) for i, a in enumerate(rects) for b in rects[i + 1:]) == 0
    assert all(0 <= r[0] and r[2] <= 300 and 0 <= r[1] and r[3] <= 300 for r in rects)


def test_pareto_plot_labels_do_not_overlap(demo):
    "Point labels, λ tags and the corner list: no two text boxes overlap (in rendered pixels), and Joint's front is drawn."
    from matplotlib.text import Text
    fig = pareto_plot(demo, lams=(0.2, 0.5, 0.8))
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in [a for a in fig.axes if a.get_visible()]:
        boxes = [Text.get_window_extent(t, r) for t in ax.texts]  # the text alone, without a leader line
        assert len(boxes) >= len(demo.protocol) + 3
        bad = [(ax.texts[i].get_text(), ax.texts[j].get_text()) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
               if _overlap(boxes[i].extents, boxes[j].extents) > 0.05 * min(boxes[i].width * boxes[i].height, boxes[j].width * boxes[j].height)]
        assert not bad, bad
        assert [l for l in ax.lines if l.get_label() == 'Joint front']
    w, h = fig.get_size_inches() * fig.dpi
    assert w <= 1000  # fits a page at 100 %
    fig = pareto_plot(demo, lams=(0.5,), log='auto')
    assert all(a.get_xscale() == 'log' for a in fig.axes if a.get_visible())


def test_docs_page_names():
    "Page names and the site's notebook order (rendering is tested by nbs/face/92_docs.ipynb and tests/test_browser.py)."
    from simreal_nb.face.docs import page_name, docs_notebooks
    assert page_name('reading/60_tradeoff.ipynb') == 'reading/tradeoff.html' and page_name('tutorials/x.ipynb') == 'tutorials/x.html'
    names = [p.as_posix() for p in docs_notebooks()]
    assert names[0] == 'index.ipynb' and 'tutorials/lambda_inspector.ipynb' in names and 'face/92_docs.ipynb' in names


def test_many_protocols_get_distinct_colours():
    from simreal_nb.training.protocols import BEYOND
    names = ['sim_only', 'exp_only', 'sim_to_exp', 'joint', *BEYOND, 'sim_to_exp_frozen', 'sim_to_exp_frozen_decoder', 'joint_causal']
    c = protocol_colors(names)
    assert len(set(c.values())) == len(names)  # 17 trained protocols, no colour twice
