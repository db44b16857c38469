"""The unpacked release the factory mutates: where its package is imported
from, which of its files are source and which are tests, and the git
repository whose diffs become the tasks' patches.
"""

from __future__ import annotations

from pathlib import Path

from sandgym.verifiers.swe_repo.checkout import GIT_IDENTITY


def detect_import_root(tree: Path) -> str:
    """`src` for src-layouts, the repository root otherwise."""
    src = tree / "src"
    if src.is_dir() and any((p / "__init__.py").exists() or p.suffix == ".py" for p in src.iterdir()):
        return "src"
    return "."


def is_test_path(path: str) -> bool:
    """The verifier's notion of a test file (it refuses agents' edits there)."""
    from sandgym.verifiers.swe_repo.path_policy import protected_reason

    return protected_reason(path) is not None


def source_files(tree: Path, import_root: str) -> list[str]:
    """Python modules of the package itself: under the import root, not tests,
    not build scripts or docs."""
    root = tree / import_root
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(tree).as_posix()
        parts = set(Path(rel).parts)
        if is_test_path(rel) or parts & {
            "docs",
            "doc",
            "examples",
            "benchmark",
            "benchmarks",
            "tools",
            "scripts",
            "build",
            ".github",
        }:
            continue
        if import_root == "." and len(Path(rel).parts) == 1 and p.name in ("setup.py", "noxfile.py", "conftest.py"):
            continue
        if any(part.endswith(".egg-info") for part in parts):
            continue
        out.append(rel)
    return out


# -- git ---------------------------------------------------------------------------


def make_repo(tree: Path):
    """A git repository of the pristine tree: one commit, fixed identity."""
    import git

    repo = git.Repo.init(tree)
    with repo.config_writer() as cw:
        cw.set_value("core", "autocrlf", "false")
        cw.set_value("user", "name", GIT_IDENTITY["GIT_AUTHOR_NAME"])
        cw.set_value("user", "email", GIT_IDENTITY["GIT_AUTHOR_EMAIL"])
    repo.git.add("-A", "-f", ".")
    repo.git.commit("-q", "-m", "pristine", "--no-verify", env=GIT_IDENTITY)
    return repo


def diff_of(repo, path: str, new_text: str) -> tuple[str, str]:
    """(base_patch pristine->mutant, gold patch mutant->pristine) of one file,
    as git writes them; the file is restored afterwards."""
    file = Path(repo.working_tree_dir) / path
    original = file.read_bytes()
    try:
        file.write_text(new_text, encoding="utf-8")
        forward = repo.git.diff("--no-color", "--no-ext-diff", "--", path) + "\n"
        backward = repo.git.diff("--no-color", "--no-ext-diff", "-R", "--", path) + "\n"
    finally:
        file.write_bytes(original)
    return forward, backward
