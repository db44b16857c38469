"""What a verifier returns: per-test results, attempts, a verdict, a reward."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from sandgym.outcomes import Outcome

RewardScheme = Literal["binary", "pass_rate"]


class TestResult(BaseModel):
    name: str
    status: Literal["passed", "failed", "error", "timeout"]
    detail: str = ""
    duration_s: float | None = None


class Attempt(BaseModel):
    outcome: Outcome
    detail: str = ""
    tests: list[TestResult] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    duration_s: float = 0.0
    create_s: float | None = None
    output: str = ""
    isolation: str | None = None
    # A family's own status name (SWE: FULL, PARTIAL, NO, ...); None elsewhere.
    status: str | None = None


class Verdict(BaseModel):
    verifier_version: str
    outcome: Outcome
    tests: list[TestResult] = Field(default_factory=list)
    detail: str = ""
    violations: list[str] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    # A family's own status name (SWE: FULL, PARTIAL, NO, ...); None elsewhere.
    status: str | None = None

    @classmethod
    def from_attempts(cls, verifier_version: str, attempts: list[Attempt]) -> Verdict:
        """The verdict of the last attempt, with every attempt kept."""
        final = attempts[-1]
        return cls(
            verifier_version=verifier_version,
            outcome=final.outcome,
            status=final.status,
            tests=final.tests,
            detail=final.detail,
            violations=final.violations,
            attempts=attempts,
        )

    @property
    def pass_rate(self) -> float:
        return sum(t.status == "passed" for t in self.tests) / len(self.tests) if self.tests else 0.0

    @property
    def verify_s(self) -> float:
        return sum(a.duration_s for a in self.attempts)

    def reward(self, scheme: RewardScheme = "binary") -> float | None:
        """None for an infrastructure error: it is not the model's score."""
        if self.outcome == Outcome.ENV_ERROR:
            return None
        if self.outcome == Outcome.VIOLATION:
            return 0.0
        if scheme == "pass_rate":
            return self.pass_rate
        return 1.0 if self.outcome == Outcome.PASSED else 0.0
