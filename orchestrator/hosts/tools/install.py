"""Install the node into <dir>/venv on a host (run by playbooks/roles/gossip_prepare with the host's Python, as
root): a venv without ensurepip, the dependencies from the shipped wheels with the shipped pip wheel (no index, no
network), the node package (<dir>/src) on the venv's path, then an import check. Idempotent. Prints JSON
{"changed": bool}. Standard library only."""
import glob
import json
import os
import subprocess
import sys


def main():
    d = sys.argv[1]
    venv = os.path.join(d, "venv")
    py = os.path.join(venv, "bin", "python")
    changed = False
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
        changed = True
    req_file = os.path.join(d, "wheels", "requirements.txt")
    with open(req_file) as f:
        req = f.read()
    marker = os.path.join(venv, ".gossip-deps")
    have = open(marker).read() if os.path.exists(marker) else None
    if have != req:
        pip = glob.glob(os.path.join(d, "tools", "pip-*.whl"))
        if not pip:
            sys.exit("no pip wheel in the bundle")
        subprocess.run([py, os.path.join(pip[0], "pip"), "install", "--quiet", "--no-compile", "--disable-pip-version-check",
                        "--no-index", "--find-links", os.path.join(d, "wheels"), "-r", req_file], check=True)
        with open(marker, "w") as f:
            f.write(req)
        changed = True
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                             capture_output=True, text=True).stdout.strip()
    pth = os.path.join(purelib, "gossipnode-src.pth")
    want = os.path.join(d, "src") + "\n"
    if not os.path.exists(pth) or open(pth).read() != want:
        with open(pth, "w") as f:
            f.write(want)
        changed = True
    subprocess.run([py, "-c", "import gossipnode.config, gossipnode.runtime"], check=True)
    print(json.dumps({"changed": changed, "python": py}))


if __name__ == "__main__":
    main()
