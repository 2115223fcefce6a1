"The learning-curve law: fitting a·n^(−b) + c to a few counts, its bootstrap over seeds, and the experiments a target needs."
import numpy as np
import numpy.testing as npt
import pytest
from simreal_nb.core.errors import InputError
from simreal_nb.reading.curves import (CurveInputError, Law, bootstrap_laws, fit_law, floor_pinned, holdout_check,
                                       law_interval, matching_n, saturating_law, trajectories_needed)

TRUTH = Law(0.05, 0.8, 0.02)
COUNTS = np.array([1, 2, 4, 8])


def noisy_seeds(law, counts, seeds=6, noise=0.05, seed=0):
    "[seeds, len(counts)] errors: `law` times relative noise, a share of it shared by a seed across counts."
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((seeds, 1))
    own = rng.standard_normal((seeds, len(counts)))
    return law(counts) * (1 + noise * (0.5 * shared + own))


def test_the_law_and_its_call():
    npt.assert_allclose(saturating_law([1, 2, 4], 0.04, 1.0, 0.01), [0.05, 0.03, 0.02])
    npt.assert_allclose(TRUTH(COUNTS), saturating_law(COUNTS, 0.05, 0.8, 0.02))
    assert repr(Law(0.028, 1.0, 0.029)) == 'Law(a=0.028, b=1, c=0.029)'


def test_a_known_law_is_recovered():
    n = np.array([1, 2, 4, 8, 16, 32])
    rng = np.random.default_rng(3)
    law = fit_law(n, TRUTH(n) * (1 + 0.01 * rng.standard_normal(n.size)))
    npt.assert_allclose([law.a, law.b, law.c], [TRUTH.a, TRUTH.b, TRUTH.c], rtol=0.15)
    npt.assert_allclose(law(n), TRUTH(n), rtol=0.02)
    assert law.c <= law.c_max


def test_three_points_are_passed_through_and_repeats_are_allowed():
    n = np.array([1., 2., 4.])
    npt.assert_allclose(fit_law(n, TRUTH(n))(n), TRUTH(n), rtol=1e-6)
    reps = np.repeat(n, 3)  # one error per seed, three seeds
    npt.assert_allclose(fit_law(reps, TRUTH(reps))(n), TRUTH(n), rtol=1e-6)


def test_the_fit_respects_its_bounds():
    rising = fit_law([1, 2, 4], [0.03, 0.04, 0.05])  # errors that grow: a flat law at most the least error
    assert rising.a >= 0 and 0.05 <= rising.b <= 3 and 0 <= rising.c <= 0.03
    cliff = fit_law([1, 2, 4, 8], [1.0, 0.01, 0.01, 0.01])
    assert cliff.b <= 3 and cliff.c <= 0.01


def test_the_bootstrap_interval_covers_the_truth_at_a_held_out_count():
    err = noisy_seeds(TRUTH, COUNTS, seed=1)
    laws = bootstrap_laws(COUNTS, err, draws=300, seed=0)
    assert len(laws) == 300 and all(isinstance(l, Law) for l in laws)
    lo, mid, hi = law_interval(laws, 16)
    assert lo <= TRUTH(16) <= hi and lo < mid < hi
    lo, mid, hi = law_interval(laws, [1, 16])
    assert lo.shape == (2,) and (lo < mid).all() and (mid < hi).all()


def test_the_same_seed_draws_the_same_resamples():
    err = noisy_seeds(TRUTH, COUNTS, seed=2)
    a, b = bootstrap_laws(COUNTS, err, draws=20, seed=5), bootstrap_laws(COUNTS, err, draws=20, seed=5)
    assert a == b  # frozen dataclasses compare by value
    assert bootstrap_laws(COUNTS, err, draws=20, seed=6) != a


def test_holdout_check_on_a_law_that_holds():
    err = noisy_seeds(TRUTH, np.array([1, 2, 4, 8, 16]), seed=4)
    h = holdout_check([1, 2, 4, 8, 16], err, held_out=16, draws=200)
    lo, mid, hi = h['predicted']
    assert lo <= TRUTH(16) <= hi and h['in_band'] and h['miss_holds_zero']
    assert h['miss'][0] <= 0 <= h['miss'][1] and np.isclose(h['measured'], err[:, -1].mean())


def test_the_floor_is_pinned_only_where_the_curve_has_bent():
    n = np.array([1, 2, 4, 8, 16, 32, 64])
    flat = bootstrap_laws(n, noisy_seeds(TRUTH, n, noise=0.01, seed=7), draws=200)
    assert floor_pinned(flat)
    steep = Law(0.05, 0.5, 0.0)  # still falling as a power law: no floor in sight
    laws = bootstrap_laws(COUNTS, noisy_seeds(steep, COUNTS, noise=0.05, seed=8), draws=200)
    assert not floor_pinned(laws)


def test_trajectories_needed_inverts_the_law():
    law = Law(0.03, 1.0, 0.02)
    npt.assert_allclose(trajectories_needed([law], law(5)), (5, 5, 5))
    lo, mid, hi = trajectories_needed([law], 0.02)  # exactly the floor
    assert lo == mid == hi == np.inf
    assert trajectories_needed([law], 0.015) == (np.inf,) * 3  # below the floor: not reachable


def test_targets_below_the_floor_and_above_law_one():
    n = np.array([1, 2, 4, 8, 16, 32])
    laws = bootstrap_laws(n, noisy_seeds(TRUTH, n, noise=0.02, seed=9), draws=200)
    floors = np.array([l.c for l in laws])
    assert floors.min() > 0
    assert trajectories_needed(laws, 0.9 * floors.min()) == (np.inf,) * 3  # not reachable: the floor is in the way
    lo, mid, hi = trajectories_needed(laws, 1.1 * max(l(1) for l in laws))
    assert 0 < lo <= mid <= hi <= 1  # one experiment is already enough


def test_matching_n_takes_paired_targets():
    laws = bootstrap_laws(COUNTS, noisy_seeds(TRUTH, COUNTS, seed=10), draws=100)
    npt.assert_allclose(matching_n(laws, [l(3) for l in laws]), (3, 3, 3), rtol=1e-9)
    assert matching_n(laws, 0.03) == trajectories_needed(laws, 0.03)


@pytest.mark.parametrize('n, err, match', [
    ([1, 2, 4], [0.05, 0.04], r'n has shape \(3,\) and the errors \(2,\); expected a 1-D n and one error per count'),
    ([0, 2, 4], [0.05, 0.04, 0.03], r'n holds \[0.0\]; expected positive finite counts'),
    ([1, -2, 4], [0.05, 0.04, 0.03], r'n holds \[-2.0\]; expected positive finite counts'),
    ([1, 2, 4], [0.05, np.nan, 0.03], r'1 value\(s\) that are NaN, infinite or not positive .*expected positive finite errors'),
    ([1, 2, 4], [0.05, 0.0, 0.03], r'not positive'),
    ([1, 2, 2], [0.05, 0.04, 0.03], r'n has 2 distinct count\(s\) \[1.0, 2.0\]; expected at least 3 distinct counts'),
    ([[1, 2, 4]], [0.05, 0.04, 0.03], r'expected a 1-D n'),
])
def test_bad_input_to_fit_law(n, err, match):
    with pytest.raises(CurveInputError, match=match): fit_law(n, err)


def test_bad_input_elsewhere():
    assert issubclass(CurveInputError, InputError) and issubclass(CurveInputError, ValueError)
    err = noisy_seeds(TRUTH, COUNTS)
    with pytest.raises(CurveInputError, match=r'the errors \(6, 3\); expected'): bootstrap_laws(COUNTS, err[:, :3])
    with pytest.raises(CurveInputError, match='1 replicate seed'): bootstrap_laws(COUNTS, err[:1], draws=10)
    with pytest.raises(CurveInputError, match=r'expected \[seeds, 4\]'): bootstrap_laws(COUNTS, err[None], draws=10)
    with pytest.raises(CurveInputError, match='draws=0'): bootstrap_laws(COUNTS, err, draws=0)
    with pytest.raises(CurveInputError, match='NaN'): bootstrap_laws(COUNTS, np.where(err > err.max() - 1e-12, np.nan, err))
    laws = bootstrap_laws(COUNTS, err, draws=10)
    with pytest.raises(CurveInputError, match='level=1.5'): law_interval(laws, 8, level=1.5)
    with pytest.raises(CurveInputError, match=r'target has shape \(3,\); expected one finite error, or one per law \(10\)'):
        trajectories_needed(laws, [0.03, 0.03, 0.03])
    with pytest.raises(CurveInputError, match='no bootstrap laws'): law_interval([], 8)
    with pytest.raises(CurveInputError, match='held_out=5'): holdout_check(COUNTS, err, held_out=5, draws=10)
