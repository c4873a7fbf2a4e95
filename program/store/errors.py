"""What the audit store raises: one record it cannot read, an id it refuses, a URL it cannot use, and
every other fault of the database, each saying what is wrong."""

from __future__ import annotations


class AuditStoreError(RuntimeError):
    """The audit database cannot be used as asked; the message says why and where."""


class AuditURLError(AuditStoreError):
    """The URL names no database this store can use: a bad setting, whatever the database holds."""


class UnreadableRecord(AuditStoreError):
    """One stored session that this version cannot read (not JSON, or not a session); the store
    itself, and every other record, is fine."""

    def __init__(self, session_id: str, message: str):
        super().__init__(message)
        self.session_id = session_id


class SessionIdRefused(AuditStoreError):
    """A run may not be recorded under this session id: another run holds it, or no store can keep it as it is."""
