"Generative models aligned to partial experimental observables: the flow, ADA and moment matching, their benchmarks."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    flow='Flow train_flow',
    fit='fit_ada fit_ea AlignConfig',
    adamog='run_mog',
    adabench='run_chain run_twins'))
