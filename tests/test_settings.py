"""Production settings: refuse to start without their secrets; `check --deploy` is clean."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = {
    "DJANGO_ENV": "production",
    "DJANGO_SECRET_KEY": "a-very-long-random-production-secret-key-0123456789-abcdefghijkl",
    "DJANGO_ALLOWED_HOSTS": "concord.example.org",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/concord",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings():
    """Every deployment check (HSTS, secure cookies, SSL redirect, secret key...) passes."""
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_secret_key():
    """A forgotten secret key stops the process instead of running with a known one."""
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DJANGO_ENV=production" in result.stderr


def test_production_refuses_to_start_without_database_url():
    """Production never falls back to the demo's SQLite file."""
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DATABASE_URL"}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "DATABASE_URL must be set" in result.stderr


def test_unknown_environment_name_is_rejected():
    """A typo in DJANGO_ENV is an error, not a silent development profile."""
    result = _manage("check", env={"DJANGO_ENV": "prod"})
    assert result.returncode != 0
    assert "DJANGO_ENV must be 'development' or 'production'" in result.stderr


def _run_settings_code(
    code: str, tmp_path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python with none of the project's variables set (var files under
    ``tmp_path``), plus ``env``: the settings as a new machine reads them."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_", "CELERY_", "CONCORD_", "CACHE_"))
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "CONCORD_VAR_DIR": str(tmp_path), **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )


def test_development_defaults_need_no_server(tmp_path):
    """With nothing set, the database is SQLite and the broker the local filesystem."""
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
        "from django.conf import settings as s;"
        "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL)"
    )
    result = _run_settings_code(code, tmp_path)
    assert result.stdout.split() == ["django.db.backends.sqlite3", "filesystem://localhost/"]


def _setting(name: str, env: dict[str, str], tmp_path) -> str:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
        f"from django.conf import settings as s; print(s.{name})"
    )
    return _run_settings_code(code, tmp_path, env).stdout.strip()


def test_sessions_are_cached_only_in_a_shared_cache(tmp_path):
    """Redis (shared by every web server) caches sessions; a cache in local files does not, or a
    session ended through one server could live on in another's cache."""
    redis = {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}
    engine = "django.contrib.sessions.backends."
    assert _setting("SESSION_ENGINE", redis, tmp_path) == engine + "cached_db"
    assert _setting("SESSION_ENGINE", {}, tmp_path) == engine + "db"
    rabbitmq = {"CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"}
    assert _setting("SESSION_ENGINE", rabbitmq, tmp_path) == engine + "db"


def test_api_basic_auth_is_off_in_production_unless_enabled(tmp_path):
    """Production accepts API tokens and sessions only; CONCORD_API_BASIC_AUTH=true turns HTTP
    Basic back on; development keeps it (scripts and the fuzz test use it)."""
    name = 'REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]'
    basic = "common.security.StrictBasicAuthentication"
    token = "common.api_auth.ApiTokenAuthentication"
    production = _setting(name, PRODUCTION_ENV, tmp_path)
    assert token in production and basic not in production
    enabled = _setting(name, {**PRODUCTION_ENV, "CONCORD_API_BASIC_AUTH": "true"}, tmp_path)
    assert basic in enabled
    assert basic in _setting(name, {}, tmp_path)


def test_the_demo_sqlite_database_takes_write_locks_up_front_and_keeps_a_write_ahead_log(tmp_path):
    """The demo's web process and two workers share one SQLite file. A connection there runs in
    WAL mode (the gpu worker's metric writes never block the others' reads) and begins every
    transaction IMMEDIATE, so a writer waits its turn (timeout 20 s) instead of being refused at
    once when it read first; before, an import sat in "validating" while a tiny run wrote
    metrics."""
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
        "from django.db import connection;"
        "cursor = connection.cursor(); cursor.execute('PRAGMA journal_mode');"
        "options = connection.settings_dict['OPTIONS'];"
        "print(cursor.fetchone()[0], options['transaction_mode'], options['timeout'])"
    )
    result = _run_settings_code(code, tmp_path)
    assert result.stdout.split() == ["wal", "IMMEDIATE", "20"]


def test_trusted_proxies_are_read_and_a_bad_entry_refuses_to_start(tmp_path):
    """CONCORD_TRUSTED_PROXIES is a comma-separated list of networks (empty by default); an entry
    that is no address or network stops the settings with the variable's name and the entry."""
    assert _setting("CONCORD_TRUSTED_PROXIES", {}, tmp_path) == "[]"
    assert _setting(
        "CONCORD_TRUSTED_PROXIES", {"CONCORD_TRUSTED_PROXIES": "10.0.0.0/8,::1"}, tmp_path
    ) == str(["10.0.0.0/8", "::1"])
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _run_settings_code(
            "import config.settings", tmp_path, {"CONCORD_TRUSTED_PROXIES": "10.0.0.0/8,proxy.lan"}
        )
    assert "CONCORD_TRUSTED_PROXIES: 'proxy.lan' is not an IP address" in failed.value.stderr


def test_single_sign_on_is_off_by_default_and_a_half_configuration_refuses_to_start(tmp_path):
    """No CONCORD_OIDC_CLIENT_ID: off. A client id without the issuer and endpoints, or a role map
    naming a role that does not exist, stops the settings and says which variables."""
    assert _setting("CONCORD_OIDC_ENABLED", {}, tmp_path) == "False"
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _run_settings_code(
            "import config.settings",
            tmp_path,
            {"CONCORD_OIDC_CLIENT_ID": "concord", "CONCORD_OIDC_ISSUER": "https://idp.example"},
        )
    assert (
        "single sign-on needs CONCORD_OIDC_CLIENT_SECRET, CONCORD_OIDC_AUTHORIZATION_ENDPOINT, "
        "CONCORD_OIDC_TOKEN_ENDPOINT, CONCORD_OIDC_USERINFO_ENDPOINT, CONCORD_OIDC_JWKS_ENDPOINT"
        in failed.value.stderr
    )
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _run_settings_code(
            "import config.settings", tmp_path, {"CONCORD_OIDC_ROLE_MAP": "admins=Superuser"}
        )
    assert "CONCORD_OIDC_ROLE_MAP names unknown roles ['Superuser']" in failed.value.stderr
