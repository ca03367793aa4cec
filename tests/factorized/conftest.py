"""The factorised family's shared fixture: the greedy low-rank limit of two matrix factorisations (two_mf.py), computed
once for the tests of the greedy limit, the path and the report."""

import warnings

import pytest
from two_mf import two_mf_model

import gradflow


@pytest.fixture(scope="session")
def mf_path():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no assumption fails on a matrix factorisation with distinct σ
        return gradflow.greedy_limit(two_mf_model())
