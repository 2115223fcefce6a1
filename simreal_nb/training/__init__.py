"The protocols as values, the update step that applies one, and the trainer that runs it to convergence."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    protocols='get_protocol Protocol SimOnly ExpOnly SimToExp Joint Pooled PROTOCOLS',
    trainer='train TrainConfig Trainer',
    history='History',
    step='Stepper'))
