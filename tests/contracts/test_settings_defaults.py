"""A setting's default has one home, its field in contracts/settings.py: the modules that read a
setting outside the LM layer take the default from there. Each test changes the declared default and
sees the reader follow; a default written again in the reader would not."""

import pytest

from contracts.settings import Settings, default, field_name
from program.entry.server import ServeSettings
from program.evidence.language import answer_language
from program.store.urls import default_db_url
from tools.sources.logs.directory import max_bytes
from tools.sources.prometheus import service_label


@pytest.fixture
def declared(monkeypatch):
    """Declare another default for a setting, for the test's length."""
    def declare(env: str, text: str) -> None:
        extra = dict(Settings.model_fields[field_name(env)].json_schema_extra)
        monkeypatch.setattr(Settings.model_fields[field_name(env)], "json_schema_extra", {**extra, "default": text})
        monkeypatch.delenv(env, raising=False)
    return declare


def test_default_gives_the_declared_text_and_none_for_a_setting_without_one():
    assert default("DIAGNOSIS_LOGS_MAX_BYTES") == "64M"
    assert default("DIAGNOSIS_PROMETHEUS_URL") is None


def test_the_log_search_bound_follows_the_declared_default(declared):
    assert max_bytes(None) == 64 * 2**20
    declared("DIAGNOSIS_LOGS_MAX_BYTES", "3K")
    assert max_bytes(None) == 3 * 2**10


def test_the_prometheus_service_label_follows_the_declared_default(declared):
    declared("DIAGNOSIS_PROMETHEUS_SERVICE_LABEL", "app")
    assert service_label() == "app"
    assert service_label("job") == "job"


def test_the_serve_counts_follow_the_declared_defaults(declared, monkeypatch):
    declared("DIAGNOSIS_SERVE_QUEUE", "7")
    monkeypatch.setenv("DIAGNOSIS_SERVE_CONCURRENCY", "2")
    settings = ServeSettings.from_env()
    assert (settings.queue, settings.concurrency, settings.max_body) == (7, 2, 2**20)


def test_the_answer_language_follows_the_declared_default(declared, monkeypatch):
    monkeypatch.delenv("DIAGNOSIS_LANGUAGE", raising=False)
    assert answer_language("is order-service firing?") == "en"
    declared("DIAGNOSIS_LANGUAGE", "zh")
    assert answer_language("is order-service firing?") == "zh"


def test_the_audit_database_follows_the_declared_default(declared, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    declared("DIAGNOSIS_DB", "sqlite:///~/elsewhere/records.db")
    assert default_db_url() == f"sqlite:///{tmp_path / 'elsewhere' / 'records.db'}"
    assert (tmp_path / "elsewhere").is_dir()
