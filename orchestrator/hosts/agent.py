"""The orchestrator's agent on a real host: the far end of one persistent SSH session (paramiko).

    <venv>/bin/python -u agent.py <run dir>/agent.json

Standard library only (the node package is imported only for a control request). Reads one JSON request per
line on stdin and writes one JSON reply per line on stdout, so a schedule action costs one round trip on an
already-open SSH channel, not an SSH handshake:

    {"op": "time"}                                  -> {"ok": true, "t": <host clock>}
    {"op": "signal", "node": "h3", "sig": 9}        -> {"ok": true, "pid": 123, "t": ..., "gone": true}
    {"op": "start", "node": "h3"}                   -> {"ok": true, "pid": 124, "t": ...}
    {"op": "start", "node": "h3", "incarnation": 1} -> the same, its config's `incarnation` set first (a restart)
    {"op": "alive"}                                 -> {"ok": true, "alive": {"h3": false}}
    {"op": "control", "node": "h3", "request": {}}  -> {"ok": true, "reply": {...}}
    {"op": "isolate", "node": "h3", "on": true}     -> {"ok": true, "t": ...}   (a silent crash's iptables rules)
    {"op": "bye"}                                   -> exits

Only the nodes named in agent.json (written by the playbooks) can be signalled or started. Errors come back as
{"ok": false, "error": "..."}; the agent never dies on a bad request. It exits when stdin closes (the SSH session
ended), so nothing of it outlives the run.
"""
import json
import os
import subprocess
import sys
import time


def _pid(pidfile):
    try:
        with open(pidfile) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def handle(cfg, req):
    op = req.get("op")
    if op == "time":
        return {"ok": True, "t": time.time()}
    if op == "alive":
        return {"ok": True, "alive": {n: bool(_pid(c["pidfile"]) and _running(_pid(c["pidfile"])))
                                      for n, c in cfg["nodes"].items()}}
    node = cfg["nodes"].get(req.get("node"))
    if node is None:
        return {"ok": False, "error": f"unknown node {req.get('node')!r} (this host runs {sorted(cfg['nodes'])})"}
    if op == "signal":
        sig = int(req["sig"])
        pid = _pid(node["pidfile"])
        if pid is None or not _running(pid):
            return {"ok": True, "pid": pid, "t": time.time(), "gone": True, "note": "not running"}
        os.kill(pid, sig)
        t = time.time()
        gone = False
        if sig == 9:                         # a crash: report when the process is really gone
            deadline = t + 5
            while time.time() < deadline:
                if not _running(pid):
                    gone = True
                    break
                time.sleep(0.001)
        return {"ok": True, "pid": pid, "t": t, "gone": gone}
    if op == "start":
        pid = _pid(node["pidfile"])
        if pid is not None and _running(pid):
            return {"ok": False, "error": f"{req['node']} is already running (pid {pid})"}
        try:
            os.unlink(node["pidfile"])
        except FileNotFoundError:
            pass
        if "incarnation" in req:             # the node's config is the file after --config in its start command
            path = node["start"][node["start"].index("--config") + 1]
            with open(path) as f:
                cfg = json.load(f)
            cfg["incarnation"] = int(req["incarnation"])
            with open(path + ".tmp", "w") as f:
                json.dump(cfg, f, indent=1)
            os.replace(path + ".tmp", path)
        r = subprocess.run(node["start"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode != 0:
            return {"ok": False, "error": f"start-stop-daemon exited {r.returncode}: {r.stderr.strip()}"}
        deadline = time.time() + 5
        while time.time() < deadline and _pid(node["pidfile"]) is None:
            time.sleep(0.005)
        return {"ok": True, "pid": _pid(node["pidfile"]), "t": time.time()}
    if op == "isolate":
        # on: insert the node's `silent` rules (drop its own traffic, both directions); off: delete them (a rule
        # already gone is fine: the result is the same)
        for rule in node.get("silent", []):
            argv = ["iptables", "-w", "-I", rule[0], "1", *rule[1:]] if req.get("on") else \
                   ["iptables", "-w", "-D", *rule]
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if r.returncode != 0 and (req.get("on") or "does a matching rule exist" not in r.stderr):
                return {"ok": False, "error": f"{' '.join(argv[:5])} ...: {r.stderr.strip() or r.returncode}"}
        return {"ok": True, "t": time.time()}
    if op == "control":
        from gossipnode import control

        try:
            return {"ok": True, "reply": control.request(node["control"], req.get("request") or {})}
        except Exception as exc:  # noqa: BLE001 - reported to the orchestrator
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": False, "error": f"unknown op {op!r}"}


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    out = sys.stdout
    out.write(json.dumps({"ok": True, "hello": cfg.get("host"), "pid": os.getpid(), "t": time.time()}) + "\n")
    out.flush()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "bye":
                break
            reply = handle(cfg, req)
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the session
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
