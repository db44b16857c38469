"""One self-contained HTML report of a run folder.

`write_report(RUN_DIR)` writes `RUN_DIR/report.html`: inline CSS, charts
as inline SVG drawn here, no script and nothing fetched from anywhere (a
Content-Security-Policy in the page forbids it too). Every string that
comes from a record is escaped: records hold model output.

Figures are computed from the records, not copied from summary.json, so an
interrupted run (no summary) reports the same way.
"""

from __future__ import annotations

import html
import math
import os
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from sandgym.families import family_of_env, load

from . import __version__
from .outcomes import Outcome
from .records import EpisodeRecord, count_outcomes, policy_label
from .runs import SUMMARY, Run, load_run

REPORT = "report.html"
PHASES = ("queue_s", "create_s", "exec_s", "verify_s", "total_s")
PHASE_LABELS = {
    "queue_s": "queue (waiting for a worker)",
    "create_s": "create (agent sandboxes)",
    "exec_s": "exec (agent commands)",
    "verify_s": "verify (all attempts)",
    "total_s": "total (episode)",
}
OUTCOME_COLORS = {
    "passed": "#2e7d32",
    "failed": "#c62828",
    "timeout": "#ef6c00",
    "env_error": "#6a1b9a",
    "not_executed": "#78909c",
    "violation": "#212121",
}
OTHER_COLOR = "#8d6e63"
DETAIL_MAX = 300


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


# -- numbers -------------------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s == 0:
        return "0 s"
    if s < 0.001:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms" if s < 0.1 else f"{s * 1e3:.0f} ms"
    if s < 100:
        return f"{s:.2f} s"
    return f"{s:.0f} s"


def fmt_pct(num: int, den: int) -> str:
    return f"{100 * num / den:.1f}%" if den else "n/a"


def fmt_reward(x: float | None) -> str:
    return "not scored" if x is None else f"{x:.3f}"


def success_line(records: list[EpisodeRecord]) -> str:
    """`passed P of N scored (R%) · E env_error and X not_executed not scored`."""
    scored = [r for r in records if r.reward is not None]
    passed = sum(r.outcome == Outcome.PASSED.value for r in scored)
    counts = count_outcomes([r.outcome for r in records])
    return (
        f"passed {passed} of {len(scored)} scored ({fmt_pct(passed, len(scored))}) · "
        f"{counts[Outcome.ENV_ERROR.value]} env_error and {counts[Outcome.NOT_EXECUTED.value]} "
        f"not_executed not scored"
    )


def failure_detail(r: EpisodeRecord) -> str:
    """The first line of what went wrong: the harness error, a violation, the
    verifier's detail, the first test that did not pass, or the last feedback."""
    candidates: list[str] = []
    if r.error:
        candidates.append(r.error)
    candidates += [f"violation: {v}" for v in r.violations]
    if r.attempts:
        candidates.append(str(r.attempts[-1].get("detail") or ""))
    for t in r.tests:
        if t.get("status") != "passed":
            detail = str(t.get("detail") or "")
            candidates.append(f"{t.get('name', '?')} ({t.get('status', '?')})" + (f": {detail}" if detail else ""))
            break
    if r.steps:
        candidates.append(r.steps[-1].observation)
    for c in candidates:
        for line in c.splitlines():
            if line.strip():
                line = line.strip()
                return line if len(line) <= DETAIL_MAX else line[: DETAIL_MAX - 1] + "…"
    return ""


# -- SVG -----------------------------------------------------------------------------------


def _color(outcome: str) -> str:
    return OUTCOME_COLORS.get(outcome, OTHER_COLOR)


def outcome_chart(counts: dict[str, int], total: int) -> str:
    label_w, bar_w, row_h, pad = 120, 520, 30, 8
    width, height = label_w + bar_w + 130, pad * 2 + row_h * len(counts)
    top = max(max(counts.values(), default=0), 1)
    parts = [
        f'<svg class="chart" id="outcome-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="episodes by outcome">'
    ]
    for i, (name, n) in enumerate(counts.items()):
        y = pad + i * row_h
        w = bar_w * n / top
        parts.append(
            f'<g class="outcome-row" data-outcome="{esc(name)}" data-count="{n}">'
            f"<title>{esc(name)}: {n} of {total} episodes</title>"
            f'<text x="{label_w - 10}" y="{y + row_h / 2 + 5:.1f}" text-anchor="end">{esc(name)}</text>'
            f'<rect x="{label_w}" y="{y + 5}" width="{bar_w}" height="{row_h - 10}" class="track"/>'
            f'<rect x="{label_w}" y="{y + 5}" width="{w:.1f}" height="{row_h - 10}" fill="{_color(name)}"/>'
            f'<text x="{label_w + bar_w + 10}" y="{y + row_h / 2 + 5:.1f}" class="count">'
            f'{n} <tspan class="muted">({fmt_pct(n, total)})</tspan></text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def histogram(values: list[float], phase: str, bins: int = 16) -> str:
    width, height = 340, 140
    left, right, top, bottom = 30, 10, 10, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    hi = max(values, default=0.0)
    parts = [
        f'<svg class="chart hist" data-phase="{esc(phase)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="histogram of {esc(phase)}">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>',
    ]
    if hi <= 0:  # a phase this run never used (create_s and exec_s in single-turn mode)
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2 + 4}" text-anchor="middle" '
            f'class="tick">{"every episode: 0 s" if values else "no episodes"}</text>'
        )
        counts: list[int] = []
        ymax = max(len(values), 1)
    else:
        step = hi / bins
        counts = [0] * bins
        for v in values:
            counts[min(int(v / step), bins - 1)] += 1
        ymax = max(counts)
        bw = plot_w / bins
        for i, c in enumerate(counts):
            h = plot_h * c / ymax
            span = f"{fmt_seconds(step * i)} – {fmt_seconds(step * (i + 1))}"
            parts.append(
                f'<rect x="{left + i * bw + 1:.1f}" y="{top + plot_h - h:.1f}" '
                f'width="{max(bw - 2, 1):.1f}" height="{h:.1f}" class="bin">'
                f"<title>{esc(span)}: {c} episodes</title></rect>"
            )
    parts.append(
        f'<text x="{left - 4}" y="{top + 9}" text-anchor="end" class="tick">{ymax}</text>'
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" class="tick">0</text>'
        f'<text x="{left}" y="{height - 9}" class="tick">0</text>'
        f'<text x="{left + plot_w}" y="{height - 9}" text-anchor="end" class="tick">'
        f"{esc(fmt_seconds(hi))}</text>"
        f'<text x="{left + plot_w / 2}" y="{height - 9}" text-anchor="middle" class="tick">'
        f"episodes by duration</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def reward_bar(x: float | None) -> str:
    if x is None:
        return ""
    w = 120 * max(0.0, min(1.0, x))
    return (
        f'<svg class="rbar" width="124" height="12" viewBox="0 0 124 12" aria-hidden="true">'
        f'<rect x="2" y="1" width="120" height="10" class="track"/>'
        f'<rect x="2" y="1" width="{w:.1f}" height="10" class="fill"/></svg>'
    )


# -- page ----------------------------------------------------------------------------------

CSS = """
:root { --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --bg: #f6f8fa; --card: #fff; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 24px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 12px; }
.sub { color: var(--muted); margin: 0 0 16px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 16px 20px;
          margin: 0 0 16px; }
.meta { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 6px 18px; margin: 0; }
.meta dt { color: var(--muted); }
.meta dd { margin: 0; overflow-wrap: anywhere; }
code, .mono, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
                   font-size: 12.5px; }
.headline { display: flex; align-items: baseline; gap: 20px; flex-wrap: wrap; }
.big { font-size: 40px; font-weight: 700; line-height: 1; }
.rate { font-size: 17px; }
.muted { color: var(--muted); fill: var(--muted); }
.banner { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 8px; padding: 10px 16px;
          margin: 0 0 16px; }
svg.chart text { font-size: 13px; fill: var(--fg); }
svg.chart .tick { font-size: 11px; fill: var(--muted); }
svg .track { fill: #eaeef2; }
svg .axis { stroke: #8c959f; stroke-width: 1; }
svg .bin { fill: #0969da; }
svg.rbar .fill { fill: #0969da; }
.hists { display: grid; grid-template-columns: repeat(3, 1fr); gap: 12px; }
svg.hist { display: block; width: 100%; height: auto; }
.hist-card { min-width: 0; border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
.hist-card h3 { font-size: 14px; margin: 0; }
.hist-card .pct { margin: 2px 0 6px; color: var(--muted); }
.hist-card .pct b { color: var(--fg); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #eaeef2; vertical-align: top; }
th { font-weight: 600; color: var(--muted); border-bottom: 1px solid var(--line); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.task { overflow-wrap: anywhere; min-width: 220px; }
td.detail { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px;
            white-space: pre-wrap; overflow-wrap: anywhere; }
.badge { display: inline-block; color: #fff; border-radius: 10px; padding: 0 8px; font-size: 12px;
         white-space: nowrap; }
.na { color: var(--muted); }
"""


def _badge(outcome: str) -> str:
    return f'<span class="badge" style="background:{_color(outcome)}">{esc(outcome)}</span>'


def _status(r: EpisodeRecord) -> str:
    return f' <span class="mono status">{esc(r.status)}</span>' if r.status else ""


def _policy_text(policy: dict) -> str:
    name = policy.get("name", "?")
    rest = ", ".join(f"{k}={v}" for k, v in policy.items() if k != "name")
    return f"{name} ({rest})" if rest else str(name)


def _meta(run: Run) -> str:
    s, recs = run.summary, run.records
    first = recs[0] if recs else None
    runtime = s.runtime
    if first is not None:
        extra = ", ".join(f"{k} {v}" for k, v in first.runtime.items() if k != "name" and v != s.runtime)
        runtime = f"{runtime} ({extra})" if extra else runtime
    env_kwargs = ", ".join(f"{k}={v}" for k, v in first.env_kwargs.items()) if first else ""
    started = min((r.started_at for r in recs), default="")
    items = [
        ("env", f"{s.env_id}" + (f" ({env_kwargs})" if env_kwargs else "")),
        ("task set", s.task_set),
        ("policy", _policy_text(s.policy)),
        ("task-set hash", s.task_set_hash),
        ("runtime", runtime),
        ("seed", "none" if s.seed is None else s.seed),
        ("run id", s.run_id),
        ("episodes", len(recs)),
        ("started", started),
        ("wall time", fmt_seconds(s.wall_s) + (" (estimated from records)" if run.interrupted else "")),
        ("sandgym", s.sandgym_version),
        ("folder", run.path),
    ]
    cells = "".join(
        f'<dt>{esc(k)}</dt><dd class="{"mono" if k in ("task-set hash", "run id") else ""}" '
        f'data-field="{esc(k)}">{esc(v)}</dd>'
        for k, v in items
    )
    return f'<dl class="meta">{cells}</dl>'


def _headline(recs: list[EpisodeRecord]) -> str:
    scored = [r for r in recs if r.reward is not None]
    passed = sum(r.outcome == Outcome.PASSED.value for r in scored)
    rewards = [r.reward for r in scored if r.reward is not None]
    mean = sum(rewards) / len(rewards) if rewards else None
    big = fmt_pct(passed, len(scored))
    mean_text = (
        f"mean reward {mean:.3f} over {len(scored)} scored episodes"
        if mean is not None
        else "mean reward n/a: no scored episodes"
    )
    return (
        '<section id="success"><h2>Success rate</h2><div class="headline">'
        f'<span class="big">{esc(big)}</span>'
        f'<span class="rate" id="success-line">{esc(success_line(recs))}</span></div>'
        f'<p class="muted" id="reward-mean">{esc(mean_text)}. env_error (infrastructure, after retries) and '
        "not_executed (nothing submitted) carry no reward: they are excluded, not counted as 0.</p></section>"
    )


def _outcomes(recs: list[EpisodeRecord]) -> str:
    counts = count_outcomes([r.outcome for r in recs])  # every outcome name, zeros included
    return f'<section id="outcomes"><h2>Outcomes</h2>{outcome_chart(counts, len(recs))}</section>'


def status_counts(recs: list[EpisodeRecord]) -> dict[str, int]:
    """Episodes per verifier status (the family's own names: SWE's FULL, PARTIAL,
    NO, EMPTY, APPLY_FAILED, ...), most frequent first; episodes without one
    are counted under their outcome in parentheses."""
    counts: dict[str, int] = {}
    for r in recs:
        key = r.status or f"({r.outcome})"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _statuses(recs: list[EpisodeRecord]) -> str:
    """The verifier's statuses, when the family's verifier gives them."""
    if not any(r.status for r in recs):
        return ""
    rows = "".join(
        f'<tr data-status="{esc(k)}"><td class="mono">{esc(k)}</td><td class="num">{n}</td>'
        f'<td class="num">{esc(fmt_pct(n, len(recs)))}</td></tr>'
        for k, n in status_counts(recs).items()
    )
    return (
        '<section id="statuses"><h2>Verifier statuses</h2><p class="sub">The family verifier\'s own verdicts '
        "(for SWE tasks: FULL every test passed; PARTIAL some FAIL_TO_PASS passed; NO none did; EMPTY no patch; "
        "APPLY_FAILED the patch does not apply). An empty patch is EMPTY, never a pass rate.</p>"
        '<div><table><thead><tr><th>status</th><th class="num">episodes</th><th class="num">share</th></tr>'
        f"</thead><tbody>{rows}</tbody></table></div></section>"
    )


def _pass_at_k(run: Run) -> str:
    s = run.summary
    if s.samples_per_task <= 1 or not s.pass_at_k:
        return ""
    items = "".join(
        f'<dt>pass@{esc(k)}</dt><dd class="mono" data-field="pass@{esc(k)}">{v:.4f}</dd>'
        for k, v in s.pass_at_k.items()
    )
    return (
        f'<section id="pass-at-k"><h2>pass@k</h2><p class="sub">{s.n_tasks} tasks, up to {s.samples_per_task} '
        "samples each; unbiased estimator 1 - C(n-c, k) / C(n, k) per task, averaged (env_error samples are "
        f'left out of n, not_executed ones count as failures).</p><dl class="meta">{items}</dl></section>'
    )


def _family_sections(run: Run) -> str:
    """The sections the run's family adds (its `report_sections` hook in the
    family table); none for a run of an env this sandgym does not know."""
    try:
        fam = family_of_env(run.summary.env_id)
    except ValueError:
        return ""
    if fam.report_sections is None:
        return ""
    return str(load(fam.report_sections)(run.path, run.records))


def _latency(recs: list[EpisodeRecord]) -> str:
    ran = [r for r in recs if not (r.outcome == Outcome.NOT_EXECUTED.value and not r.steps)]
    left_out = len(recs) - len(ran)
    note = f"over {len(ran)} episodes that ran"
    if left_out:
        note += f"; {left_out} not_executed episodes with no steps left out"
    cards = []
    for phase in PHASES:
        values = [getattr(r.timings, phase) for r in ran]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        cards.append(
            f'<div class="hist-card" data-phase="{phase}"><h3>{esc(PHASE_LABELS[phase])}</h3>'
            f'<p class="pct"><code>{phase}</code> · P50 <b class="p50">{esc(fmt_seconds(p50))}</b> · '
            f'P95 <b class="p95">{esc(fmt_seconds(p95))}</b></p>{histogram(values, phase)}</div>'
        )
    return (
        f'<section id="latency"><h2>Latency by phase</h2><p class="sub">{esc(note)}.</p>'
        f'<div class="hists">{"".join(cards)}</div></section>'
    )


def _tests_text(r: EpisodeRecord) -> str:
    if not r.tests:
        return '<span class="na">—</span>'
    n_pass = sum(t.get("status") == "passed" for t in r.tests)
    return f"{n_pass}/{len(r.tests)}"


def _samples_table(recs: list[EpisodeRecord]) -> str:
    """Several samples per task (--samples, --epochs): one row per task, its samples counted."""
    by_task: dict[str, list[EpisodeRecord]] = {}
    for r in recs:
        by_task.setdefault(r.task_id, []).append(r)
    rows = []
    for tid in sorted(by_task, key=lambda t: (-sum(r.outcome == "passed" for r in by_task[t]), t)):
        group = by_task[tid]
        passed = sum(r.outcome == Outcome.PASSED.value for r in group)
        rewards = [r.reward for r in group if r.reward is not None]
        mean = sum(rewards) / len(rewards) if rewards else None
        counts: dict[str, int] = {}
        for r in group:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        tally = " ".join(f"{_badge(o)}&times;{n}" for o, n in sorted(counts.items()))
        rows.append(
            f'<tr data-task="{esc(tid)}" data-samples="{len(group)}" data-passed="{passed}">'
            f'<td class="task">{esc(tid)}</td><td class="num">{len(group)}</td><td class="num">{passed}</td>'
            f'<td class="num">{esc(fmt_pct(passed, len(group)))}</td><td>{reward_bar(mean)}</td>'
            f'<td class="num">{esc(fmt_reward(mean))}</td><td>{tally}</td></tr>'
        )
    return (
        '<section id="rewards"><h2>Samples by task</h2><p class="sub">One row per task: its samples, how many '
        "passed, and their outcomes; most passes first.</p><div><table><thead><tr><th>task</th>"
        '<th class="num">samples</th><th class="num">passed</th><th class="num">pass share</th><th></th>'
        f'<th class="num">mean reward</th><th>outcomes</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
        "</div></section>"
    )


def _tokens(run: Run) -> str:
    """Token totals of the run (the policy's usage reports), when it has any."""
    from .records import token_totals

    totals = token_totals(run.records)
    if not totals:
        return ""
    cells = "".join(
        f'<tr><td>{esc(k)}</td><td class="num" data-field="{esc(k)}">{v:,}</td></tr>' for k, v in sorted(totals.items())
    )
    return (
        '<section id="tokens"><h2>Tokens</h2><p class="sub">Totals over every episode, as the model endpoint '
        f"reported them.</p><table>{cells}</table></section>"
    )


def _reward_table(recs: list[EpisodeRecord]) -> str:
    if len({r.task_id for r in recs}) < len(recs):
        return _samples_table(recs)
    order = sorted(recs, key=lambda r: (r.reward is None, -(r.reward or 0.0), r.task_id, r.episode_id))
    rows = []
    for r in order:
        reward = '<span class="na">not scored</span>' if r.reward is None else f"{r.reward:.3f}"
        pr = '<span class="na">—</span>' if r.pass_rate is None else f"{r.pass_rate:.3f}"
        rows.append(
            f'<tr data-episode="{esc(r.episode_id)}" data-reward="{esc(r.reward)}">'
            f'<td class="task">{esc(r.task_id)}</td><td>{_badge(r.outcome)}{_status(r)}</td>'
            f'<td class="num">{reward}</td><td>{reward_bar(r.reward)}</td><td class="num">{pr}</td>'
            f'<td class="num">{_tests_text(r)}</td><td class="num">{esc(fmt_seconds(r.timings.total_s))}</td></tr>'
        )
    return (
        '<section id="rewards"><h2>Reward by task</h2><p class="sub">Sorted by reward, highest first; '
        "unscored episodes last.</p><div><table><thead><tr><th>task</th><th>outcome</th>"
        '<th class="num">reward</th><th></th><th class="num">pass rate</th><th class="num">tests passed</th>'
        f'<th class="num">total time</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></section>'
    )


def _failures(recs: list[EpisodeRecord]) -> str:
    rank = {name: i for i, name in enumerate(("violation", "env_error", "timeout", "failed", "not_executed"))}
    bad = sorted(
        (r for r in recs if r.outcome != Outcome.PASSED.value),
        key=lambda r: (rank.get(r.outcome, len(rank)), r.task_id, r.episode_id),
    )
    if not bad:
        return '<section id="failures"><h2>Failures and errors</h2><p>None: every episode passed.</p></section>'
    rows = "".join(
        f'<tr data-episode="{esc(r.episode_id)}"><td class="task">{esc(r.task_id)}</td>'
        f"<td>{_badge(r.outcome)}{_status(r)}</td>"
        f'<td class="num">{esc(fmt_reward(r.reward))}</td><td class="num">{len(r.attempts)}</td>'
        f'<td class="detail">{esc(failure_detail(r))}</td></tr>'
        for r in bad
    )
    return (
        f'<section id="failures"><h2>Failures and errors ({len(bad)})</h2><div><table>'
        '<thead><tr><th>task</th><th>outcome</th><th class="num">reward</th>'
        '<th class="num">verifier attempts</th><th>first line of the error or failing test</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div></section>"
    )


def _cost(recs: list[EpisodeRecord]) -> str:
    """Sandbox-seconds (and CPU-seconds where the backend reports them) per usable trajectory."""
    from .observability.cost import cost_of

    c = cost_of(recs)

    def cell(key: str, unit: str) -> str:
        v = c.get(key)
        return "n/a" if v is None else f"{v:.2f} {unit}"

    rows = "".join(
        f"<tr><td>{esc(label)}</td><td>{cell('sandbox_s_' + key, 's')}</td><td>{cell('cpu_s_' + key, 's')}</td></tr>"
        for label, key in (
            ("per episode", "per_episode"),
            (f"per verified success ({c['n_verified_successes']})", "per_verified_success"),
            (f"per scored episode ({c['n_scored']})", "per_scored_episode"),
        )
    )
    return (
        '<section id="cost"><h2>Cost per usable trajectory</h2><p class="sub">Sandbox-seconds: each episode '
        "holds its sandbox from start to end, plus its verifier's own sandboxes; CPU-seconds only where the "
        f"backend reports them. Total {c['sandbox_s']:.1f} sandbox-seconds.</p>"
        f"<table><tr><th></th><th>sandbox-seconds</th><th>CPU-seconds</th></tr>{rows}</table></section>"
    )


def render_report(run: Run) -> str:
    s, recs = run.summary, run.records
    banner = ""
    if run.interrupted:
        banner = (
            f'<div class="banner" id="interrupted"><b>Interrupted run:</b> {esc(SUMMARY)} is missing, '
            f"so this report covers the {len(recs)} episodes that finished; the summary was rebuilt "
            "from their records.</div>"
        )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"sandgym · {s.task_set} · {policy_label(s.policy)} · {s.run_id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        # Nothing may load or run: not a script, a font, an image or a style sheet.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f'<h1>sandgym run report</h1><p class="sub">{esc(s.env_id)} · {esc(s.task_set)} · '
        f"{esc(_policy_text(s.policy))} · generated {esc(generated)} by sandgym {esc(__version__)}</p>"
        f'{banner}<section id="run"><h2>Run</h2>{_meta(run)}</section>'
        f"{_headline(recs)}{_outcomes(recs)}{_statuses(recs)}{_pass_at_k(run)}{_family_sections(run)}"
        f"{_reward_table(recs)}{_latency(recs)}{_cost(recs)}{_tokens(run)}{_failures(recs)}"
        "</main></body></html>\n"
    )


def write_report(run_dir: str | Path | Run, out: Path | None = None) -> Path:
    """Write the run's report (default RUN_DIR/report.html); returns its path."""
    run = run_dir if isinstance(run_dir, Run) else load_run(run_dir)
    target = Path(out) if out is not None else run.path / REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    text = render_report(run)
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
