"""The one error a source raises: it could not answer, and the message says why."""


class SourceError(RuntimeError):
    """A source could not be read (a server down or slow, a bad response, a missing directory).
    A tool turns it into a failed invocation: it is never a no-hit."""
