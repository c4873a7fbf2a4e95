"""A test that needs a server this machine lacks: a failure under CI, where .ci/run must have provided
it (a skip there would hide the test), and a skip that names the reason elsewhere."""

import os

import pytest


def missing_server(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test: {reason}")
    pytest.skip(reason)
