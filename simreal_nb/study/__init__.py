"The experiment: scoring on both held-out domains, the grid of cells, run folders, executors, tuning."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    evaluation='evaluate rollout',
    grid='Grid GridConfig Cell PRESETS',
    experiment='run_experiment',
    tuning='tune',
    rundir='collect_results read_manifest'))
