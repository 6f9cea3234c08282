"""Audit the installed Python packages for known vulnerabilities with pip-audit (`make audit`).

Asks PyPI's vulnerability data first, then OSV's. Exit status:

- 1 when a vulnerability is found (each one is printed with the versions that fix it);
- 0 when the packages were audited and nothing was found;
- 0, with "vulnerability service unreachable" on stderr, when no service could be asked about any
  package: a network failure, or a mirror that does not serve the per-version JSON pip-audit reads
  (it then reports every package "not found on PyPI", which is no audit at all). A CI machine that
  reaches only a package index cannot audit; that is said plainly, not passed off as a clean result.

Any other failure of pip-audit fails the audit, and so does a package that pyproject.toml declares
(the main dependencies and the `dev` and `serve` extras that `make venv` installs) but that is not in
pip-audit's report: a declared package that was not installed here was not audited. Vulnerabilities
accepted on purpose go in IGNORED with the reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
AUDITED_EXTRAS = ("dev", "serve")  # what `make venv` installs besides the main dependencies
SERVICES = ("pypi", "osv")
# {"GHSA-...": "why it does not apply here"}; passed to pip-audit as --ignore-vuln.
IGNORED: dict[str, str] = {}
# What pip-audit prints when it could not reach the service (requests' errors, DNS, proxies).
NETWORK_ERRORS = (
    "ConnectionError",
    "ConnectTimeout",
    "ReadTimeout",
    "ProxyError",
    "NameResolutionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


class Unreachable(Exception):
    """The service could not be asked about any package (the message says why)."""


def canonical_name(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503): crowd_kit, Crowd.Kit -> crowd-kit."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_packages(pyproject: Path = PYPROJECT) -> set[str]:
    """The canonical names of the main dependencies and of the AUDITED_EXTRAS in pyproject.toml."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in AUDITED_EXTRAS:
        requirements += project.get("optional-dependencies", {}).get(extra, [])
    return {
        canonical_name(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r).group(1))
        for r in requirements
    }


def _audit(service: str) -> list[dict]:
    """The dependencies as pip-audit reports them: name, version, vulns (or skip_reason)."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "audit.json"
        command = [
            sys.executable, "-m", "pip_audit", "--vulnerability-service", service,
            "--format", "json", "--output", str(report), "--progress-spinner", "off",
            "--skip-editable", "--timeout", "30",
            *(argument for vuln in IGNORED for argument in ("--ignore-vuln", vuln)),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if not report.exists():
            output = done.stdout + done.stderr
            if any(marker in output for marker in NETWORK_ERRORS):
                last = output.strip().splitlines()[-1] if output.strip() else ""
                raise Unreachable(last[:300])
            sys.stderr.write(output)
            raise SystemExit(f"pip-audit failed (exit {done.returncode}) with {service}")
        dependencies = json.loads(report.read_text())["dependencies"]
    if not any("skip_reason" not in d for d in dependencies):
        raise Unreachable(f"no package could be looked up ({len(dependencies)} skipped)")
    return dependencies


def main() -> int:
    failures: list[str] = []
    for service in SERVICES:
        try:
            dependencies = _audit(service)
        except Unreachable as exc:
            failures.append(f"{service}: {exc}")
            continue
        audited = [d for d in dependencies if "skip_reason" not in d]
        skipped = [d for d in dependencies if "skip_reason" in d]
        found = [(d, v) for d in audited for v in d["vulns"]]
        for dependency, vuln in found:
            fixes = ", ".join(vuln["fix_versions"]) or "no fixed version yet"
            print(f"{dependency['name']} {dependency['version']}: {vuln['id']} (fixed in {fixes})")
        print(
            f"pip-audit ({service}): {len(audited)} packages audited, {len(skipped)} skipped, "
            f"{len(found)} known vulnerabilities"
        )
        for dependency in skipped:
            print(f"not audited: {dependency['name']}: {dependency['skip_reason']}")
        missing = sorted(declared_packages() - {canonical_name(d["name"]) for d in dependencies})
        if missing:
            print(
                "declared in pyproject.toml but not installed, so not audited: "
                + ", ".join(missing)
                + " (run `make venv`)"
            )
        return 1 if found or missing else 0
    print(
        "pip-audit: vulnerability service unreachable, packages NOT audited ("
        + "; ".join(failures)
        + ")",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
