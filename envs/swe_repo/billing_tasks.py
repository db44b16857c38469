"""Writes task_specs/swe_repo/billing-v1 from the bundled billing project.

Each task is a set of text edits that inject a bug into the pristine
project (and, for hidden-test tasks, take tests out of the start state).
The script turns the edits into `base_patch` (pristine -> start), the gold
`patch` (start -> fixed source) and the `test_patch` (start -> the tests
the verifier adds), runs the tests in sandboxes to derive FAIL_TO_PASS and
PASS_TO_PASS, and checks that the gold patch scores FULL and the empty
diff scores NO.

    .venv/bin/python -m sandgym.envs.swe_repo.billing_tasks
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NotRequired, TypedDict

from sandgym.runtimes import get_runtime
from sandgym.specs import TaskSet, TaskSetMeta, bundled_dir
from sandgym.specs.swe_repo import RepoSource, SWEHidden, SWETask, SWETaskPair
from sandgym.verifiers.swe_repo.checkout import git_env
from sandgym.verifiers.swe_repo.host import verify
from sandgym.verifiers.swe_repo.sandbox import run_tests
from sandgym.verifiers.swe_repo.sources import bundled_projects_dir

OUT = bundled_dir() / "swe_repo" / "billing-v1"

# (file, old, new): applied in order; `old` must occur exactly once.
Edit = tuple[str, str, str]


class HandWritten(TypedDict):
    id: str
    title: str
    issue: str
    bug: list[Edit]  # pristine -> start state (reversed, the fix)
    hide: list[Edit]  # tests taken out of the start state; the verifier's tests have them
    new_tests: NotRequired[dict[str, str]]  # file -> text: tests only the verifier's tree has


TASKS: list[HandWritten] = [
    {
        "id": "billing/round-half-even",
        "title": "Amounts ending in half a cent round down",
        "issue": """\
Invoice totals are sometimes one cent lower than what our accounting system computes.

Example: a line of EUR 0.125 shows up as EUR 0.12 on the invoice, and USD 2.675 as USD 2.67.
Our finance team expects commercial rounding (half a cent always rounds away from zero), so
those should be 0.13 and 2.68. Negative amounts (credit notes) are affected the same way:
-0.125 should become -0.13.

It looks like it only happens when the digit after the last cent is exactly 5.
""",
        "bug": [
            (
                "billing/money.py",
                "from decimal import ROUND_HALF_UP, Decimal",
                "from decimal import ROUND_HALF_EVEN, Decimal",
            ),
            ("billing/money.py", "rounding=ROUND_HALF_UP)", "rounding=ROUND_HALF_EVEN)"),
        ],
        "hide": [],
    },
    {
        "id": "billing/tax-on-gross",
        "title": "VAT is charged on the amount before the discount",
        "issue": """\
When a line item has a discount, the VAT on the invoice is too high.

    inv = Invoice("EUR", "DE").add(LineItem("Widget", Decimal("100.00"), discount=PercentOff(Decimal(10))))
    inv.subtotal()  # EUR 90.00, fine
    inv.tax()       # EUR 19.00, expected EUR 17.10 (19% of the discounted 90.00)

Tax must be computed on each line's net amount (after its discount). Tax-exempt lines must
stay untaxed.
""",
        "bug": [
            (
                "billing/invoice.py",
                "total = total + (line.net(self.currency) * rate).rounded()",
                "total = total + (line.gross(self.currency) * rate).rounded()",
            )
        ],
        "hide": [],
    },
    {
        "id": "billing/fixed-discount-cap",
        "title": "A fixed discount larger than the line makes the invoice negative",
        "issue": """\
Applying a voucher worth more than the item makes the invoice total negative.

    inv = Invoice("EUR", "DE").add(LineItem("Gift card", Decimal("5.00"), discount=FixedOff(eur("8.00"))))
    inv.total()  # EUR -3.57

A discount can at most bring a line down to zero; it must never turn a line into a credit.
""",
        "bug": [
            (
                "billing/discounts.py",
                "        return self.value if self.value <= gross else gross\n",
                "        return self.value\n",
            )
        ],
        "hide": [
            (
                "tests/test_discounts.py",
                """

def test_fixed_off_is_capped_at_gross():
    assert FixedOff(eur("15.00")).amount(eur("10.00"), 1) == eur("10.00")
""",
                "",
            ),
            (
                "tests/test_invoice.py",
                """

def test_fixed_discount_never_makes_a_line_negative():
    inv = Invoice("EUR", "DE").add(LineItem("Gift card", Decimal("5.00"), discount=FixedOff(eur("8.00"))))
    assert inv.subtotal() == eur("0.00")
    assert inv.total() == eur("0.00")
""",
                "",
            ),
        ],
    },
    {
        "id": "billing/bulk-threshold",
        "title": "Bulk discount is not applied at exactly the minimum quantity",
        "issue": """\
Our price list says "10% off from 100 units", and `BulkDiscount(100, Decimal(10))` is what we
configured. An order of exactly 100 bolts gets no discount at all; 101 bolts do get it.
The discount should apply as soon as the quantity reaches `min_quantity`.
""",
        "bug": [
            (
                "billing/discounts.py",
                "        if quantity >= self.min_quantity:\n",
                "        if quantity > self.min_quantity:\n",
            )
        ],
        "hide": [
            (
                "tests/test_discounts.py",
                """

def test_bulk_discount_at_threshold():
    assert BulkDiscount(10, Decimal(5)).amount(eur("100.00"), 10) == eur("5.00")
""",
                "",
            ),
            (
                "tests/test_invoice.py",
                """

def test_bulk_discount_on_invoice():
    inv = Invoice("EUR", "US-OR").add(LineItem("Bolt", Decimal("0.50"), quantity=100,
                                               discount=BulkDiscount(100, Decimal(10))))
    assert inv.discount_total() == eur("5.00")
    assert inv.total() == eur("45.00")
""",
                "",
            ),
        ],
        # A new test file, added by the test patch (pre-creating it must not help).
        "new_tests": {
            "tests/test_bulk_pricing.py": """\
from decimal import Decimal

from billing import BulkDiscount, Invoice, LineItem, Money


def usd(x):
    return Money(Decimal(x), "USD")


def test_threshold_quantity_gets_the_discount():
    assert BulkDiscount(100, Decimal(10)).amount(usd("50.00"), 100) == usd("5.00")


def test_one_below_threshold_pays_full_price():
    assert BulkDiscount(100, Decimal(10)).amount(usd("49.50"), 99) == usd("0")


def test_invoice_at_threshold():
    inv = Invoice("USD", "US-OR").add(LineItem("Bolt", Decimal("0.50"), quantity=100,
                                               discount=BulkDiscount(100, Decimal(10))))
    assert str(inv.total()) == "USD 45.00"
"""
        },
    },
    {
        "id": "billing/zero-decimal-display",
        "title": "Yen amounts are printed with two decimals",
        "issue": """\
`str(Money(...))` prints every currency with two decimals: a JPY 1,500 charge shows up as
"JPY 1,500.00" on invoices, and a Bahraini dinar amount of BHD 12.345 as "BHD 12.35" (wrongly
rounded, too). Amounts should be printed with the currency's own number of decimals
(`minor_units`), with thousands separators as before.
""",
        "bug": [
            (
                "billing/money.py",
                'return f"{self.currency} {round_amount(self.amount, self.currency):,}"',
                'return f"{self.currency} {self.amount:,.2f}"',
            )
        ],
        "hide": [],
    },
]


def edit(tree: Path, edits: list[Edit]) -> None:
    for rel, old, new in edits:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{rel}: edit target occurs {text.count(old)} times: {old[:60]!r}")
        path.write_text(text.replace(old, new))


def diff(a: Path, b: Path) -> str:
    """git diff from tree a to tree b, with a/ b/ prefixes relative to the trees."""
    work = Path(tempfile.mkdtemp())
    try:
        repo = work / "r"
        shutil.copytree(a, repo)
        env = git_env(str(work))

        def run(*args: str) -> None:
            subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)

        run("init", "-q")
        run("add", "-A", "-f")
        run("commit", "-q", "-m", "a")
        for p in list(repo.iterdir()):
            if p.name != ".git":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        for p in b.iterdir():
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, repo / p.name)
        run("add", "-A", "-f")
        return subprocess.run(
            ["git", "diff", "--cached", "--binary"], cwd=repo, env=env, check=True, capture_output=True, text=True
        ).stdout
    finally:
        shutil.rmtree(work)


def main() -> int:
    pristine = bundled_projects_dir() / "billing"
    runtime = get_runtime("local")
    work = Path(tempfile.mkdtemp(prefix="billing-tasks-"))
    pairs = []
    try:
        for t in TASKS:
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            start, fixed, verified = work / f"{t['id'].split('/')[1]}-start", None, None
            shutil.copytree(pristine, start, ignore=ignore)
            edit(start, t["bug"] + t["hide"])
            fixed = start.with_name(start.name + "-fixed")
            shutil.copytree(start, fixed)
            edit(fixed, [(f, new, old) for f, old, new in t["bug"]])
            verified = start.with_name(start.name + "-tests")
            shutil.copytree(start, verified)
            for rel in {f for f, _, _ in t["hide"]}:  # the hidden tests come back as in the pristine project
                shutil.copy2(pristine / rel, verified / rel)
            for rel, text in t.get("new_tests", {}).items():
                (verified / rel).write_text(text)
            test_patch = diff(start, verified)
            # Which tests fail at the start state and pass when fixed (with the hidden tests in).
            full_fixed = verified.with_name(verified.name + "-fixed")
            shutil.copytree(verified, full_fixed)
            edit(full_fixed, [(f, new, old) for f, old, new in t["bug"]])
            env_default = SWETask(
                id="x", problem_statement="x", repo=RepoSource(kind="bundled", name="billing")
            ).environment
            broken = run_tests(runtime, verified, env_default, None, 120)
            good = run_tests(runtime, full_fixed, env_default, None, 120)
            assert broken.valid and good.valid, (broken.problem, good.problem)
            f2p = sorted(x for x, s in good.statuses.items() if s == "passed" and broken.status(x) != "passed")
            p2p = sorted(x for x, s in good.statuses.items() if s == "passed" and broken.status(x) == "passed")
            assert f2p, t["id"]
            visible = SWETask(
                id=t["id"],
                title=t["title"],
                problem_statement=t["issue"],
                repo=RepoSource(kind="bundled", name="billing"),
                base_patch=diff(pristine, start),
                visible_tests=["tests"],
                timeout_s=120,
                source="sandgym (hand-written)",
                tags=["billing", "bundled"],
            )
            hidden = SWEHidden(
                id=t["id"], patch=diff(start, fixed), test_patch=test_patch, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p
            )
            pair = SWETaskPair(visible=visible, hidden=hidden)
            gold = verify(pair, hidden.patch, runtime)
            null = verify(pair, "", runtime)
            print(f"{t['id']}: F2P {len(f2p)} P2P {len(p2p)} gold {gold.status} null {null.status}")
            if gold.status != "FULL" or null.status != "NO":
                raise SystemExit(f"{t['id']}: validation failed: {gold.detail} / {null.detail}")
            pairs.append(pair)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        runtime.close()
    if OUT.exists():
        shutil.rmtree(OUT)
    meta = TaskSetMeta(
        name="billing-v1",
        family="swe_repo",
        version=1,
        description="Hand-written issues on the bundled billing project (sandgym's own code).",
    )
    TaskSet(meta, pairs).write(OUT)
    print(f"wrote {len(pairs)} tasks to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
