"""What ``pip install .`` installs: the ``npu_data`` package only (its bench suite inside it,
no top-level ``benches``), with ``py.typed`` so users' type checkers read its annotations.
setuptools itself reads pyproject.toml and finds the packages, as a build does."""

from __future__ import annotations

from pathlib import Path

from setuptools.config.pyprojecttoml import read_configuration

ROOT = Path(__file__).resolve().parents[1]


def _config() -> dict:
    return read_configuration(ROOT / "pyproject.toml")["tool"]["setuptools"]


def test_only_npu_data_is_installed() -> None:
    packages = _config()["packages"]  # the [tool.setuptools.packages.find] result
    assert "npu_data" in packages and "npu_data.bench" in packages
    assert {p.split(".")[0] for p in packages} == {"npu_data"}, sorted(packages)


def test_py_typed_ships() -> None:
    assert (ROOT / "npu_data" / "py.typed").is_file()
    assert "py.typed" in _config()["package-data"]["npu_data"]
