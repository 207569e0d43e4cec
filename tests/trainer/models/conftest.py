"""A real-model run's checkpoint holds its weights and AdamW moments (about 1.6 GB for the 135M
model): each test's directory is emptied when it ends, so 20 runs do not fill the disk."""

import shutil

import pytest


@pytest.fixture(autouse=True)
def _free_run_dirs(tmp_path):
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)
