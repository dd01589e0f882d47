"""The report of `agentrl envs check` (`agentrl/devtools/service_check.py`): its findings, its verdict and
exit code, and the lines it prints.

What this is: `CheckReport` (the env checked, the header, the findings in order; the failures and warnings
counted, `exit_code` for CI) and `format_report`, pure.

What this is not: how the findings are reached (`service_check_play.py`, `service_check_findings.py`), or
the CLI that prints the report (`agentrl/cli/envs.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.devtools.service_check_types import Finding


@dataclass
class CheckReport:
    """The findings of one check, with what was checked."""

    env_id: str
    header: str
    findings: list[Finding]

    @property
    def failures(self) -> int:
        return sum(finding.status == "FAIL" for finding in self.findings)

    @property
    def warnings(self) -> int:
        return sum(finding.status == "warn" for finding in self.findings)

    def exit_code(self, strict: bool = False) -> int:
        """0 when nothing failed (and, with `strict`, nothing warned), else 1."""
        return 1 if self.failures or (strict and self.warnings) else 0


def format_report(report: CheckReport) -> str:
    """The report as the lines `agentrl envs check` prints."""
    lines = [f"envs check {report.header}"]
    lines += [f"  {f.status:5s} {f.topic}: {f.message}" for f in report.findings]
    verdict = "FAIL" if report.failures else "PASS"
    lines.append(f"result: {verdict} ({report.failures} failures, {report.warnings} warnings)")
    return "\n".join(lines)
