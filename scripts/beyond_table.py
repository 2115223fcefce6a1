"""The beyond-Joint table of one system: every protocol against Joint, paired by seed, on the balanced error.

    python scripts/beyond_table.py reports/beyond_tuned/controlled/scores.nc [--with reports/default/scores.nc]

The first file holds a run of Joint and the beyond-Joint protocols (with the non-learned baselines); `--with` adds the
cells of another run of the same system (by default the default study's Sim-only, Exp-only, Sim→Exp and pooled), which
pair with them by seed when the two runs share Joint's cells bit for bit (checked; the script stops if they do not).
Printed as markdown: the reference baselines, then one row per protocol, sorted by bRMSE(0.5) over both test groups —
mean ± 95 % half-width over seeds, the paired change vs Joint in % with its 95 % interval (positive: lower error than
Joint; **lower** / **higher** only where every seed agrees and the interval excludes zero), and the same change on the
exp domain alone — then each protocol's sim and exp RMSE per group."""
import argparse
import numpy as np
import xarray as xr
from simreal_nb.reading.analysis import balanced_score, select_view
from simreal_nb.reading.report_tables import paired_change, ranking_table
from simreal_nb.core.names import BASELINES

ADDED = ['sim_only', 'exp_only', 'sim_to_exp', 'pooled']
GROUPS = ['in_dist', 'out_dist']

def one_cell(score:xr.DataArray) -> xr.DataArray:
    "`score` with every length-one dim but seed, protocol and group squeezed away."
    keep = {'seed', 'protocol', 'group', 'domain', 'metric', 'field'}
    # runs of different versions carry different per-protocol coordinates (family, λ_train...): the table needs none
    squeeze = [d for d in score.dims if d not in keep and score.sizes[d] == 1]
    return score.squeeze(squeeze, drop=True).reset_coords(drop=True)

def load(path:str, added:str|None) -> xr.DataArray:
    "The `score` of `path`, with the `ADDED` protocols of `added` joined after checking Joint's cells agree."
    score = one_cell(xr.open_dataset(path)['score'].load())
    if added is None: return score
    system = str(xr.open_dataset(path)['system'].values[0])
    other = one_cell(xr.open_dataset(added)['score'].sel(system=[system]).load())
    if not np.array_equal(score.sel(protocol='joint').values, other.sel(protocol='joint').values, equal_nan=True):
        raise SystemExit(f"Joint's cells of {path} and {added} differ: their other protocols do not pair by seed")
    return xr.concat([score, other.sel(protocol=[p for p in ADDED if p in other.protocol])], 'protocol')

def pct(v:float) -> str: return f"{v:+.1f}".replace('-', '−')

def sig(v:float, n:int) -> str: return f"{float(f'{v:.{n}g}'):g}"  # n significant digits, never an exponent

def change(mean:float, lo:float, hi:float, verdict:str) -> str:
    "A paired change as `+1.1 [−9.9, +10.9]`, marked where the verdict is clear."
    mark = {'better': ' **lower**', 'worse': ' **higher**'}.get(str(verdict), '')
    return f"{pct(mean)} [{pct(lo)}, {pct(hi)}]{mark}"

def table(score:xr.DataArray) -> str:
    "The markdown of the baselines line, the protocol table and the sim / exp RMSE table."
    rt = ranking_table(xr.Dataset({'score': score}), 0.5)  # bRMSE, sim, exp ± CI and the paired change vs Joint
    at = lambda p, g, col: rt.loc[(g, p), col]
    pm = lambda p, g, col: f"{sig(at(p, g, col), 3)} ± {sig(at(p, g, col + ' ±'), 2)}"
    vs = lambda p, g: change(*(at(p, g, f'vs joint %{k}') for k in ('', ' lo', ' hi')), at(p, g, 'verdict'))
    exp = select_view(score.sel(metric='rmse', domain='exp'))
    ve = paired_change(exp, exp.sel(protocol='joint'))  # the same change on the exp domain alone
    protocols = [str(p) for p in score.protocol.values]
    bm = balanced_score(score.sel(metric=['rmse']), 0.5).sel(metric='rmse')  # the baselines (not ranked)
    base = [f"{b.replace('_', ' ')} " + ' / '.join(f"{bm.sel(protocol=b, group=g).item():.3f}" for g in GROUPS)
            for b in BASELINES if b in protocols]
    learned = [p for p in protocols if p not in BASELINES]
    order = sorted(learned, key=lambda p: sum(at(p, g, 'brmse@0.5') for g in GROUPS))
    lines = ['Reference baselines, bRMSE(0.5) in_dist / out_dist: ' + ', '.join(base) + '.', '',
             '| protocol | bRMSE(0.5) in_dist | vs Joint % | bRMSE(0.5) out_dist | vs Joint % '
             '| exp vs Joint % (in / out) |',
             '|---|---|---|---|---|---|']
    for p in order:
        cells = [f"`{p}`"]
        for g in GROUPS: cells += [pm(p, g, 'brmse@0.5'), '—' if p == 'joint' else vs(p, g)]
        cells.append('—' if p == 'joint' else ' / '.join(
            change(*(ve[k].sel(protocol=p, group=g).item() for k in ('mean', 'lo', 'hi', 'verdict'))) for g in GROUPS))
        lines.append('| ' + ' | '.join(cells) + ' |')
    lines += ['', '| protocol | sim RMSE in_dist | exp RMSE in_dist | sim RMSE out_dist | exp RMSE out_dist |',
              '|---|---|---|---|---|']
    for p in order:
        lines.append('| ' + ' | '.join([f"`{p}`"] + [pm(p, g, d) for g in GROUPS for d in ('sim', 'exp')]) + ' |')
    return '\n'.join(lines)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('scores', help="scores.nc of a run of Joint and the beyond-Joint protocols")
    ap.add_argument('--with', dest='added', default='reports/default/scores.nc',
                    help="scores.nc whose Sim-only, Exp-only, Sim→Exp and pooled cells join the table ('' for none)")
    a = ap.parse_args()
    print(table(load(a.scores, a.added or None)))
