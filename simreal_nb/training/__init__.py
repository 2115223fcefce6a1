"Protocols as values, the batches they draw, the update step that applies one, the trainer that runs it to convergence."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    protocols='get_protocol Protocol SimOnly ExpOnly SimToExp Joint Pooled PROTOCOLS',
    batches='masked_mse fetch_batch check_data',
    trainer='train TrainConfig Trainer',
    history='History',
    step='Stepper'))
