"""The language table and request checks of `/run_code`, with no sandbox:
paths stay inside the working folder, files are base64, every language's
commands are argument lists of the image's toolchains, and `sandgym serve`
refuses an unknown API by name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sandgym.fusion.languages import LANGUAGES, RUNNABLE, language
from sandgym.fusion.run_code import RunCodeError, RunCodeRequest, request_files, workspace_path
from sandgym.fusion.samples import HELLO


def test_every_language_has_a_hello_world_and_twelve_are_served():
    assert set(HELLO) == set(LANGUAGES)
    assert len(LANGUAGES) >= 12


def test_an_unknown_language_names_the_supported_ones():
    with pytest.raises(ValueError, match="supported: python, cpp"):
        language("cobol")


@pytest.mark.parametrize("path", ["", ".", "..", "../x", "a/../../x", "/etc/passwd", "a\0b"])
def test_paths_outside_the_working_folder_are_refused(path):
    with pytest.raises(RunCodeError, match="relative path inside the working folder"):
        workspace_path("files", path)


def test_paths_inside_are_normalised():
    assert workspace_path("files", "a/./b/../c.txt") == "a/c.txt"


def test_the_source_wins_over_a_file_of_the_same_name():
    req = RunCodeRequest(language="python", code="print(1)", files={"main.py": "eA==", "data.txt": "eA==", "x": None})
    assert request_files(req, language("python")) == {"main.py": b"print(1)", "data.txt": b"x"}


def test_files_that_are_not_base64_are_refused_by_name():
    req = RunCodeRequest(language="python", code="", files={"data.txt": "***"})
    with pytest.raises(RunCodeError, match=r"files\['data.txt'\]: not base64"):
        request_files(req, language("python"))


def test_serve_refuses_an_unknown_api():
    done = subprocess.run(
        [sys.executable, "-m", "sandgym", "serve", "--api", "grpc"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "grpc" in done.stderr and "sandbox-fusion" in done.stderr


def test_test_modes_are_served_but_are_not_stdio_languages():
    assert language("pytest").name == "pytest" and "pytest" not in LANGUAGES
    assert {"pytest", "go_test", "junit", "jest"} <= set(RUNNABLE)


@pytest.mark.parametrize(
    "code, source",
    [
        ("public class AddTest {\n}\n", "AddTest.java"),
        ("import x;\n\npublic final class Checks {}\n", "Checks.java"),
        ("class Hidden {}\n", "Main.java"),  # no public class: SandboxFusion's default name
        ("public class ../../etc/x {}\n", "Main.java"),  # never a path
        ("// public class Commented\npublic class Real {}\n", "Real.java"),
    ],
)
def test_junit_files_are_named_after_their_public_class(code, source):
    assert language("junit").source_for(code) == source
