"""The warm SGLang servers (warm_release.py) live for the session: stopped at its end, in each xdist worker."""

from __future__ import annotations

import pytest
import warm_release


def pytest_sessionfinish(session: pytest.Session) -> None:
    warm_release.stop_all()
