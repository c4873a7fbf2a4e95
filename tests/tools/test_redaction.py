"""Credentials the process was given are hidden wherever they appear, whatever the URL's shape."""

from __future__ import annotations

import pytest

from tools import redaction
from tools.redaction import HIDDEN, hidden, hide_credentials, keep_secrets_of

TOKEN = "tok-3f9a7c21e5"


def test_a_password_in_any_urls_userinfo_is_hidden_and_the_rest_kept():
    assert hide_credentials("GET http://am:p@ss@host:9093/api failed") == f"GET http://am:{HIDDEN}@host:9093/api failed"
    assert hide_credentials("postgresql+psycopg://u:x@db/audit") == f"postgresql+psycopg://u:{HIDDEN}@db/audit"
    assert hide_credentials("no url here: user:pass@host") == "no url here: user:pass@host"


@pytest.mark.parametrize("setting", ["DIAGNOSIS_PROMETHEUS_URL", "DIAGNOSIS_LM_API_BASE"])
def test_the_query_and_fragment_of_a_url_setting_are_hidden_in_any_text_and_any_form(monkeypatch, setting):
    signature = "Zm9v/YmFy+cXV4=="  # base64, as a signed URL carries it: percent-encoded in the URL
    monkeypatch.setenv(setting, f"https://127.0.0.1:9090/v1?access_token={TOKEN}&sig=Zm9v%2FYmFy%2BcXV4%3D%3D"
                                f"&limit=5#frag-{TOKEN}")
    text = (f"error at https://127.0.0.1:9090/v1?access_token={TOKEN}&sig=Zm9v%2FYmFy%2BcXV4%3D%3D&limit=5; "
            f"signed {signature}; Bearer {TOKEN}; fragment frag-{TOKEN}")
    shown = hide_credentials(text)
    assert TOKEN not in shown and signature not in shown and "Zm9v%2F" not in shown
    assert f"access_token={HIDDEN}&sig={HIDDEN}&limit=5" in shown  # a value too short to be a secret is kept


def test_a_token_setting_and_a_credential_named_variable_are_hidden(monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_API_TOKEN", TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    monkeypatch.setenv("HOME_DIRECTORY_NAME", "not-a-secret-at-all")
    shown = hide_credentials(f"401 for {TOKEN}; key sk-test-0123456789; home not-a-secret-at-all")
    assert shown == f"401 for {HIDDEN}; key {HIDDEN}; home not-a-secret-at-all"


def test_a_url_given_on_a_command_line_is_kept_secret_once_given(monkeypatch):
    monkeypatch.setattr(redaction, "_GIVEN", set())
    secret = "sig-77a0b1c2d3e4"
    assert secret in hide_credentials(f"Alertmanager at http://am:9093/?sig={secret} does not answer")
    keep_secrets_of(f"http://am:9093/?sig={secret}")
    assert secret not in hide_credentials(f"Alertmanager at http://am:9093/?sig={secret} does not answer")


def test_a_value_that_changed_is_named_in_the_changes(monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_API_TOKEN", TOKEN)
    changes: list[str] = []
    shown = hidden({"output": [f"token {TOKEN}", "plain"]}, "", changes)
    assert shown == {"output": [f"token {HIDDEN}", "plain"]}
    assert changes == ["output[0] (a credential hidden)"]


def test_a_plain_word_a_setting_or_variable_holds_is_never_hidden_in_the_evidence(monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_DB", "postgresql://gd@db/audit?sslmode=verify-full&target_session_attrs=read-write"
                                       "&application_name=grounded-diagnosis")
    monkeypatch.setenv("POSTGRES_PASSWORD", "postgres")
    line = "postgres[811] FATAL: connection to grounded-diagnosis is read-write; sslmode=verify-full"
    assert hide_credentials(line) == line


def test_libpqs_password_variable_is_a_credential(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "s3cretpassw0rd")
    monkeypatch.setenv("MYSQL_PWD", "an0ther-Secret")
    assert hide_credentials("auth s3cretpassw0rd / an0ther-Secret") == f"auth {HIDDEN} / {HIDDEN}"


def test_the_working_directory_is_no_credential(monkeypatch, tmp_path):
    monkeypatch.setenv("PWD", str(tmp_path / "work-2026"))
    monkeypatch.setenv("OLDPWD", str(tmp_path / "old-2026"))
    line = f'File "{tmp_path}/work-2026/app.py", line 3 (was in {tmp_path}/old-2026)'
    assert hide_credentials(line) == line
