"""A package's test requirements, as its release declares them.

`discover_test_requirements` reads the sdist's metadata (runtime
requirements and a test extra), PEP 735 dependency groups and the usual
requirements files, leaving out tooling the runner does not need;
`loosen` drops a lock file's versions. Pinning them against the verifier's
pytest is `factory.pin_requirements` (a pip dry run).
"""

from __future__ import annotations

import re
import tomllib
from email.parser import Parser
from pathlib import Path

from sandgym.safe_files import UnsafeFile, read_bytes_bounded

# Dependency names that are tooling around tests, not needed to run them here
# (coverage and linters; benchmark plugins; the runner's own pytest).
TOOLING = {
    "pytest",
    "coverage",
    "pytest-cov",
    "pycodestyle",
    "flake8",
    "ruff",
    "mypy",
    "pyright",
    "ty",
    "black",
    "isort",
    "pre-commit",
    "tox",
    "nox",
    "pytest-benchmark",
    "pytest-codspeed",
    "codecov",
    "pylint",
    "atheris",
    "pytest-xdist",
    "pytest-randomly",
    "pytest-timeout",
    "build",
    "twine",
    "wheel",
    "setuptools",
}
TEST_EXTRAS = ("test", "tests", "testing")
REQUIREMENT_FILES = (
    "requirements-test.txt",
    "requirements-tests.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
    "tests/requirements.txt",
)


MAX_METADATA_BYTES = 1 << 20


def _read(path: Path, tree: Path) -> str:
    """A metadata file of the source tree: a regular file inside it (no
    symlink out to a host file), bounded; '' when it is not one."""
    try:
        return read_bytes_bounded(path, MAX_METADATA_BYTES, root=tree).decode("utf-8", "replace")
    except UnsafeFile:
        return ""


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares it (`Foo_Bar` -> `foo-bar`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    """The normalized name a requirement string starts with, or ''."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._\-]*)", req)
    return normalize_name(m.group(1)) if m else ""


# A requirement as pip may get it from data: a name, extras, version
# specifiers and a marker. No URL (`name @ https://...`), no path or archive
# (pip installs those from wherever they point), no option (`-e`,
# `--index-url`): pip would fetch, build or read what they name on the host.
_OP = r"(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_\-]+"
PLAIN_REQUIREMENT = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._\-]*\s*(?:\[[A-Za-z0-9._,\s\-]*\])?\s*"
    rf"(?:\(?\s*{_OP}(?:\s*,\s*{_OP})*\s*\)?)?\s*(?:;[^;@\n\r]*)?"
)


def check_plain_requirement(req: str, where: str) -> str:
    """`req` itself when it is a plain requirement (name, extras, version
    specifiers, marker); else ValueError naming `where` and the fix."""
    name = re.match(r"[A-Za-z0-9._\-]*", req.strip())
    archive = name is not None and re.search(r"\.(zip|whl|tar|tgz|tbz|txz|tlz|gz|bz2|xz|lz|lzma)$", name.group(), re.I)
    if not PLAIN_REQUIREMENT.fullmatch(req.strip()) or req.strip().startswith("-") or archive:
        raise ValueError(
            f"{where}: requirement {req!r} is not a plain `name==version` (or name and version specifiers): "
            "URLs, paths, archives and pip options (-e, --index-url) are refused"
        )
    return req


def _drop_extra_marker(req: str) -> str:
    """`foo>=1; extra == "tests"` -> `foo>=1` (pip evaluates the other markers)."""
    if ";" not in req:
        return req.strip()
    spec, marker = req.split(";", 1)
    parts = [p.strip() for p in re.split(r"\band\b", marker) if not re.search(r"\bextra\s*==", p)]
    return spec.strip() + (f"; {' and '.join(parts)}" if parts else "")


def discover_test_requirements(tree: Path, name: str) -> tuple[list[str], list[str]]:
    """(requirement strings, where each group was found). Looks at the sdist's
    metadata (runtime requirements and a test/tests/testing extra), PEP 735
    dependency groups of those names, and the usual requirements files."""
    found: list[str] = []
    sources: list[str] = []
    pkg_info = tree / "PKG-INFO"
    if pkg_info.exists():
        meta = Parser().parsestr(_read(pkg_info, tree))
        for req in meta.get_all("Requires-Dist") or []:
            extra = re.search(r"""\bextra\s*==\s*["']([^"']+)["']""", req)
            if extra is None or extra.group(1) in TEST_EXTRAS:
                found.append(_drop_extra_marker(req))
        if found:
            sources.append("PKG-INFO Requires-Dist (runtime and test extras)")
    pyproject = tree / "pyproject.toml"
    data: dict = {}
    if pyproject.exists():
        try:
            data = tomllib.loads(_read(pyproject, tree))
        except (tomllib.TOMLDecodeError, RecursionError):
            data = {}
    if not pkg_info.exists():
        # A checkout rather than an sdist: the same metadata, from its source files.
        declared, where = _declared_requirements(tree, data)
        found += declared
        sources += where
    if data:
        groups = data.get("dependency-groups", {})
        for g in TEST_EXTRAS:
            items = [r for r in groups.get(g, []) if isinstance(r, str)]
            if items:
                found += items
                sources.append(f"pyproject.toml [dependency-groups] {g}")
    for rel in REQUIREMENT_FILES:
        p = tree / rel
        if p.exists():
            lines = [ln.split("#", 1)[0].strip() for ln in _read(p, tree).splitlines()]
            found += [ln for ln in lines if ln and not ln.startswith("-")]
            sources.append(rel)
    own = normalize_name(name)
    keep = [
        r
        for r in dict.fromkeys(found)
        if requirement_name(r) and requirement_name(r) not in TOOLING and requirement_name(r) != own
    ]
    return keep, sources


def _declared_requirements(tree: Path, pyproject: dict) -> tuple[list[str], list[str]]:
    """Runtime requirements and test extras a source checkout declares:
    pyproject.toml's [project] table, else setup.cfg's [options]."""
    found: list[str] = []
    sources: list[str] = []
    project = pyproject.get("project", {}) if isinstance(pyproject.get("project"), dict) else {}
    deps = [r for r in project.get("dependencies", []) if isinstance(r, str)]
    extras = project.get("optional-dependencies", {})
    for g in TEST_EXTRAS:
        deps += [r for r in (extras.get(g, []) if isinstance(extras, dict) else []) if isinstance(r, str)]
    if deps:
        found += [_drop_extra_marker(r) for r in deps]
        sources.append("pyproject.toml [project] (runtime and test extras)")
    setup_cfg = tree / "setup.cfg"
    if not deps and setup_cfg.exists():
        import configparser

        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(_read(setup_cfg, tree))
        except configparser.Error:
            return found, sources

        def lines(section: str, key: str) -> list[str]:
            raw = cfg.get(section, key, fallback="")
            return [ln.split("#", 1)[0].strip() for ln in raw.splitlines() if ln.split("#", 1)[0].strip()]

        reqs = lines("options", "install_requires")
        for g in TEST_EXTRAS:
            reqs += lines("options.extras_require", g)
        if reqs:
            found += [_drop_extra_marker(r) for r in reqs]
            sources.append("setup.cfg [options] (install_requires and test extras)")
    return found, sources


def loosen(req: str) -> str:
    """`foo[bar]==1.2; python_version < "3.12"` -> `foo[bar]; python_version < "3.12"`."""
    spec, sep, marker = req.partition(";")
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._\-]*)\s*(\[[^\]]*\])?", spec)
    if not m or "@" in spec:
        return req.strip()
    return (m.group(1) + (m.group(2) or "").replace(" ", "") + (f"; {marker.strip()}" if sep else "")).strip()
