"A run's progress comes back from the pool's workers while their cells train, and a run ends with a short summary."
import io
from dataclasses import replace
from simreal_nb.study.grid import PRESETS, Grid
from simreal_nb.study.executors import map_cells, local_pool, stop_pool, progress_path
from simreal_nb.core.progress import Bar, read_progress


def test_bar_advances_before_the_first_cell_ends(tmp_path):
    cfg = replace(PRESETS['test'].config, steps=60, eval_every=20, ckpt_every=20)  # a few seconds of training per cell
    cells = [c for c in Grid(['kolmogorov'], ['S'], ['joint', 'sim_only']).cells(cfg.arch) if c.protocol.name in ('joint', 'sim_only')]
    bar, seen = Bar(1.0, file=io.StringIO()), []
    pool = local_pool(1)  # another process: its progress comes back through the cells' progress files
    try:
        for r in map_cells(cells, cfg, tmp_path, 'cpu', pool, bar=bar, poll=0.2):
            seen.append((r['key'], list(bar.trace)))
    finally: stop_pool(pool)
    assert [k for k, _ in seen] == [c.key for c in cells]  # heaviest first: Joint, then Sim-only
    before_end = [d for _, d, _ in seen[0][1][:-1]]  # every reading before the first cell's end
    assert max(before_end) > 0, 'the bar did not move before the first cell ended'
    assert bar.done == bar.total and bar.eta == 0
    assert read_progress(progress_path(tmp_path, cells[0])) == dict(updates=60, bounds=[0, 60], made=[60])
    lines = bar.file.getvalue().splitlines()
    assert lines[-1].startswith('|' + '█' * 24 + '| 100%') and lines[-1].endswith('2/2 cells')
