"The parts: each names its public surface in its `__init__`, and importing a part loads nothing until a name is used."
import importlib, subprocess, sys
import pytest

PARTS = ['core', 'twins', 'data', 'models', 'training', 'study', 'reading', 'checks', 'ada', 'face']


@pytest.mark.parametrize('part', PARTS)
def test_every_public_name_resolves(part):
    p = importlib.import_module(f'simreal_nb.{part}')
    assert p.__doc__ and p.__all__ == sorted(p.__all__)
    for name in p.__all__:
        mod = getattr(getattr(p, name), '__module__', None)  # constants have none
        assert mod is None or mod.startswith(f'simreal_nb.{part}.'), (name, mod)
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"): p.not_a_name


def test_importing_parts_loads_nothing_until_used():
    code = ("import sys, simreal_nb.training, simreal_nb.study, simreal_nb.models, simreal_nb.reading; "
            "print(sorted(m for m in ('torch', 'xarray', 'simreal_nb.training.trainer') if m in sys.modules)); "
            "from simreal_nb.training import Joint; print(Joint(0.5).name, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert r.stdout.split('\n')[:2] == ['[]', 'joint True']


def test_the_name_morph_users_were_given():
    import simreal_nb.morph, simreal_nb.models.morph
    assert simreal_nb.morph.load_morph is simreal_nb.models.morph.load_morph
