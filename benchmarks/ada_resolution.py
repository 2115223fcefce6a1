"""What the MoG benchmark's held-out scores can resolve: exact mixtures with the target's pair weights and given pair
widths, scored against exact samples of ν by the summed sliced W1 of the three projections at the sizes an alignment
sees (a step's mini-batches, the holdout rule's check, the whole experimental set).

    python benchmarks/ada_resolution.py [--reps 50] [--out reports/ada/resolution] [--smoke]

Candidates: the target's widths (0.8/0.6/0.5/0.4), one common width 0.55, the widths ADA reaches on the benchmark
(reports/ada/mog_holdout, mean radii over three seeds) and the base's 0.5. Writes resolution.json and resolution.md.
`--smoke`: two draws, the smallest size only, into a temporary folder, in seconds.
"""
import argparse, json, os, tempfile
import numpy as np
from simreal_nb.ada.adamog import heldout_resolution

def ada_widths(path='reports/ada/mog_holdout'):
    "Mean radius per pair of ADA's samples over the recorded seeds."
    runs = [json.load(open(os.path.join(path, d, 'metrics.json')))['ada']['pairs'] for d in sorted(os.listdir(path)) if d.startswith('seed')]
    return tuple(round(float(np.mean([r[f'P{k}']['radius'] for r in runs])), 3) for k in range(1, 5))

SMOKE = dict(reps=2, sizes='256:256', out=None)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--reps', type=int, default=50); ap.add_argument('--out', default='reports/ada/resolution')
    ap.add_argument('--sizes', default='256:256,2048:800,4096:3200', help='generated:measured sample counts scored')
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE} (out: a temporary folder)')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    try: sizes = tuple(tuple(int(n) for n in s.split(':')) for s in a.sizes.split(','))
    except ValueError: ap.error(f"--sizes {a.sizes!r}: expected generated:measured pairs of integers, e.g. 256:256,2048:800")
    out = a.out or tempfile.mkdtemp(prefix='ada_resolution_')
    cands = {'target widths': (0.8, 0.6, 0.5, 0.4), 'one width 0.55': (0.55,) * 4, f'ADA widths {ada_widths()}': ada_widths(),
             'base widths 0.5': (0.5,) * 4}
    res = heldout_resolution(cands, sizes=sizes, reps=a.reps)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'resolution.json'), 'w') as f: json.dump(dict(reps=a.reps, candidates=cands, scores=res), f, indent=1)
    lines = [f'summed sliced W1 of the three projections against ν, mean ± std over {a.reps} draws (target pair weights throughout)', '',
             '| generated vs measured samples | ' + ' | '.join(cands) + ' |', '|---|' + '---|' * len(cands)]
    for size, row in res.items():
        lines.append(f'| {size} | ' + ' | '.join(f"{v['mean']:.3f} ± {v['std']:.3f}" for v in row.values()) + ' |')
    text = '\n'.join(lines)
    with open(os.path.join(out, 'resolution.md'), 'w') as f: f.write(text + '\n')
    print(text)

if __name__ == '__main__':
    main()
