"""`make audit`'s pip-audit step: fails on a known vulnerability, says plainly when no vulnerability
service could be reached (and only then passes without an audit), fails on any other error, and fails
when a package pyproject.toml declares is missing from the report (not installed, so not audited)."""

import importlib.metadata
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "audit_dependencies.py"
spec = importlib.util.spec_from_file_location("audit_dependencies", SCRIPT)
audit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(audit)

DJANGO_OK = {"name": "django", "version": "5.2.8", "vulns": []}
NOT_FOUND = {
    "name": "django",
    "skip_reason": "Dependency not found on PyPI and could not be audited",
}
VULNERABLE = {
    "name": "django",
    "version": "5.0.0",
    "vulns": [{"id": "GHSA-xxxx", "fix_versions": ["5.0.1"], "aliases": [], "description": ""}],
}
OSV_DOWN = "requests.exceptions.ConnectionError: Max retries exceeded (NameResolutionError)"


REAL_DECLARED_PACKAGES = audit.declared_packages  # reads the real pyproject.toml


@pytest.fixture(autouse=True)
def _declared_django_only(monkeypatch):
    """The faked reports below hold django alone: the audit declares only django in these tests."""
    monkeypatch.setattr(audit, "declared_packages", lambda: {"django"})


def _fake_pip_audit(monkeypatch, answers: dict[str, list[dict] | str]):
    """pip-audit per service: a list is written as its JSON report; a string is its crash output."""

    def run(command, **kwargs):
        service = command[command.index("--vulnerability-service") + 1]
        answer = answers[service]
        if isinstance(answer, str):
            return subprocess.CompletedProcess(command, 1, "", answer)
        report = Path(command[command.index("--output") + 1])
        report.write_text(json.dumps({"dependencies": answer, "fixes": []}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(audit.subprocess, "run", run)


def test_a_known_vulnerability_fails_the_audit(monkeypatch, capsys):
    _fake_pip_audit(monkeypatch, {"pypi": [VULNERABLE, DJANGO_OK], "osv": OSV_DOWN})
    assert audit.main() == 1
    out = capsys.readouterr().out
    assert "django 5.0.0: GHSA-xxxx (fixed in 5.0.1)" in out
    assert "2 packages audited, 0 skipped, 1 known vulnerabilities" in out


def test_a_clean_audit_passes(monkeypatch, capsys):
    _fake_pip_audit(monkeypatch, {"pypi": [DJANGO_OK], "osv": OSV_DOWN})
    assert audit.main() == 0
    assert "1 packages audited, 0 skipped, 0 known vulnerabilities" in capsys.readouterr().out


def test_osv_is_asked_when_pypi_looks_nothing_up(monkeypatch, capsys):
    """A mirror without PyPI's per-version JSON makes pip-audit skip every package: no audit."""
    _fake_pip_audit(monkeypatch, {"pypi": [NOT_FOUND], "osv": [VULNERABLE]})
    assert audit.main() == 1
    assert "pip-audit (osv)" in capsys.readouterr().out


def test_no_reachable_service_is_reported_without_failing(monkeypatch, capsys):
    _fake_pip_audit(monkeypatch, {"pypi": [NOT_FOUND], "osv": OSV_DOWN})
    assert audit.main() == 0
    err = capsys.readouterr().err
    assert "vulnerability service unreachable, packages NOT audited" in err
    assert "pypi: no package could be looked up (1 skipped)" in err


def test_any_other_pip_audit_error_fails(monkeypatch):
    _fake_pip_audit(monkeypatch, {"pypi": "ResolutionImpossible: bad requirement", "osv": []})
    with pytest.raises(SystemExit, match="pip-audit failed"):
        audit.main()


def test_a_declared_package_missing_from_the_report_fails_and_is_named(monkeypatch, capsys):
    """openai is declared (the chat client needs it) but the report, i.e. the environment, lacks it:
    it was not audited, and the audit says so and fails. A skipped package is listed with why."""
    monkeypatch.setattr(audit, "declared_packages", lambda: {"django", "openai", "crowd-kit"})
    crowd_kit = {"name": "crowd_kit", "skip_reason": "Dependency not found on PyPI"}
    _fake_pip_audit(monkeypatch, {"pypi": [DJANGO_OK, crowd_kit], "osv": OSV_DOWN})
    assert audit.main() == 1
    out = capsys.readouterr().out
    assert "declared in pyproject.toml but not installed, so not audited: openai" in out
    assert "not audited: crowd_kit: Dependency not found on PyPI" in out


def test_the_audit_covers_the_main_dependencies_and_the_dev_and_serve_extras():
    """What `make venv` installs is what is audited: the main dependencies (openai among them), the
    dev extra (the parity tests' crowd-kit and ppi-python), the serve extra; not the gpu or bench
    extras, which `make venv` does not install."""
    declared = REAL_DECLARED_PACKAGES()
    assert {
        "django",
        "openai",
        "crowd-kit",
        "ppi-python",
        "pip-audit",
        "llama-cpp-python",
    } <= declared
    assert not {"deepspeed", "flash-attn", "trl"} & declared


def test_every_declared_package_is_installed_here():
    """This environment (and CI's, after `make venv`) has every declared package, so pip-audit's
    report of it covers them all."""
    missing = []
    for name in sorted(REAL_DECLARED_PACKAGES()):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    assert missing == []
