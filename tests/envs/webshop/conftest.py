"""Fixtures for the WebShop tests."""

from __future__ import annotations

import pytest

from marft_envs.webshop import build_embedded_catalog


@pytest.fixture(scope="session")
def catalog():
    """The default embedded catalog (built once; the library caches it too)."""
    return build_embedded_catalog()
