"Reading results: balanced metrics and paired comparisons, the report, the λ trade-off and its inspector."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    analysis='balanced lambda_sweep mean_ci headline joint_reduction',
    report='report_text write_report',
    tradeoff='pareto_plot winners',
    inspector='lambda_inspector'))
