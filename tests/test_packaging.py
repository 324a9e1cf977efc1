"""The project installs under one import name and shadows nothing else in the environment."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _import_in_clean_cwd(module: str, tmp_path) -> subprocess.CompletedProcess[str]:
    # The repository root must not be on sys.path: run from an empty directory, with -I (isolated).
    return subprocess.run(
        [sys.executable, "-I", "-c", f"import {module}"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("name", ["indexer", "server", "migrations"])
def test_folders_do_not_install_as_top_level_packages(name: str, tmp_path) -> None:
    result = _import_in_clean_cwd(name, tmp_path)
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr


@pytest.mark.parametrize("name", ["ccweb_index.indexer.db", "ccweb_index.server.cli", "ccweb_index.migrations"])
def test_code_installs_under_ccweb_index(name: str, tmp_path) -> None:
    result = _import_in_clean_cwd(name, tmp_path)
    assert result.returncode == 0, result.stderr


def test_python_dash_m_runs_the_command(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-I", "-m", "ccweb_index", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "serve" in result.stdout and "build" in result.stdout
