"Checks before a model meets the rig: physics stress tests, causal consistency, rig fingerprints, stream health."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    physics='check_model physics_check',
    causal='causal_consistency GrangerMonitor',
    rigs='make_rigs fingerprint',
    health='health_monitor inject_fault'))
