"""Task specs: versioned files, pydantic models, content-addressed task sets.

A task set is a folder:

    taskset.yaml          name, family, version, description
    tasks/<slug>.yaml     what the agent may see (prompt, visible examples)
    hidden/<slug>.yaml    what only the verifier sees (tests, reference solution)

Visible and hidden files are matched by their `id` field. The two halves
are kept in separate folders so that nothing that builds an agent's view
ever opens `hidden/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandgym.errors import SandgymError
from sandgym.families import FAMILIES, UnknownFamily, spec_module
from sandgym.families import family as family_entry
from sandgym.safe_files import FolderReader, UnsafeFile, read_bytes_bounded, write_atomic
from sandgym.specs.parse_cache import ParseCache

SCHEMA_VERSION = 1
TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9_.\-]+)*$")


def _check_task_id(v: str) -> str:
    if not TASK_ID_RE.fullmatch(v):  # fullmatch: `$` would let a "\n" end pass
        raise ValueError(f"task id {v!r} must be letters, digits, '_', '.', '-' and '/' separators")
    if any(part in (".", "..") for part in v.split("/")):  # ids name files and refs elsewhere
        raise ValueError(f"task id {v!r} has a '.' or '..' segment; name each part with a letter or digit")
    return v


# The `id` of every family's visible half.
TaskId = Annotated[str, AfterValidator(_check_task_id)]


class TaskSpecError(SandgymError, ValueError):
    """A task spec file is malformed; the message names the file and field."""


class UnknownTask(SandgymError, KeyError):
    """A task id that is not in the task set; the message lists some that are."""

    def __str__(self) -> str:  # KeyError would show the message's repr
        return str(self.args[0]) if self.args else ""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def json_data(value: Any, where: str = "value") -> Any:
    """Only JSON data: what crosses to the verifier unchanged. YAML can
    also say dates, sets, bytes and non-string keys, which would not."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        for i, v in enumerate(value):
            json_data(v, f"{where}[{i}]")
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where} has the key {k!r}: mapping keys must be strings")
            json_data(v, f"{where}[{k!r}]")
        return value
    raise ValueError(
        f"{where} is a {type(value).__name__}; use JSON data only "
        "(null, true/false, numbers, strings, lists, mappings with string keys)"
    )


class TaskSetMeta(StrictModel):
    schema_version: Literal[1] = 1
    name: str
    family: str = Field(json_schema_extra={"enum": list(FAMILIES)})  # a family of the family table
    version: int = Field(1, ge=1)
    description: str = ""

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"unknown family {v!r}; choices: {', '.join(FAMILIES)}")
        return v


class VisibleSpec(StrictModel):
    """Base of every family's visible half."""

    if TYPE_CHECKING:
        # Every family's model declares these fields itself, where its files
        # want them (declared here they would come first in every dump).
        id: str
        family: str
        version: int


class HiddenSpec(StrictModel):
    """Base of every family's hidden half."""

    if TYPE_CHECKING:
        id: str  # declared by each family's model, as VisibleSpec's fields


class TaskPair(BaseModel):
    """A whole task as the host holds it: visible and hidden halves, of any
    family. A family's own pair class (its spec module's PAIR) types them."""

    model_config = ConfigDict(frozen=True)

    visible: VisibleSpec
    hidden: HiddenSpec

    @property
    def id(self) -> str:
        return self.visible.id

    @property
    def family(self) -> str:
        return self.visible.family

    @classmethod
    def of(cls, task: TaskPair) -> Self:
        """`task` as this pair class (a family's PAIR): its halves are checked to be the family's models."""
        return task if isinstance(task, cls) else cls(visible=task.visible, hidden=task.hidden)


def family_models(family: str) -> tuple[type[VisibleSpec], type[HiddenSpec]]:
    """A family's (visible, hidden) spec models, from its spec module in the family table."""
    try:
        mod = spec_module(family)
    except UnknownFamily as e:
        raise TaskSpecError(str(e)) from None
    return mod.VISIBLE, mod.HIDDEN


def make_pair(visible: VisibleSpec, hidden: HiddenSpec) -> TaskPair:
    """The family's own pair class (typed halves) where its spec module has one."""
    pair: type[TaskPair] = getattr(spec_module(visible.family), "PAIR", TaskPair)
    return pair(visible=visible, hidden=hidden)


def format_validation_error(where: str | Path, err: ValidationError) -> str:
    lines = [f"{where}: invalid task spec"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        lines.append(f"  field `{loc}`: {e['msg']}")
    return "\n".join(lines)


# Limits on a task file: what a hostile one could otherwise spend (a YAML
# "billion laughs" expands aliases into a billion nodes; deep nesting
# exhausts the stack). Bundled task files are below 64 KiB, nest < 10 deep,
# hold < 13,000 values; refusing past 100,000 bounds the CPU a hostile one costs.
MAX_SPEC_BYTES = 16 << 20
MAX_SPEC_DEPTH = 64
MAX_SPEC_NODES = 100_000


def _load_yaml(path: Path, root: Path, folder: FolderReader | None = None, cache: ParseCache | None = None) -> Any:
    """A task file's data: a regular file whose real path is inside the task
    set's folder `root` (no symlink out of it, no FIFO or device), at most
    MAX_SPEC_BYTES; read through `folder` when given (the folder holding it).
    With `cache`, bytes parsed before are not parsed again."""
    try:
        if folder is not None:
            raw = folder.read(path.name, MAX_SPEC_BYTES)
        else:
            raw = read_bytes_bounded(path, MAX_SPEC_BYTES, root=root)
    except UnsafeFile as e:
        raise TaskSpecError(f"{e} (a task file may hold at most {MAX_SPEC_BYTES:,} bytes)") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskSpecError(
            f"{path}: not UTF-8 text ({e.reason} at byte offset {e.start}); save the file as UTF-8"
        ) from None
    data = cache.get(raw) if cache is not None else None
    if data is not None:
        return data
    import yaml

    from sandgym.specs.yaml_text import YAMLRefused, load_yaml_text

    try:
        data = load_yaml_text(text)
    except YAMLRefused as e:
        raise TaskSpecError(f"{path}: refused: {e}") from None
    except yaml.YAMLError as e:
        raise TaskSpecError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    except (RecursionError, MemoryError) as e:
        raise TaskSpecError(f"{path}: too large or too deeply nested to read ({type(e).__name__})") from None
    if cache is not None:
        cache.put(raw, data)
    return data


_Model = TypeVar("_Model", bound=BaseModel)


def _parse(
    model: type[_Model], path: Path, root: Path, folder: FolderReader | None = None, cache: ParseCache | None = None
) -> _Model:
    data = _load_yaml(path, root, folder, cache)
    if not isinstance(data, dict):
        raise TaskSpecError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise TaskSpecError(format_validation_error(path, e)) from None


def _spec_files(folder: FolderReader) -> list[Path]:
    return [p for p in map(folder.folder.joinpath, folder.names()) if p.suffix in (".yaml", ".yml", ".json")]


class TaskSet:
    """The tasks of one folder, in id order, with a content hash."""

    def __init__(self, meta: TaskSetMeta, tasks: Sequence[TaskPair], root: Path | None = None):
        self.meta = meta
        self.root = root
        self.tasks = sorted(tasks, key=lambda t: t.id)
        self._by_id = {t.id: t for t in self.tasks}
        self.hash = self._content_hash()

    def __deepcopy__(self, memo: dict) -> TaskSet:
        # Read-only once loaded (frozen pairs, the hash fixed): gymnasium.make
        # deep-copies env kwargs into env.spec, and copying every task (tens
        # of ms for HumanEval-164, per env made) would give an equal set.
        return self

    def _content_hash(self) -> str:
        # What decides scores, and nothing cosmetic (the set's name and
        # description may change without making results incomparable).
        canon = {
            "family": self.meta.family,
            "tasks": [[t.visible.model_dump(mode="json"), t.hidden.model_dump(mode="json")] for t in self.tasks],
        }
        raw = json.dumps(canon, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, task_id: str) -> TaskPair:
        try:
            return self._by_id[task_id]
        except KeyError:
            shown = ", ".join(self.ids[:10]) + (" ..." if len(self) > 10 else "")
            raise UnknownTask(f"unknown task id {task_id!r} in task set {self.meta.name!r}; choices: {shown}") from None

    @staticmethod
    def _read_meta(folder: str | Path) -> tuple[Path, TaskSetMeta, ParseCache | None]:
        root = resolve_task_set(folder)
        if not root.is_dir():
            raise TaskSpecError(f"{root}: not a task-set folder (expected taskset.yaml, tasks/, hidden/)")
        meta_path = root / "taskset.yaml"
        if not meta_path.exists():
            raise TaskSpecError(f"{meta_path}: missing; a task set needs taskset.yaml naming its family")
        cache = ParseCache.of(root)
        return root, _parse(TaskSetMeta, meta_path, root, cache=cache), cache

    @classmethod
    def load_meta(cls, folder: str | Path) -> TaskSetMeta:
        """Only the `taskset.yaml` of the set `load(folder)` loads (its family,
        name): one file read where hundreds of task files need not be."""
        return cls._read_meta(folder)[1]

    @classmethod
    def load(cls, folder: str | Path) -> TaskSet:
        """Load a task-set folder; a name such as `swe_repo/pypi-v1` that is no
        folder here finds the bundled set of that name. A large set's parsed
        files are kept between loads (parse_cache.py)."""
        root, meta, cache = cls._read_meta(folder)
        visible_model, hidden_model = family_models(meta.family)
        for sub in ("tasks", "hidden"):
            if not (root / sub).is_dir():
                raise TaskSpecError(f"{root / sub}: missing folder")
        visible: dict[str, tuple[Path, VisibleSpec]] = {}
        with FolderReader(root / "tasks", root) as files:
            for p in _spec_files(files):
                v = _parse(visible_model, p, root, files, cache)
                if v.id in visible:
                    raise TaskSpecError(f"{p}: field `id`: {v.id!r} also used by {visible[v.id][0]}")
                visible[v.id] = (p, v)
        pairs = []
        seen_hidden: dict[str, Path] = {}
        with FolderReader(root / "hidden", root) as files:
            for p in _spec_files(files):
                h = _parse(hidden_model, p, root, files, cache)
                if h.id not in visible:
                    raise TaskSpecError(f"{p}: field `id`: {h.id!r} has no visible spec in {root / 'tasks'}")
                if h.id in seen_hidden:
                    raise TaskSpecError(f"{p}: field `id`: {h.id!r} also used by {seen_hidden[h.id]}")
                seen_hidden[h.id] = p
                pairs.append(make_pair(visible[h.id][1], h))
        for tid, (p, _) in visible.items():
            if tid not in seen_hidden:
                raise TaskSpecError(f"{p}: task {tid!r} has no hidden spec in {root / 'hidden'}")
        if not pairs:
            raise TaskSpecError(f"{root}: the task set holds no tasks")
        loaded = cls(meta, pairs, root)
        if cache is not None:
            cache.save()
        return loaded

    def write(self, folder: str | Path) -> Path:
        """Write the set into `folder`. Every file is made
        first and checked against the loader's own limit (TaskSpecError
        naming the task, nothing written); then the set is written in a
        folder beside it and renamed into place, so a crash leaves no half set
        (into a folder that holds files already, each file is replaced whole)."""
        from sandgym.specs.yaml_text import dump_yaml

        root = Path(folder)
        files = {"taskset.yaml": dump_yaml(self.meta.model_dump(mode="json")).encode()}
        used: set[str] = set()
        for t in self.tasks:
            slug = slugify(t.id)
            if slug in used:  # ids that differ only in characters a file name cannot hold
                slug += "-" + hashlib.sha256(t.id.encode()).hexdigest()[:8]
            used.add(slug)
            halves: tuple[tuple[str, VisibleSpec | HiddenSpec], ...] = (("tasks", t.visible), ("hidden", t.hidden))
            for sub, half in halves:
                data = half.model_dump(mode="json", exclude_defaults=True)
                raw = dump_yaml({"id": half.id, **data}).encode()
                if len(raw) > MAX_SPEC_BYTES:
                    raise TaskSpecError(
                        f"task {t.id!r}: its {sub}/ file would be {len(raw):,} bytes, over the "
                        f"{MAX_SPEC_BYTES:,} a task file may hold; leave the task out or make it smaller"
                    )
                files[f"{sub}/{slug}.yaml"] = raw
        if root.exists() and any(root.iterdir()):  # a set being added to (the task factory): file by file
            for sub in ("tasks", "hidden"):
                (root / sub).mkdir(exist_ok=True)
            for name, raw in files.items():
                write_atomic(root / name, raw)
            return root
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
        try:
            for sub in ("tasks", "hidden"):
                (tmp / sub).mkdir()
            for name, raw in files.items():
                (tmp / name).write_bytes(raw)
            os.chmod(tmp, 0o755)
            os.replace(tmp, root)  # rename(2) over an empty folder
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return root


def slugify(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", task_id)


def bundled_dir() -> Path:
    """task_specs/, wherever the install put it (sandgym.task_specs)."""
    from sandgym import task_specs

    return Path(task_specs.__file__).resolve().parent


def bundled_task_set(family: str) -> Path:
    """The set a family's env loads when given none (the family table's default)."""
    return bundled_dir() / family / family_entry(family).default_task_set


def bundled_task_sets() -> list[str]:
    """Names (`<family>/<set>`) of every task set shipped with sandgym."""
    root = bundled_dir()
    return sorted(
        p.parent.relative_to(root).as_posix() for p in root.glob("*/*/taskset.yaml") if p.parent.parent.name in FAMILIES
    )


def resolve_task_set(ref: str | Path) -> Path:
    """The folder `ref` names: a path that exists wins; otherwise a bundled
    set, by `<family>/<set>` or by `<set>` alone when only one family has it."""
    path = Path(ref)
    if path.exists():
        return path
    text = str(ref).strip("/")
    names = bundled_task_sets()
    if text in names:
        return bundled_dir() / text
    matches = [n for n in names if n.split("/", 1)[1] == text]
    if len(matches) == 1:
        return bundled_dir() / matches[0]
    if len(matches) > 1:
        raise TaskSpecError(f"{ref}: several bundled task sets have that name ({', '.join(matches)}); name one")
    raise TaskSpecError(
        f"{ref}: not a task-set folder (no such folder), nor the name of a bundled task set; "
        f"bundled sets: {', '.join(names)} (`sandgym tasks list` shows them)"
    )


def load_family_task_set(tasks: str | Path | TaskSet | None, family: str) -> TaskSet:
    """What an env's `tasks=` names (None: the family's bundled set), checked to be of `family`."""
    ts = tasks if isinstance(tasks, TaskSet) else TaskSet.load(tasks if tasks is not None else bundled_task_set(family))
    if ts.meta.family != family:
        raise ValueError(
            f"task set {ts.meta.name!r} is of family {ts.meta.family!r}; {family_entry(family).env_id} needs a "
            f"{family} task set (taskset.yaml: family: {family})"
        )
    return ts


def choose_task(task_set: TaskSet, options: dict | None, np_random) -> TaskPair:
    """The task a reset asks for (`options={"task_id": ...}`), else one drawn with the env's seeded rng."""
    options = options or {}
    unknown = set(options) - {"task_id"}
    if unknown:
        raise ValueError(f"unknown reset option(s) {sorted(unknown)}; the only option is 'task_id'")
    if options.get("task_id") is not None:
        return task_set.get(options["task_id"])
    return task_set.tasks[int(np_random.integers(len(task_set)))]


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every spec file kind, by file kind name."""
    schemas = {"taskset": TaskSetMeta.model_json_schema()}
    for family in FAMILIES:
        try:
            visible, hidden = family_models(family)
        except ImportError:  # a family whose module is not part of this install
            continue
        schemas[f"{family}.task"] = visible.model_json_schema()
        schemas[f"{family}.hidden"] = hidden.model_json_schema()
    return schemas
