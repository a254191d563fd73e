"""Real hosts (docs/architecture.md §3 "Hosts"): an experiment on machines reached over SSH.

- `hostsfile`: the hosts file (YAML) and which plan member runs on which host (pure).
- `render`: inventory, variables and every tc / iptables / start-stop-daemon argv, rendered from the experiment
  and the hosts file (pure; Jinja2 for the inventory).
- `clock`: clock-offset estimation from round trips (pure).
- `ansible`: the only importer of ansible_runner (playbooks in `playbooks/`).
- `ssh`: persistent paramiko sessions to a small agent on every host, for the time-critical schedule actions.
- `agent`: that agent (standard library only; shipped to the hosts by the playbooks).
- `run`: `orchestrator run --backend hosts`.
"""
