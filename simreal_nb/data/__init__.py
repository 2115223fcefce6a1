"Two domains on one grid: regridding, normalisation, splits, windows, clocks, and importers of lab data."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    align='regrid align_domains Normalizer split_trajs',
    domains='make_domain_data DomainData WindowDataset',
    clocks='align_clocks',
    realpdebench='import_realpdebench load_realpdebench',
    piv='import_piv read_piv'))
