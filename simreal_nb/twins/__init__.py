"The embedded twin systems: each a simulation and a synthetic experiment of one flow, from two solvers."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    systems='SYSTEMS list_systems make_twins load_twins write_twins plot_twins',
    twindata='measure traj_params'))
