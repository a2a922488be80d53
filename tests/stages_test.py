"""bench.stages' bounds as arithmetic: the packing bound of hand-solved cases."""

import pytest

from bench import stages


def test_actors_cheap_enough_leave_the_learners_fastest_form_as_the_bound():
    # The learner's fastest form trains 3000 steps/s on 1.8 cores; at 3000 / uses = 1500 agent
    # steps/s the actors (0.1 CPU ms per agent step) need 0.15 cores: 1.95 of 2 in all.
    forms = [(2000, 0.5), (3000, 0.6)]
    assert stages.packing_bound(0.1, forms, 2.0, 2) == pytest.approx(1500)


def test_below_the_cheapest_forms_rate_the_cores_bound_at_its_cost():
    # R x 0.5 ms (actors) + 2 R x 1 ms (learner, 1 form, 1000/s on 1 core) <= 1 core.
    assert stages.packing_bound(0.5, [(1000, 1.0)], 2.0, 1) == pytest.approx(400, rel=1e-3)


def test_between_two_forms_the_learner_alternates_them_at_interpolated_cores():
    # Forms: 1000 trained steps/s on 1 core, 2000 on 3; uses 2, 2 cores. Learner-only: c(2R) =
    # 1 + 2 (2R - 1000) / 1000 = 2 -> R = 750; with actors at 1 ms per agent step:
    # R / 1000 + 1 + (4R - 2000) / 1000 = 2 -> R = 600 (2R = 1200, between the forms).
    forms = [(2000, 1.5), (1000, 1.0)]  # any order
    assert stages.packing_bound(0.0, forms, 2.0, 2) == pytest.approx(750, rel=1e-3)
    assert stages.packing_bound(1.0, forms, 2.0, 2) == pytest.approx(600, rel=1e-3)
    # The limit's arithmetic (cores / (actors + uses x the cheapest learner)) would say 667:
    # the learner's cheapest form cannot train 2 x 667 steps/s.
    assert stages.packing_bound(1.0, forms, 2.0, 2) < 2e3 / (1.0 + 2.0 * 1.0)
