"""Are a run's scores inside a reference run's seed spread? One markdown table, a row per cell and score.

    python benchmarks/seed_spread.py RUN [--ref reports/default/scores.nc] [--metric rmse] [--field all]
    python benchmarks/seed_spread.py --smoke

RUN is a run folder (its results.nc) or a results file. For every learned cell of RUN (system, protocol, seed) and
every test group and domain: its score, the reference run's seeds of the same system and protocol (min–max and
mean ± 95 % CI), the relative change from the reference's own run of the same seed (`same seed Δ`, where it has
one), and `inside`: the score lies within the reference seeds' [min, max], or within 0.1 % of the same seed's score
(a seed at the edge of the range, moved by rounding, is still that seed). The last columns compare the
updates made under the convergence rule (`steps_done`) with the reference seeds'. A change that only alters float
rounding (a new summation order) should land inside; one that changes the method need not. `--smoke`: the reference's
seed 0 of one system as RUN (every score inside), in seconds."""
import argparse
from pathlib import Path
import numpy as np
import xarray as xr
from simreal_nb.reading.analysis import mean_ci

def results_of(path:str) -> xr.Dataset:
    "The results of a run folder (results.nc) or of a results file."
    p = Path(path)
    return xr.open_dataset(p / 'results.nc' if p.is_dir() else p)

def squeeze_settings(da:xr.DataArray) -> xr.DataArray:
    "Drop the one-valued setting dimensions (capacity, arch, exp_trajs) so runs of the same cells line up."
    return da.squeeze([d for d in ('capacity', 'arch', 'exp_trajs') if d in da.dims and da.sizes[d] == 1], drop=True)

def spread_rows(run:xr.Dataset, ref:xr.Dataset, metric:str='rmse', field:str='all') -> list:
    "A dict per (system, protocol, seed, group, domain) of `run`: its score beside `ref`'s seeds."
    new = squeeze_settings(run.score.sel(metric=metric, field=field))
    old = squeeze_settings(ref.score.sel(metric=metric, field=field))
    steps_new, steps_old = squeeze_settings(run.steps_done), squeeze_settings(ref.steps_done)
    rows = []
    for system in new.system.values:
        for protocol in new.protocol.values:
            if protocol not in old.protocol.values or not np.isfinite(steps_new.sel(system=system, protocol=protocol)).any():
                continue  # a baseline (no training) or a protocol the reference did not run
            o = old.sel(system=system, protocol=protocol)
            so = steps_old.sel(system=system, protocol=protocol).values
            for seed in new.seed.values:
                for group in new.group.values:
                    for domain in new.domain.values:
                        v, seeds = float(new.sel(system=system, protocol=protocol, seed=seed, group=group, domain=domain)), o.sel(group=group, domain=domain)
                        m, h = (float(x) for x in mean_ci(seeds, 'seed'))
                        lo, hi = float(seeds.min()), float(seeds.max())
                        same = float(seeds.sel(seed=seed)) if seed in seeds.seed.values else np.nan
                        delta = v / same - 1 if np.isfinite(same) and same != 0 else np.nan
                        rows.append(dict(system=str(system), protocol=str(protocol), seed=int(seed), group=str(group),
                                         domain=str(domain), score=v, ref_min=lo, ref_max=hi, ref_mean=m, ref_ci=h,
                                         same_seed_delta=delta, inside=bool(lo <= v <= hi or abs(delta) <= 1e-3),
                                         steps=float(steps_new.sel(system=system, protocol=protocol, seed=seed)),
                                         ref_steps=f"{int(np.nanmin(so))}–{int(np.nanmax(so))}"))
    return rows

def markdown(rows:list) -> str:
    "The rows as a markdown table, then a count of the scores inside."
    head = '| system | protocol | seed | group | domain | score | reference seeds min–max | mean ± 95 % CI | same seed Δ | inside | updates | reference updates |'
    lines = [head, '|' + '---|' * (head.count('|') - 1)]
    for r in rows:
        lines.append(f"| {r['system']} | {r['protocol']} | {r['seed']} | {r['group']} | {r['domain']} | {r['score']:.4g} | "
                     f"{r['ref_min']:.4g}–{r['ref_max']:.4g} | {r['ref_mean']:.4g} ± {r['ref_ci']:.2g} | {r['same_seed_delta']:+.1e} | "
                     f"{'yes' if r['inside'] else 'no'} | {r['steps']:.0f} | {r['ref_steps']} |")
    lines.append(f"\n{sum(r['inside'] for r in rows)} of {len(rows)} scores inside the reference seeds' range.")
    return '\n'.join(lines)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('run', nargs='?', help='a run folder (its results.nc) or a results file')
    ap.add_argument('--ref', default=str(Path(__file__).resolve().parents[1] / 'reports' / 'default' / 'scores.nc'))
    ap.add_argument('--metric', default='rmse')
    ap.add_argument('--field', default='all')
    ap.add_argument('--smoke', action='store_true', help="seconds: the reference's seed 0 of its first system as RUN")
    a = ap.parse_args(argv)
    if bool(a.run) == a.smoke: ap.error('expected a RUN folder or results file, or --smoke (not both)')
    for p in filter(None, (a.run, a.ref)):
        if not Path(p).exists(): ap.error(f'{p}: no such folder or file; expected a run folder or a results file')
    ref = results_of(a.ref)
    run = ref.isel(system=[0]).sel(seed=[0]) if a.smoke else results_of(a.run)
    print(markdown(spread_rows(run, ref, a.metric, a.field)))

if __name__ == '__main__': main()
