"""The teams experiment's readings, without running it: ping's answers
(pings lost, the longest run unanswered), how a team's frames were spread over
its members, and Open vSwitch's active bond member."""

from hvnet_lab.teams import busiest_share, ovs_active_member, ping_outage

PING = """PING 198.18.44.4 (198.18.44.4) 56(84) bytes of data.
[1795737462.600000] 64 bytes from 198.18.44.4: icmp_seq=1 ttl=64 time=0.141 ms
[1795737462.610000] 64 bytes from 198.18.44.4: icmp_seq=2 ttl=64 time=0.036 ms
[1795737462.700000] 64 bytes from 198.18.44.4: icmp_seq=11 ttl=64 time=0.040 ms
[1795737462.710000] 64 bytes from 198.18.44.4: icmp_seq=12 ttl=64 time=0.040 ms

--- 198.18.44.4 ping statistics ---
12 packets transmitted, 4 received, 66.6667% packet loss, time 110ms
rtt min/avg/max/mdev = 0.036/0.064/0.141/0.044 ms
"""

# ovs-appctl bond/show of Open vSwitch 3.1 (this machine, 2026-11-27).
BOND_SHOW = """---- bond1 ----
bond_mode: active-backup
bond may use recirculation: no, Recirc-ID : -1
bond-hash-basis: 0
lb_output action: disabled, bond-id: -1
updelay: 0 ms
downdelay: 0 ms
lacp_status: off
lacp_fallback_ab: false
active-backup primary: <none>
active member mac: 1e:40:a3:f3:a9:d7(tmn53cb62e3)

member tmn53cb62e3: enabled
  active member
  may_enable: true

member tmn5cf20b4b: enabled
  may_enable: true
"""


def test_ping_outage_is_the_longest_run_of_unanswered_pings():
    r = ping_outage(PING, every=0.01)
    assert (r["sent"], r["answered"], r["lost"]) == (12, 4, 8)
    assert abs(r["outage_ms"] - 80) < 0.01


def test_a_vm_that_never_answers_again_is_out_to_the_end():
    # Answered 1 and 2, then nothing up to the 12th: 10 pings, 100 ms.
    text = "\n".join(PING.splitlines()[:3]) + "\n12 packets transmitted, 2 received, 83% packet loss\n"
    r = ping_outage(text, every=0.01)
    assert r["lost"] == 10 and abs(r["outage_ms"] - 100) < 0.01


def test_an_unbroken_ping_has_no_outage():
    lines = [f"[{100 + i * 0.01:.6f}] 64 bytes from 198.18.44.4: icmp_seq={i + 1} ttl=64 time=0.1 ms"
             for i in range(5)]
    text = "\n".join(lines) + "\n5 packets transmitted, 5 received, 0% packet loss, time 40ms\n"
    r = ping_outage(text, every=0.01)
    assert r["lost"] == 0 and r["outage_ms"] < 0.01


def test_busiest_share():
    assert busiest_share({"a": 10, "b": 10}, {"a": 110, "b": 110}) == 0.5
    assert busiest_share({"a": 0, "b": 5}, {"a": 300, "b": 5}) == 1.0
    assert busiest_share({}, {"a": 0, "b": 0}) == 0.0


def test_ovs_active_member():
    assert ovs_active_member(BOND_SHOW) == "tmn53cb62e3"
    no_mac = BOND_SHOW.replace("active member mac: 1e:40:a3:f3:a9:d7(tmn53cb62e3)\n", "")
    assert ovs_active_member(no_mac) == "tmn53cb62e3"
    assert ovs_active_member(no_mac.replace("  active member\n", "")) is None
