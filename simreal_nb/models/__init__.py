"Surrogates that take any subset of fields: the field-attention net, FNO, U-Net and MORPH, built by name."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    factory='make_model save_model load_model n_params CAPACITIES ARCHS',
    morph='MORPH load_morph morph'))
