"""The command-line tests' fixtures."""

import pytest

OWN = "from gradflow import models\n\n\ndef make():\n    return models.diagonal_linear(n=12, p=3, seed=1)\n\n\ndef bad():\n    return 3\n"


@pytest.fixture
def own_task_module(tmp_path, monkeypatch):
    """A working folder holding a user's task module, ``own_task_module.py`` (``--model own_task_module:make``; its
    ``bad`` returns no task); returns the folder."""
    (tmp_path / "own_task_module.py").write_text(OWN)
    monkeypatch.chdir(tmp_path)
    return tmp_path
