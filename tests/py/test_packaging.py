"""hvnet installed as a service would be: manual pages and completions
generated from the command line's own definition, the systemd unit
template valid, and `scripts/install.sh` into a prefix."""

import shutil
import subprocess
from pathlib import Path

import pytest

import hvlab

ROOT = Path(__file__).resolve().parents[2]


def test_manual_pages_cover_every_command(tmp_path):
    hvlab.hvnet("man", tmp_path)
    pages = sorted(p.name for p in tmp_path.iterdir())
    for cmd in ("up", "down", "ports", "stats", "port", "fdb", "top", "exec", "daemon"):
        assert f"hvnet-{cmd}.1" in pages, pages
    assert "hvnet.1" in pages
    if shutil.which("man"):
        text = hvlab.run(["man", "-l", str(tmp_path / "hvnet-up.1")], env={"MANPAGER": "cat", "PATH": "/usr/bin:/bin"}).stdout
        assert "--metrics" in text and "hvnet up" in text, text
    else:  # the page is roff all the same
        assert ".TH HVNET-UP 1" in (tmp_path / "hvnet-up.1").read_text()


def test_bash_completion_loads_and_completes_commands(tmp_path):
    f = tmp_path / "hvnet"
    f.write_text(hvlab.hvnet("completions", "bash").stdout)
    script = f"""
source {f}
COMP_WORDS=(hvnet to); COMP_CWORD=1; COMP_LINE="hvnet to"; COMP_POINT=${{#COMP_LINE}}
_hvnet hvnet to hvnet
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    out = hvlab.run(["bash", "-c", script]).stdout.split()
    assert "top" in out, out
    bad = hvlab.hvnet("completions", "nosuchshell", check=False)
    assert bad.returncode == 2 and "bash" in bad.stderr, bad.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_unit_template_is_valid(tmp_path):
    unit = (ROOT / "packaging/systemd/hvnet@.service").read_text()
    assert "ExecStart=/usr/local/bin/hvnet daemon /etc/hvnet/%i.toml" in unit
    inst = tmp_path / "hvnet@demo.service"
    inst.write_text(unit.replace("/usr/local/bin/hvnet", hvlab.hvnet_bin()))
    r = hvlab.run(["systemd-analyze", "verify", "--man=no", str(inst)], check=False)
    assert r.returncode == 0, r.stderr


def test_install_script_into_a_prefix(tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    cni = [tmp_path / "opt-cni-bin", tmp_path / "usr-lib-cni"]
    r = subprocess.run([str(ROOT / "scripts/install.sh"), str(tmp_path / "prefix")], capture_output=True, text=True,
                       env={**__import__("os").environ, "SYSTEMD_UNIT_DIR": str(units),
                            "CNI_BIN_DIRS": " ".join(map(str, cni))}, timeout=1200)
    assert r.returncode == 0, r.stderr
    exe = tmp_path / "prefix/bin/hvnet"
    assert "hvnet" in hvlab.run([str(exe), "--version"]).stdout
    assert (tmp_path / "prefix/share/man/man1/hvnet-top.1").exists()
    assert (tmp_path / "prefix/share/bash-completion/completions/hvnet").exists()
    assert f"ExecStart={exe} daemon" in (units / "hvnet@.service").read_text()
    # The CNI plugin, where runtimes look for it; VERSION needs no switch.
    for d in cni:
        v = subprocess.run([str(d / "hvnet-cni")], input="", capture_output=True, text=True,
                           env={"CNI_COMMAND": "VERSION"})
        assert v.returncode == 0 and "1.1.0" in v.stdout, v
