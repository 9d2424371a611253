import os

import pytest

# The host helpers (namespaces, topologies, readiness) live in the lab
# (on the path by pytest.ini's pythonpath).
import hvlab


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


@pytest.fixture(scope="session")
def libvirtd(tmp_path_factory):
    """The system libvirtd for the libvirt tests: one already running, or
    virtlogd and libvirtd started here once (no systemd on these
    machines) and stopped by PID at the end."""
    import libvirt_host

    d = libvirt_host.Daemons(tmp_path_factory.mktemp("libvirt"))
    try:
        d.start()
        yield d
    finally:
        d.stop()


@pytest.fixture
def guest_dir():
    """A directory for a libvirt guest's kernel, initramfs, console and
    sockets, where libvirt's QEMU (user libvirt-qemu) may read and create
    them; removed afterwards."""
    import pwd
    import shutil
    from pathlib import Path

    d = Path(hvlab.run(["mktemp", "-d", "/var/tmp/hvnet-lv-XXXXXX"]).stdout.strip())
    os.chown(d, pwd.getpwnam("libvirt-qemu").pw_uid, -1)
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
