"""Probe a host for the lab (run by playbooks/roles/gossip_shaping as root): the egress interface holding the
member address, its root qdisc, and what the kernel can shape with, tried for real in a throwaway namespace
(netem, htb, the u32 classifier, iptables `statistic`). Prints JSON. Standard library only.

    probe.py NAMESPACE ADDRESS [INTERFACE]
"""
import json
import os
import subprocess
import sys


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True)


def main():
    ns, address = sys.argv[1], sys.argv[2]
    dev = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else ""
    out = {"kernel": os.uname().release, "notes": {}}
    if not dev:
        r = run(["ip", "-j", "-4", "addr", "show", "to", f"{address}/32"])
        links = json.loads(r.stdout or "[]") if r.returncode == 0 else []
        dev = links[0]["ifname"] if links else ""
    out["dev"] = dev
    root = []
    if dev:
        r = run(["tc", "-j", "qdisc", "show", "dev", dev, "root"])
        if r.returncode != 0:
            out["dev_error"] = r.stderr.strip()
        else:
            root = [q.get("kind") for q in json.loads(r.stdout or "[]")]
    out["root_qdiscs"] = root
    r = run(["ip", "netns", "add", ns])
    if r.returncode != 0:
        print(json.dumps({**out, "error": f"cannot create probe namespace {ns}: {r.stderr.strip()}"}))
        return

    def ok(label, argv, undo=None):
        r = run(argv)
        if r.returncode != 0:
            out["notes"][label] = r.stderr.strip()
        elif undo:
            run(undo)
        return r.returncode == 0

    try:
        tcq = ["tc", "-n", ns, "qdisc"]
        out["netem"] = ok("netem", tcq + ["add", "dev", "lo", "root", "handle", "1:", "netem", "delay", "1ms"],
                          tcq + ["del", "dev", "lo", "root"])
        out["htb"] = ok("htb", tcq + ["add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1"])
        out["u32"] = out["htb"] and ok("u32", ["tc", "-n", ns, "filter", "add", "dev", "lo", "parent", "1:",
                                               "protocol", "ip", "prio", "1", "u32", "match", "ip", "sport", "7000",
                                               "0xffff", "flowid", "1:2"])
        out["statistic"] = ok("statistic", ["ip", "netns", "exec", ns, "iptables", "-w", "-t", "mangle", "-A",
                                            "POSTROUTING", "-o", "lo", "-m", "statistic", "--mode", "random",
                                            "--probability", "0.5", "-j", "DROP"])
    finally:
        run(["ip", "netns", "del", ns])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
