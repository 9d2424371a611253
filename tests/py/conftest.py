import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# The host helpers (namespaces, topologies, readiness) live in the lab.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lab"))

import hvlab  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if hvlab.is_root():
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "root: needs root and network namespaces")


@pytest.fixture(scope="session")
def hvnet_bin():
    return hvlab.hvnet_bin()
