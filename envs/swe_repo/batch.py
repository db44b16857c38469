"""`make-swe` over many packages: parallel across packages, resumable per package.

Each package's run keeps a journal (`factory.Journal`) in a state folder
outside the task set, so a killed run starts again where it stopped: the
evaluated candidates are skipped, the kept tasks come back from the
journal, and a finished package is not run again. After each package the
task set is rewritten with its tasks, and `runs.yaml` in the set records
per package what was made and wasted, or why the package was left out.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from sandgym.envs.swe_repo.factory import (
    FACTORY_VERSION,
    EnvBuildError,
    FactoryError,
    FactoryStats,
    make_swe,
    parse_package,
    write_task_set,
)
from sandgym.runtimes.base import SandboxError
from sandgym.specs import TaskSpecError
from sandgym.specs.yaml_text import dump_yaml
from sandgym.verifiers.swe_repo.sources import RepoError, cache_dir

RUNS_FILE = "runs.yaml"


@dataclass
class PackageResult:
    package: str
    tasks: int
    stats: FactoryStats | None
    error: str = ""
    env_built: bool = True  # False: its test environment or suite failed (EnvBuildError)


def state_dir_for(out: Path) -> Path:
    """Journals live in the cache, keyed by the set's folder, not in the set."""
    key = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "make_swe" / key


def read_packages(path: Path) -> list[str]:
    """NAME==VERSION per line; `#` starts a comment."""
    out = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def parse_levels(text: str) -> dict[str, float]:
    """`symptom`, or weights such as `located=1,symptom=2,minimal=1`."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        if name not in ("located", "symptom", "minimal"):
            raise FactoryError(f"--issue-level {text!r}: levels are located, symptom, minimal (optionally =weight)")
        try:
            out[name] = float(weight) if weight else 1.0
        except ValueError:
            raise FactoryError(f"--issue-level {text!r}: {weight!r} is not a number") from None
    return out


def make_many(
    packages: list[str],
    out: Path,
    max_tasks: int,
    seed: int,
    runtime,
    jobs: int = 2,
    levels: dict[str, float] | None = None,
    combined_share: float = 0.0,
    state: Path | None = None,
    log: Callable[[str], None] = print,
    progress: Callable[[str, str, int, int], None] | None = None,
    factory_version: int = FACTORY_VERSION,
) -> list[PackageResult]:
    """Run `make_swe` on every package (`jobs` sandboxes at once, spread over
    packages) and write each one's tasks into the set at `out` as it ends."""
    for p in packages:
        parse_package(p)  # a typo fails before anything runs
    state = Path(state) if state else state_dir_for(out)
    if factory_version >= 3:  # version 2's journals lie at the top, as before versions had folders
        state = state / f"v{factory_version}"
    parallel = max(1, min(jobs, len(packages)))
    per_package = max(1, jobs // parallel)
    write_lock = threading.Lock()
    results: list[PackageResult] = []

    def one(package: str) -> PackageResult:
        name, version = parse_package(package)
        journal = state / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{version}.jsonl"
        try:
            tasks, stats = make_swe(
                package,
                max_tasks,
                seed,
                runtime,
                jobs=per_package,
                progress=(lambda phase, done, total: progress(package, phase, done, total)) if progress else None,
                log=log,
                levels=levels,
                combined_share=combined_share,
                journal=journal,
                factory_version=factory_version,
            )
        except (FactoryError, RepoError, TaskSpecError, OSError, SandboxError) as e:
            first_line = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            result = PackageResult(package, 0, None, first_line, env_built=not isinstance(e, EnvBuildError))
        else:
            result = PackageResult(package, len(tasks), stats)
            if tasks:
                with write_lock:
                    write_task_set(tasks, out)
        with write_lock:
            record_run(out, result)
        log(result.stats.line() if result.stats else f"{package}: left out: {result.error}")
        return result

    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(one, packages))
    return results


def record_run(out: Path, result: PackageResult) -> None:
    """Merge one package's figures into the set's runs.yaml."""
    path = Path(out) / RUNS_FILE
    data = yaml.safe_load(path.read_text()) if path.exists() else {}
    runs = data.get("packages", {}) if isinstance(data, dict) else {}
    if result.stats is not None:
        runs[result.package] = {"tasks": result.tasks, **result.stats.record()}
    else:
        runs[result.package] = {"tasks": 0, "left_out": result.error, "env_built": result.env_built}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml({"packages": dict(sorted(runs.items()))}))


def factory_report(results: list[PackageResult]) -> list[str]:
    """Per package and over all of them: environment build success, gold
    pass rate over validation reruns, share of tasks per issue level."""
    lines = []
    gold_runs = gold_full = 0
    levels: dict[str, int] = {}
    for r in results:
        if r.stats is None:
            why = "environment not built" if not r.env_built else "left out"
            lines.append(f"{r.package}: {why}: {r.error}")
            continue
        lines.append(r.stats.report())
        gold_runs += r.stats.gold_runs
        gold_full += r.stats.gold_full
        for k, v in r.stats.by_level.items():
            levels[k] = levels.get(k, 0) + v
    built = sum(r.env_built for r in results)
    gold = f"{gold_full / gold_runs:.1%} of {gold_runs} runs" if gold_runs else "no run"
    n = sum(levels.values())
    shares = ", ".join(f"{k} {v / n:.0%}" for k, v in sorted(levels.items())) if n else "no task"
    lines.append(
        f"all: environments built {built} of {len(results)} ({built / len(results):.0%}); "
        f"gold FULL {gold}; levels {shares}"
        if results
        else "all: no package"
    )
    return lines
