"The contract and what everything stands on: errors, the data schema, crash-safe files, array metrics, progress."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    errors='SimrealError InputError',
    schema='FIELDS DOMAINS validate fields_of never_train reference_scales',
    store='atomic_write write_dataset read_dataset save_torch load_torch cache_folder',
    metrics='rmse rel_l2 frmse score_fields',
    progress='Bar'))
