"""What the families' greedy limits share, piece by piece: the choice of the next coordinate (eq. 9), the stages
of a path in τ, the perturbed starts of Assumption 4.4, how a phase (B) failed, the ε → 0 and spread checks, and
the checks of a stage's point (the loop over stages: each family's tests/*/test_greedy.py)."""

import numpy as np
import pytest

from gradflow._kit._greedy import (
    AbstractGreedyPath,
    GreedyTolerances,
    PhaseB,
    Stop,
    check_finite,
    check_minimiser,
    choose_coordinate,
    first_failure,
    limit_checks,
    perturbed_starts,
    phase_b_failed,
    stage_index,
)


def test_the_lowest_index_among_the_tied_wins_and_the_runner_up_is_the_next_best():
    choice = choose_coordinate(np.array([3.0, 1.0 + 1e-12, 1.0, 2.0]), 1e-9)
    assert (choice.coordinate, choice.runner_up, choice.tied.tolist()) == (1, 2, [2])
    assert choice.gap == pytest.approx(-1e-12, abs=1e-15)  # tied: the runner-up is as good, to rounding
    choice = choose_coordinate(np.array([3.0, 1.0, np.inf]), 1e-9)
    assert (choice.coordinate, choice.runner_up, choice.gap, choice.tied.size) == (1, 0, 2.0, 0)
    alone = choose_coordinate(np.array([np.inf, 0.5, np.inf]), 1e-9)
    assert (alone.coordinate, alone.runner_up, alone.gap) == (1, -1, np.inf)


class _Path(AbstractGreedyPath):
    falls: np.ndarray

    @property
    def speeds(self):
        return self.falls


def _path(times, b, loss, speeds):
    zeros = np.zeros(len(times))
    return _Path(
        times=np.array(times),
        b=np.array(b),
        loss=np.array(loss),
        final_delta=zeros,
        delta_gap=zeros,
        runner_up=zeros,
        hessian_min_eig=zeros,
        stationarity=zeros,
        epsilon_discrepancy=zeros,
        perturbation_spread=zeros,
        assumptions_ok=np.ones((len(times), 3), bool),
        result="successful",
        message="",
        warnings=(),
        falls=np.array(speeds),
    )


def test_a_paths_stage_loss_and_log_scales_at_any_time():
    """Stage k holds on [T_k, T_{k+1}): the loss is a staircase and b falls at the stage's speeds from b^k."""
    path = _path([0.0, 1.0, 3.0], [[1.0, 1.0], [0.0, 0.5], [0.2, 0.0]], [4.0, 1.0, 0.0], [[1, 0.5], [0, 0.25], [0, 0]])
    tau = np.array([0.0, 0.5, 1.0, 2.9, 3.0, 10.0])
    assert path.num_stages == 2 and path.stage_at(tau).tolist() == [0, 0, 1, 1, 2, 2]
    assert path.loss_at(tau).tolist() == [4.0, 4.0, 1.0, 1.0, 0.0, 0.0]
    np.testing.assert_allclose(path.b_at(np.array([0.5, 2.0, 5.0])), [[0.5, 0.75], [0.0, 0.25], [0.2, 0.0]])
    assert path.b_at(2.0).shape == (2,) and stage_index(np.array([0.0, 1.0]), [[0.5, 1.5]]).tolist() == [[0, 1]]
    for bad in (-1e-9, np.nan):
        with pytest.raises(ValueError, match="rescaled time τ must be non-negative"):
            path.stage_at(bad)


def test_perturbed_starts_keep_the_support_and_the_signs():
    """``y ⊙ (1 + size·z)``, z clipped to [−3, 3]: within 3·size of the start, zero off the support."""
    start, mask = np.array([2.0, -1.0, 0.0, 5.0]), np.array([True, True, False, False])
    starts = perturbed_starts(start, mask, 500, 0.3, np.random.default_rng(0))
    assert starts.shape == (500, 4) and np.all(starts[:, 2:] == 0.0)
    relative = starts[:, :2] / start[:2] - 1
    assert np.all(np.abs(relative) <= 0.9 + 1e-12) and np.abs(relative).max() > 0.5
    assert np.all(np.sign(starts[:, :2]) == np.sign(start[:2]))


def test_a_failed_phase_b_names_the_first_epsilon_and_why():
    tol = GreedyTolerances(epsilons=(1e-5, 1e-3, 1e-4))  # sorted: 1e-3, 1e-4, 1e-5
    assert first_failure([0, PhaseB.NOT_STEADY, PhaseB.MAX_STEPS], tol) == (PhaseB.NOT_STEADY, 1e-4)
    assert first_failure([0, 0, 0], tol) == (PhaseB.STATIONARY, 1e-5)
    end = phase_b_failed(2, "β[3]", "stationary point", PhaseB.MAX_STEPS, 1e-4, np.ones(2), tol, ["w"])
    assert end.message == (
        "phase (B) of stage 2 (β[3]) did not reach a stationary point: from ε = 0.0001, the flow took max_steps = "
        "2048 solver steps without becoming steady"
    )
    assert (end.result, end.ok, end.warnings) == ("phase_b_failed", (False, False), ("w",))
    words = {PhaseB.NEWTON_FAILED: "Newton's method failed after {newton_steps} steps"}
    end = phase_b_failed(1, "W", "critical point", PhaseB.NEWTON_FAILED, 1e-3, None, tol, [], words)
    assert end.message.endswith("from ε = 0.001, Newton's method failed after 300 steps") and end.ok == (True, False)


def test_the_epsilon_limit_and_the_spread_are_checked_against_their_tolerances():
    tol = GreedyTolerances()
    assert limit_checks(1, 1e-7, 1e-7, tol, ends="endpoints", support="supports") == (True, ())
    ok, messages = limit_checks(3, 2e-6, 5e-6, tol, ends="endpoints", support="supports")
    assert not ok and messages == (
        "the ε → 0 limit of eq. (11) is not reached at stage 3: the endpoints from ε = 0.001 and 1e-05 differ by "
        "2e-06 (relative; inf: different supports).",
        "Assumption 4.4 fails at stage 3: perturbing phase (B)'s start moves its endpoint by 5e-06 (relative).",
    )


def test_a_stage_with_a_non_finite_gradient_cannot_start_the_path_and_ends_it_later():
    names = [f"β[{i}]" for i in range(10)]
    gradients = [np.array(np.nan if i else 1.0) for i in range(10)]
    assert check_finite(0, 1.0, [np.ones(1)] * 10, names, symbol="g") is None
    with pytest.raises(ValueError, match=r"^the greedy limit cannot start: at θ⁰ = 0 \(zero weights\), the loss is"):
        check_finite(0, np.inf, [np.ones(1)] * 10, names, symbol="g")
    with pytest.raises(Stop) as stop:
        check_finite(2, 1.0, gradients, names, symbol="g")
    assert stop.value.result == "non_finite" and str(stop.value).startswith(
        "stage 2: at θ^2, where phase (B) ended, g = −∇L is NaN or infinite in β[1], β[2], β[3], β[4], β[5], β[6], "
        "β[7], β[8] and 1 more: "
    )


def test_a_loss_falling_along_the_ray_has_no_minimiser():
    """The loss at s·β for s = 1.01, 2, 4, 8 below that at s = 1, each no higher than the last: no minimiser."""
    assert check_minimiser(1, 1.0, lambda s: (s - 1) ** 2 + 1.0, weights="β", support="support {β[0]}") is None
    with pytest.raises(Stop) as stop:
        check_minimiser(1, 1.0, lambda s: 1 / s, weights="β", support="support {β[0]}")
    assert stop.value.result == "no_minimiser" and str(stop.value).startswith(
        "no minimiser at stage 1: on the support {β[0]} the loss falls along the ray β ↦ s·β (L = 1, 0.99, 0.5, "
        "0.25, 0.125 at s = 1, 1.01, 2, 4, 8)"
    )
