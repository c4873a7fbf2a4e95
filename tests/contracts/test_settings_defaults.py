"""A setting's default has one home, its field in contracts/settings.py: the modules that read a
setting take the default from there. Each test changes the declared default and
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


@pytest.mark.parametrize(("env", "reader"), [
    ("DIAGNOSIS_MODEL_CACHE", "program.lm.models:cache_dir"),
    ("DIAGNOSIS_PROBE_CACHE", "program.lm.native:probe_cache_dir"),
    ("DIAGNOSIS_PREFIX_CACHE", "program.lm.prefix_cache:settings"),
])
def test_the_runtimes_directories_follow_the_declared_defaults(declared, monkeypatch, tmp_path, env, reader):
    import importlib

    module, name = reader.split(":")
    monkeypatch.setenv("HOME", str(tmp_path))
    declared(env, "~/declared/here")
    found = getattr(importlib.import_module(module), name)()
    assert (found[0] if isinstance(found, tuple) else found) == tmp_path / "declared" / "here"


def test_the_runtimes_other_settings_follow_the_declared_defaults(declared, monkeypatch):
    from program.lm.engine import lm_spec
    from program.lm.prefix_cache import settings
    from program.lm.server_lm import schema_setting
    from program.stages.compiled import PROJECT_DIR, compiled_dir

    declared("DIAGNOSIS_LM", "openai/declared")
    declared("DIAGNOSIS_LM_SCHEMA", "gbnf")
    declared("DIAGNOSIS_PREFIX_CACHE_MB", "3")
    declared("DIAGNOSIS_COMPILED_DIR", "elsewhere")
    assert lm_spec() == "openai/declared" and lm_spec("embedded") == "embedded"
    assert schema_setting() == "gbnf"
    assert settings()[1] == 3 * 2**20
    assert compiled_dir() == PROJECT_DIR / "elsewhere"
