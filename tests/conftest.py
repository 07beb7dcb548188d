import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("qlinear", deadline=None, max_examples=150,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("QLINEAR_HYPOTHESIS", "qlinear"))

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared (specs, golden files, models, data); tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: these tests need the shared developer folder next to the project")
    return SHARED
