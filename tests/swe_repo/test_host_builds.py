"""Nothing a task's requirements name is built on the host (issue 37).

A local sdist whose setup.py writes a file on the host stands in for any
published sdist: pip is offered it (PIP_FIND_LINKS, read by the real pip
the factory and the venv builder run, as an unprivileged user) and must
never build it, neither to resolve the pins nor to install the test venv.
pytest itself still comes from PyPI, so these tests need the package index."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgym.envs.swe_repo.factory import FactoryError, pin_requirements
from sandgym.envs.swe_repo.requirements import check_plain_requirement
from sandgym.specs.swe_repo import TestEnvironment as Environment
from sandgym.verifiers.swe_repo.sources import RepoError
from sandgym.verifiers.swe_repo.sources import test_venv as build_test_venv

from .wheel_craft import make_wheel, public_folder

NAME = "sandgymprobeevil"


@pytest.fixture
def hostile_sdist(tmp_path, monkeypatch) -> Iterator[Path]:
    """A find-links folder offering NAME 1.0 as an sdist whose build writes
    the returned path; the venv cache in tmp_path."""
    with public_folder() as links:  # readable by the unprivileged user pip runs as
        out = links / "out"
        out.mkdir()
        out.chmod(0o1777)  # a build as any user could leave the marker
        marker = out / "BUILT-ON-THE-HOST"
        src = tmp_path / f"{NAME}-1.0"
        src.mkdir()
        (src / "setup.py").write_text(
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
            f"from setuptools import setup\nsetup(name={NAME!r}, version='1.0')\n"
        )
        with tarfile.open(links / f"{NAME}-1.0.tar.gz", "w:gz") as tar:
            tar.add(src, arcname=src.name)
        monkeypatch.setenv("PIP_FIND_LINKS", str(links))
        monkeypatch.setenv("SANDGYM_CACHE", str(tmp_path / "cache"))
        yield marker


def test_resolving_pins_never_builds_an_sdist(hostile_sdist):
    with pytest.raises(FactoryError) as err:
        pin_requirements([f"{NAME}==1.0"])
    assert NAME in str(err.value)
    assert not hostile_sdist.exists()


def test_the_test_venv_never_builds_an_sdist(hostile_sdist, tmp_path):
    with pytest.raises(RepoError) as err:
        build_test_venv(Environment(requirements=[f"{NAME}==1.0"]))
    assert "wheels only" in str(err.value)
    assert not hostile_sdist.exists()
    assert not list((tmp_path / "cache" / "venvs").glob("*/.complete"))  # no venv left as if built


@pytest.mark.parametrize(
    "req",
    [
        "--index-url=http://127.0.0.1:9/simple",
        "-e .",
        "-r /etc/passwd",
        f"{NAME} @ https://127.0.0.1:9/{NAME}-1.0.tar.gz",
        "git+https://127.0.0.1:9/x.git",
        "./local/path",
        "/abs/pkg-1.0.tar.gz",
        "pkg.zip",
        "pkg==1.0 --hash=sha256:00",
        "pkg==1.0; python_version > '3' @ x",
    ],
)
def test_requirements_that_name_urls_paths_or_options_are_refused_before_pip(req, hostile_sdist):
    with pytest.raises(FactoryError) as err:
        pin_requirements([req])
    message = str(err.value)
    assert repr(req) in message and "\n" not in message
    with pytest.raises(ValueError):
        Environment(requirements=[req])
    assert not hostile_sdist.exists()


@pytest.mark.parametrize(
    "req",
    ["toolz", "toolz==1.0.0", "Foo_Bar[x, y]>=1.2,<2", "attrs (>=19.2)", 'six; python_version < "3.12"', "a.b-c~=1.0"],
)
def test_plain_requirements_pass(req):
    assert check_plain_requirement(req, "here") == req


def test_a_requirement_with_only_an_sdist_is_one_line_offline(hostile_sdist, monkeypatch):
    """Off the index (the local sdist and a stand-in pytest offered): the same refusals, each in one line."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    make_wheel(hostile_sdist.parent.parent, "pytest", {"pytest/__init__.py": b""}, version="8.3.4")
    with pytest.raises(RepoError) as err:
        build_test_venv(Environment(requirements=[f"{NAME}==1.0"]))
    message = str(err.value)
    assert "\n" not in message and "wheels only" in message and f"{NAME}==1.0" in message, message
    with pytest.raises(FactoryError) as err2:
        pin_requirements([f"{NAME}==1.0"])
    assert "\n" not in str(err2.value) and NAME in str(err2.value), err2.value
    assert not hostile_sdist.exists()
