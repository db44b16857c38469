"""The journal of a factory run: one JSON line per evaluated candidate, so
a killed run goes on where it stopped."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from sandgym.specs.swe_repo import SWEHidden, SWETask, SWETaskPair


class Journal:
    """One JSON line per evaluated candidate (and the kept task), appended as
    it finishes; a killed run re-reads it and goes on where it stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, dict] = {}
        self.done: dict | None = None
        self._lock = threading.Lock()
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by the kill
                if rec.get("done"):
                    self.done = rec
                elif isinstance(rec.get("key"), str):
                    self.entries[rec["key"]] = rec

    def add(self, rec: dict) -> None:
        with self._lock:
            self.entries[rec.get("key", "")] = rec
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps(rec) + "\n")

    def tasks(self) -> list[SWETaskPair]:
        return [
            SWETaskPair(visible=SWETask(**r["task"]["visible"]), hidden=SWEHidden(**r["task"]["hidden"]))
            for r in self.entries.values()
            if r.get("outcome") == "kept" and r.get("task")
        ]


def last_combination_number(entries) -> int:
    """The highest `combo-NNNN` an earlier run gave out. Journals written
    before entries carried `task_id` have the id only in a kept task."""
    numbers = [0]
    for r in entries:
        task_id = r.get("task_id") or (r.get("task") or {}).get("visible", {}).get("id", "")
        if "/combo-" in task_id:
            numbers.append(int(task_id.rsplit("-", 1)[1]))
    return max(numbers)
