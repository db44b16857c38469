"""Where the machine's CPU goes while a command runs, per component.

    .venv/bin/python benchmarks/node_cpu.py [--per N] [--top K] [--api] [--json F] -- COMMAND...

Runs COMMAND and prints the CPU seconds (user + system) of every process
on the machine, grouped by name and then by component (the cluster's
daemons, the shims and runc, CNI plugins, kube-router and the iptables it
runs, Docker, the sandboxes' own Python, kernel threads), over the
command's run; `--per N` divides by N (164 for HumanEval: CPU per
verification). Processes that live through the run count their /proc/<pid>/stat
difference; those that end during it (runc, shims, CNI plugins, iptables,
the pods' processes) are read from BSD process accounting (acct(2)),
switched on into a temporary file for the run only, minus what they had
used before it. Without acct (no CAP_SYS_PACCT) only the survivors count,
and the table says so. The machine's busy time (/proc/stat) is printed
next to the sum: the difference is interrupt time and what nothing above
claims. `--api` (needs KUBECONFIG) adds the API server's requests by verb
and resource over the run (apiserver_request_total), per N as well.
Components go by process name, not by owner: other work on the machine
counts too (another job's `python` lands in "sandgym host side"; compilers
and browsers in "other"), so measure on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

TICK = os.sysconf("SC_CLK_TCK")
ACCT_HZ = 100  # acct v3 records CPU in AHZ units, 100 a second on Linux
ACCT_RECORD = 64  # sizeof(struct acct_v3)

# Process name (as /proc and acct spell it, at most 15 characters) -> component.
COMPONENTS = [
    (r"^kube-apiserver$", "kube-apiserver"),
    (r"^etcd$", "etcd"),
    (r"^kubelet$", "kubelet"),
    (r"^kube-scheduler$", "kube-scheduler"),
    (r"^kube-controller", "kube-controller-manager"),
    (r"^kube-router$|^iptables|^ip6tables|^ipset$|^xtables", "kube-router (+iptables, ipset)"),
    (r"^containerd-shim", "containerd shims"),
    (r"^runc", "runc"),
    (r"^runsc|^exe$", "runsc (gVisor)"),
    (r"^(bridge|host-local|loopback|portmap)$", "CNI plugins"),
    (r"^pause$", "pause"),
    (r"^(dockerd|docker-init|docker-proxy|docker)$", "Docker"),
    (r"^python3$|^python3\.", "python3 (sandboxes' code, agents)"),
    (r"^python$", "python (sandgym host side)"),
    (r"^(kworker|ksoftirqd|rcu_|kswapd|migration|kcompactd|khugepaged|jbd2|xfs|kdamond)", "kernel threads"),
]


def component(name: str, exe: str = "") -> str:
    if name == "containerd":
        # Docker's containerd lives in /usr/bin; the test cluster's is built into its cache.
        return "containerd (Docker's)" if exe.startswith("/usr/") else "containerd (cluster)"
    for pattern, comp in COMPONENTS:
        if re.search(pattern, name):
            return comp
    return "other"


def proc_snapshot() -> dict[tuple[int, int], tuple[str, int, str]]:
    """(pid, start time) -> (name, CPU ticks, executable) of every process now."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        # fields[11], [12]: utime, stime; [19]: start time (ticks after boot)
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            exe = ""
        out[(int(entry), int(fields[19]))] = (name, int(fields[11]) + int(fields[12]), exe)
    return out


def busy_ticks() -> tuple[int, int, int]:
    """(busy, stolen, all) ticks of every CPU from /proc/stat: stolen is the
    hypervisor's (another guest ran), in neither busy nor idle."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    total = sum(parts[:8])  # guest time is inside user already
    return total - idle - parts[7], parts[7], total


def comp_t(value: int) -> int:
    """acct's comp_t: 13-bit mantissa, 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def acct_records(path: str) -> list[tuple[int, str, float]]:
    """(pid, name, CPU seconds) of each process that ended while accounting was on."""
    data = open(path, "rb").read()
    out = []
    for off in range(0, len(data) - ACCT_RECORD + 1, ACCT_RECORD):
        rec = data[off : off + ACCT_RECORD]
        if rec[1] & 0x0F != 3:  # not a v3 record
            continue
        (pid,) = struct.unpack_from("=I", rec, 16)
        utime, stime = struct.unpack_from("=HH", rec, 32)
        name = rec[48:64].split(b"\0")[0].decode("utf-8", "replace")
        out.append((pid, name, (comp_t(utime) + comp_t(stime)) / ACCT_HZ))
    return out


class Accounting:
    """acct(2) on into a temporary file while in the block (not at all where refused)."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        fd, self.path = tempfile.mkstemp(prefix="node-cpu-acct-")
        os.close(fd)
        self.on = False
        self.error = ""

    def __enter__(self) -> Accounting:
        if self.libc.acct(self.path.encode()) == 0:
            self.on = True
        else:
            self.error = os.strerror(ctypes.get_errno())
        return self

    def __exit__(self, *exc) -> None:
        if self.on:
            self.libc.acct(None)

    def records(self) -> list[tuple[int, str, float]]:
        try:
            return acct_records(self.path) if self.on else []
        finally:
            os.unlink(self.path)


def api_requests() -> dict[str, float]:
    """apiserver_request_total summed by 'verb resource[/subresource]'."""
    from kubernetes import client, config

    config.load_kube_config()
    api = client.ApiClient()
    resp = api.call_api("GET", api.configuration.host + "/metrics", {"Accept": "text/plain"})
    text = (resp.read() or b"").decode()
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        out[key] += float(line.rsplit(" ", 1)[1])
    return out


def measure(command: list[str], api: bool) -> dict:
    before = proc_snapshot()
    busy0, stolen0, all0 = busy_ticks()
    req0 = api_requests() if api else {}
    t0 = time.monotonic()
    with Accounting() as acct:
        rc = subprocess.call(command)
    wall = time.monotonic() - t0
    after = proc_snapshot()
    busy1, stolen1, all1 = busy_ticks()
    req1 = api_requests() if api else {}
    by_name: dict[tuple[str, str], float] = defaultdict(float)
    for key, (name, ticks, exe) in after.items():
        was = before.get(key)
        by_name[(name, component(name, exe))] += (ticks - (was[1] if was else 0)) / TICK
    alive_before = {pid: (name, ticks, exe) for (pid, _), (name, ticks, exe) in before.items()}
    survivors = {pid for pid, _ in after}
    for pid, name, seconds in acct.records():
        # A process seen before the run and gone after: only its share of the run counts.
        was = alive_before.get(pid) if pid not in survivors else None
        exe = ""
        if was and was[0] == name:
            exe = was[2]
            seconds -= was[1] / TICK
        by_name[(name, component(name, exe))] += max(seconds, 0.0)
    return {
        "rc": rc,
        "wall_s": wall,
        "busy_s": (busy1 - busy0) / TICK,
        "stolen_s": (stolen1 - stolen0) / TICK,
        "capacity_s": (all1 - all0) / TICK,
        "acct": acct.on,
        "acct_error": acct.error,
        "by_name": {f"{n}\t{c}": s for (n, c), s in by_name.items() if s > 0},
        "api": {k: req1[k] - req0.get(k, 0.0) for k in req1 if req1[k] - req0.get(k, 0.0) > 0},
        "load": os.getloadavg(),
    }


def report(res: dict, per: int, top: int) -> None:
    per = max(per, 1)
    comps: dict[str, float] = defaultdict(float)
    names: dict[str, float] = defaultdict(float)
    for key, s in res["by_name"].items():
        name, comp = key.split("\t")
        comps[comp] += s
        names[name] += s
    counted = sum(comps.values())
    print(
        f"\n== node CPU over {res['wall_s']:.1f} s: busy {res['busy_s']:.1f} CPU-s of {res['capacity_s']:.1f} "
        f"({100 * res['busy_s'] / max(res['capacity_s'], 1e-9):.0f}%), stolen {res['stolen_s']:.1f}, "
        f"processes {counted:.1f} CPU-s; "
        f"load average {res['load'][0]:.2f} {res['load'][1]:.2f}"
    )
    if not res["acct"]:
        print(f"(no process accounting: {res['acct_error']}; processes that ended during the run are missing)")
    unit = f"ms per 1/{per}" if per > 1 else "ms"
    print(f"{'component':38} {'CPU-s':>8} {unit:>14} {'share':>6}")
    for comp, s in sorted(comps.items(), key=lambda kv: -kv[1]):
        print(f"{comp:38} {s:8.2f} {1000 * s / per:14.1f} {100 * s / max(res['busy_s'], 1e-9):5.1f}%")
    print(f"{'(interrupts, unclaimed)':38} {res['busy_s'] - counted:8.2f}")
    print(f"\ntop {top} process names:")
    for name, s in sorted(names.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {name:20} {s:8.2f} CPU-s {1000 * s / per:9.1f} ms/1/{per}")
    if res["api"]:
        print("\nAPI server requests (verb resource), total and per 1/N:")
        for key, n in sorted(res["api"].items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {key:40} {n:8.0f} {n / per:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per", type=int, default=1, help="divide by this many (verifications) too")
    ap.add_argument("--top", type=int, default=15, help="process names (and API requests) listed")
    ap.add_argument("--api", action="store_true", help="the API server's requests too (KUBECONFIG)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command: node_cpu.py [options] -- COMMAND...")
    res = measure(command, args.api)
    report(res, args.per, args.top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    sys.exit(res["rc"])


if __name__ == "__main__":
    main()
