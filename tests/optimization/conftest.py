import pytest

from tests.optimization.sample import sample_payload


@pytest.fixture
def payload() -> dict:
    """A fresh copy of the sample payload: seven rows of every kind, ten runs."""
    return sample_payload()
