"""Built-in tasks' records (gradflow/_kit/_task.py): the seeded directions and teachers, a task looked up by name,
and how a sweep's TOML writes each option."""

import numpy as np
import pytest

from gradflow._kit._task import (
    BOOLEAN,
    NON_NEGATIVE,
    POSITIVE,
    SINGULAR_VALUES,
    SPARSITY,
    SPARSITY_PAIR,
    Builtin,
    check_seed,
    gaussian_init,
    sparse_gaussian,
    task_named,
)


def test_a_task_by_name_or_the_choices():
    tasks = {"b": Builtin(build=dict, sizes=("n",)), "a": Builtin(build=dict, sizes=())}
    assert task_named(tasks, "b") is tasks["b"]
    with pytest.raises(ValueError, match=r"^unknown model 'c'; choose one of \['a', 'b'\]\.$"):
        task_named(tasks, "c")


def test_seeded_directions_and_sparse_teachers():
    u0, v0 = gaussian_init(5, 3)
    again = gaussian_init(5, 3)
    np.testing.assert_array_equal(u0, again[0])
    np.testing.assert_array_equal(v0, again[1])
    assert u0.shape == v0.shape == (5,) and not np.array_equal(u0, v0)
    assert not np.array_equal(u0, gaussian_init(5, 4)[0])
    teacher = sparse_gaussian(np.random.default_rng(0), 6, 2, "teacher_nonzero")
    assert teacher.shape == (6,) and np.count_nonzero(teacher) == 2
    assert np.count_nonzero(sparse_gaussian(np.random.default_rng(0), 6, None, "teacher_nonzero")) == 6
    for bad in (7, -1, True, 1.5):
        with pytest.raises(ValueError, match=r"^teacher_nonzero: .* must lie in \[0, 6\]"):
            sparse_gaussian(np.random.default_rng(0), 6, bad, "teacher_nonzero")
    assert check_seed(0) == 0
    with pytest.raises(ValueError, match="^seed must be a non-negative integer; got -1"):
        check_seed(-1)


@pytest.mark.parametrize(
    "option, given, read",
    [
        (POSITIVE, 3, 3),
        (NON_NEGATIVE, 0, 0.0),
        (BOOLEAN, True, True),
        (SPARSITY, "dense", None),
        (SPARSITY, 2, 2),
        (SPARSITY_PAIR, "dense", (None, None)),
        (SPARSITY_PAIR, [1, "dense"], (1, None)),
        (SINGULAR_VALUES, [1, 0.5], (1.0, 0.5)),
    ],
)
def test_sweep_options_read_the_toml_spelling(option, given, read):
    assert option.check(given) == read


@pytest.mark.parametrize(
    "option, given",
    [
        (POSITIVE, 0),
        (POSITIVE, True),
        (NON_NEGATIVE, -1.0),
        (NON_NEGATIVE, float("inf")),
        (BOOLEAN, 1),
        (SPARSITY, -1),
        (SPARSITY_PAIR, [1, 2, 3]),
        (SINGULAR_VALUES, []),
        (SINGULAR_VALUES, [1.0, 0.0]),
    ],
)
def test_sweep_options_refuse_other_values(option, given):
    with pytest.raises(ValueError):
        option.check(given)


def test_a_list_of_lists_is_an_axis_of_the_grid():
    assert SPARSITY_PAIR.is_single([1, 2]) and not SPARSITY_PAIR.is_single([[1, 2], [3, 4]])
    assert SINGULAR_VALUES.is_single([1.0, 0.5]) and not SINGULAR_VALUES.is_single([[1.0], [0.5]])
    assert POSITIVE.is_single(3) and not POSITIVE.is_single([3, 4])
