"The package's face: the `simreal` command line, its flags, the docs builder and the speed benchmarks."
from .. import part_surface

__all__, __getattr__ = part_surface(__name__, dict(
    cli='main',
    docs='build_docs',
    bench='bench_models bench_joint bench_tta'))
