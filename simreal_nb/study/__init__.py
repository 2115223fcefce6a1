"The experiment: scoring on both held-out domains, the grid of cells, run folders, executors, tuning."
from .. import _surface

__all__, __getattr__ = _surface(__name__, dict(
    evaluation='evaluate rollout',
    grid='Grid GridConfig Cell PRESETS',
    experiment='run_experiment',
    tuning='tune',
    rundir='collect_results read_manifest'))
