"""Every `DIAGNOSIS_*` setting in one place: its name, what it holds, its default and its meaning.

Each is read from the environment when it is used (`current()`), so a setting changed between two
diagnoses, or by a test, is the one the next one reads. Values are kept as the text that was set:
the code that uses a setting parses it and names it in its error (`DIAGNOSIS_PROMETHEUS_TIMEOUT
must be a positive number of seconds`), so a bad value fails only what reads it. The README's
settings table is checked against this class (tests/test_readme.py).
"""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PREFIX = "DIAGNOSIS_"


def _setting(meaning: str, holds: str = "text", default: str | None = None):
    """A setting unset (or set to nothing) is None; `default` is what its reader then uses, as text
    (`default()` gives it to the reader: this is its one home)."""
    return Field(None, description=meaning, json_schema_extra={"holds": holds, "default": default})


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    lm: str | None = _setting("the model: a DSPy/litellm model string, `embedded` or `embedded-small`", "model",
                              "embedded")
    lm_api_base: str | None = _setting("the api_base of a self-hosted endpoint", "URL")
    lm_schema: str | None = _setting("how an OpenAI-compatible server gets each narrowed schema",
                                     "json_schema, gbnf, json_object, none or auto", "auto")
    lm_max_tokens: str | None = _setting("the most tokens one LM reply may have", "whole number", "2000")
    db: str | None = _setting("the SQLAlchemy URL of the audit store (SQLite or PostgreSQL)", "URL",
                              "sqlite:///~/.grounded-diagnosis/audit.db")
    language: str | None = _setting("the answer's language: of the sentences code writes and of what the executor, "
                                    "verifier and composer write", "zh, en or auto", "auto")
    prometheus_url: str | None = _setting("a Prometheus server for query_metrics", "URL")
    prometheus_service_label: str | None = _setting("the alert label that names the service", "label", "service")
    prometheus_timeout: str | None = _setting("seconds for each tool call to the Prometheus server", "seconds", "5")
    logs_dir: str | None = _setting("a directory of log files for query_logs", "directory")
    log_sources: str | None = _setting("a TOML file mapping globs under the log directory to services", "file")
    logs_max_bytes: str | None = _setting("how much log text a search reads, newest first", "size (K, M, G)", "64M")
    runbooks_dir: str | None = _setting("a directory of Markdown runbooks for lookup_knowledge", "directory")
    synonyms: str | None = _setting("a JSON file of synonym groups for log search and scope", "file")
    world: str | None = _setting("the fixture world's directory, behind every tool not pointed elsewhere",
                                 "directory", "tools/world")
    compiled_dir: str | None = _setting("where optimize.py saves compiled programs", "directory", "compiled")
    model_cache: str | None = _setting("where the embedded models are assembled", "directory",
                                       "~/.cache/grounded-diagnosis/models")
    probe_cache: str | None = _setting("where passed engine probes are remembered", "directory",
                                       "~/.cache/grounded-diagnosis/probes")
    prefix_cache: str | None = _setting("where stage prefix states are saved", "directory",
                                        "~/.cache/grounded-diagnosis/prefixes")
    prefix_cache_mb: str | None = _setting("the bound of the prefix states' directory (0: off)", "megabytes", "1024")
    wheel_cache: str | None = _setting("where make install keeps the llama-cpp-python wheels it built "
                                       "(read by scripts/llama-wheel.sh)", "directory",
                                       "~/.cache/grounded-diagnosis/wheels")
    api_token: str | None = _setting("the bearer token of every serve route but /healthz", "token")
    serve_hosts: str | None = _setting("Host names serve answers besides those it is bound as", "names")
    serve_queue: str | None = _setting("alerts waiting before serve answers 503", "whole number", "100")
    serve_concurrency: str | None = _setting("diagnoses at a time with a provider LM", "whole number", "4")
    serve_max_body: str | None = _setting("request body bytes serve reads", "whole number", "1048576")


def current() -> Settings:
    """The settings as the environment holds them now."""
    return _read(tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(PREFIX))))


@lru_cache(maxsize=8)
def _read(environment: tuple[tuple[str, str], ...]) -> Settings:
    # Reading the environment through pydantic-settings costs milliseconds; the same values, the same settings.
    return Settings()


def env_name(field: str) -> str:
    return PREFIX + field.upper()


def field_name(env: str) -> str:
    return env.removeprefix(PREFIX).lower()


def value(env: str) -> str | None:
    """The value of the setting named `env` (`DIAGNOSIS_LOGS_DIR`), None when unset or empty. A source
    registered at run time (tools/sources/active.py's BACKENDS) may name settings of its own in its
    OPTIONS; those are not this project's, and are read from the environment as they are."""
    if field_name(env) in Settings.model_fields:
        return getattr(current(), field_name(env)) or None
    return os.environ.get(env) or None


def default(env: str) -> str | None:
    """The text the setting named `env` is read as when it is unset; None when it has no default."""
    return Settings.model_fields[field_name(env)].json_schema_extra["default"]


def value_or_default(env: str) -> str | None:
    """The value of the setting named `env` as set, else its default."""
    return value(env) or default(env)


NAMES = tuple(env_name(field) for field in Settings.model_fields)
