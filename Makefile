# Everything goes through `make setup`: system packages + the virtualenv at .venv/. All targets are idempotent.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
APT_PKGS := mininet iproute2 iptables nftables ethtool iputils-ping tcpdump tshark iperf3 procps psmisc kmod \
            docker.io debootstrap default-jre-headless \
            gcc libc6-dev python3-dev pkg-config libnetfilter-queue-dev
PYTEST_ARGS ?=
# The netem VM tool lives beside the repository (../shared); a clone elsewhere finds it at /work/shared or via
# `make test-netem NETEM_VM=/path/to/run-in-netem-vm.sh`.
NETEM_VM ?= $(firstword $(wildcard ../shared/tools/run-in-netem-vm.sh /work/shared/tools/run-in-netem-vm.sh))
# The hosts backend's tests build SSH hosts (sshd in namespaces, a sudo user); its Python deps come with the venv.
HOSTS_APT_PKGS := openssh-server openssh-client sudo

.PHONY: setup system venv engine docker-engine image test test-unit test-netem demo bench clean-labs repro-hyparview repro-pbcast repro-qsm repro-qsm-sim repro-qsm-crash repro-qsm-fig14 repro-qsm-fig16-budget repro-qsm-fig1-budget repro-qsm-budget-control repro-host-speed repro-qsm-fig20-ring repro-qsm-small repro-qsm-fig19-20 repro-gsgc repro-virtual-time repro-budgets repro-qsm-fig9-budget repro-netem repro-netem-isolate vt-transparency vt-probe vt-budget vt-load vt-undilated vt-tables repro-machines
setup: system venv docker-engine

system:
	@missing=""; for p in $(APT_PKGS) $(HOSTS_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The Docker backend needs a running engine: when `docker info` fails, start it (systemd when it runs, else dockerd
# in the background, log in /var/log/dockerd.log) and wait until it answers.
docker-engine: system
	@if ! docker info >/dev/null 2>&1; then \
	  if [ -d /run/systemd/system ]; then echo "starting docker (systemctl)"; systemctl start docker; \
	  else echo "starting dockerd in the background (log: /var/log/dockerd.log)"; \
	    nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null & \
	  fi; \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; \
	  docker info >/dev/null 2>&1 || { echo "the Docker engine did not start: see /var/log/dockerd.log" >&2; exit 1; }; \
	fi

# The Docker backend's images: the debootstrap base (kept when it exists) and the node image FROM it; prints their
# sizes. BASE_IMAGE=python:3.11-slim-bookworm make image builds the node image on a registry image instead.
image: setup
	$(VENV)/bin/orchestrator image build

venv: $(VENV)/.installed engine
# The compiled delay line engine (cffi; rebuilt only when orchestrator/shaping/delayline/_engine.[ch] is newer).
engine: $(VENV)/.installed
	$(PY) orchestrator/shaping/delayline/build_engine.py
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Two xdist workers: the root tests (labs, cgroups) one at a time in one, the timing tests first and alone; the
# analysis (Spark) and node tests in the other, then the pure unit tests (while the timing tests still run), then
# the lab tests no load can change (tests/conftest.py).
test: setup
	$(PY) -m pytest -n 2 -m "not netem" --durations=60 $(PYTEST_ARGS) tests

test-unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The netem rendering can only be proven on a kernel that has sch_netem: boot one in a throwaway VM.
test-netem: setup
	@test -n "$(NETEM_VM)" -a -x "$(NETEM_VM)" || { echo "run-in-netem-vm.sh not found: pass NETEM_VM=/path/to/run-in-netem-vm.sh" >&2; exit 2; }
	$(NETEM_VM) --setup
	@mkdir -p docs/results/netem; rm -f docs/results/netem/fidelity.jsonl
	$(NETEM_VM) --timeout 900 -- env FIDELITY_TABLE=docs/results/netem/fidelity.jsonl $(PY) -m pytest -p no:cacheprovider -m netem -q -s --durations=20 tests/integration/test_netem.py tests/integration/test_netem_fidelity.py 2>&1 | tee docs/results/netem/make-test-netem.log; status=$${PIPESTATUS[0]}; \
	  $(PY) benchmarks/fidelity_table.py docs/results/netem/fidelity.jsonl --out docs/results/netem/fidelity.md --log docs/results/netem/make-test-netem.log; exit $$status

ORCH := $(VENV)/bin/orchestrator
# The demo: a 40-member GSGC experiment end to end on Mininet (network, fidelity probe, captures, nodes, a crash
# and a perturbation, collection), then the Spark analysis writes report.md / report.html into the run directory.
DEMO_OUT ?= runs
demo: setup
	@$(ORCH) status demo >/dev/null 2>&1 && $(ORCH) teardown demo || true
	@set -e; run_dir=$$($(ORCH) run topologies/demo.yaml --out $(DEMO_OUT)); \
	  $(ORCH) analyze "$$run_dir" --master 'local[2]'; \
	  ln -sfn "$$(basename "$$run_dir")" $(DEMO_OUT)/demo-latest; \
	  echo "report: $$run_dir/report.html (and report.md); latest demo: $(DEMO_OUT)/demo-latest"

bench: setup
	$(PY) benchmarks/bench_up.py

# The HyParView paper's Figures 2-4 and Table 1 / Figure 5 (docs/reproduction-hyparview.md): hours on 2 cores;
# resumable (rerun to continue the sweep; analysed Table 1 runs are not analysed again).
REPRO_OUT ?= runs/repro
# a command with the machine's load logged beside it (analysis --load puts each run's into its runs.csv)
LOGGED = $(PY) -m experiments.busy --loops 0 --load-log $(REPRO_OUT)/load.log --
repro-hyparview: setup
	$(ORCH) sweep topologies/hyparview-fig2-sweep.yaml --out $(REPRO_OUT)/hyparview-fig2 --no-analyze
	@set -e; for seed in 1 2; do for ps in hyparview:hpv cyclon:cyc scamp:scp cyclonacked:cya; do \
	  ls -d $(REPRO_OUT)/hyparview-table1/t1-$${ps#*:}-200-s$$seed-* >/dev/null 2>&1 || \
	  $(ORCH) run topologies/hyparview-table1.yaml --set members=200 --set packing=25 --set protocol=$${ps%:*} \
	    --set seed=$$seed --out $(REPRO_OUT)/hyparview-table1; done; \
	  ls -d $(REPRO_OUT)/hyparview-table1/t1-hpv-200q-s$$seed-* >/dev/null 2>&1 || \
	  $(ORCH) run topologies/hyparview-table1.yaml --set members=200 --set packing=25 --set protocol=hyparview \
	    --set join_interval=50ms --set seed=$$seed --out $(REPRO_OUT)/hyparview-table1; done
	@set -e; for r in $(REPRO_OUT)/hyparview-table1/t1-*; do test -e $$r/analysis/metrics/summary.json || \
	  $(ORCH) analyze -q $$r --master 'local[2]'; done
	$(PY) -m analysis.table1_hyparview $(REPRO_OUT)/hyparview-table1/t1-* --out $(REPRO_OUT)/results/hyparview-table1
	@set -e; for pf in 80:0.8 95:0.95; do ls -d $(REPRO_OUT)/hyparview-scale/f2-cyc-$${pf%:*}-* >/dev/null 2>&1 || \
	  $(ORCH) run topologies/hyparview-fig2.yaml --set members=500 --set rate=1 --set protocol=cyclon --set fail=$${pf#*:} \
	    --out $(REPRO_OUT)/hyparview-scale; done
	$(PY) -m analysis.figures_hyparview $(REPRO_OUT)/hyparview-fig2 $(REPRO_OUT)/hyparview-scale/f2-* \
	  --out $(REPRO_OUT)/results/hyparview-fig2

# pbcast's Figures 1 and 12 (docs/reproduction-pbcast.md) and QSM's Figures 9, 12-13, 19-20
# (docs/reproduction-qsm.md): the commands those pages' numbers came from; resumable.
repro-pbcast: setup
	$(LOGGED) $(ORCH) sweep topologies/pbcast-fig1-sweep.yaml --out $(REPRO_OUT)/pbcast-fig1q --no-analyze --repetitions 2 \
	  --only protocol=tradvsync --only p=0 --only p=0.1 --only p=0.3 --only p=0.5
	$(LOGGED) $(ORCH) sweep topologies/pbcast-fig1-sweep.yaml --out $(REPRO_OUT)/pbcast-fig1q --no-analyze --repetitions 2 \
	  --only protocol=vsync --only nodes=32 --only p=0 --only p=0.1 --only p=0.3 --only p=0.5
	$(PY) -m analysis.figures_pbcast $(REPRO_OUT)/pbcast-fig1q --out $(REPRO_OUT)/results/pbcast-fig1q --load $(REPRO_OUT)/load.log
	@set -e; for s in 1 2; do \
	  for v in 8:0:0 8:30:0.3 32:0:0 32:30:0.3; do n=$${v%%:*}; pc=$${v#*:}; pc=$${pc%:*}; \
	    ls -d $(REPRO_OUT)/pbcast-fig1-iso/s$$s/f1-tv$$n-$$pc-* >/dev/null 2>&1 || $(LOGGED) $(ORCH) run topologies/pbcast-fig1.yaml \
	      --set protocol=tradvsync --set rate=100 --set members=$$n --set p=$${v##*:} --set seed=$$s \
	      --out $(REPRO_OUT)/pbcast-fig1-iso/s$$s; done; \
	  ls -d $(REPRO_OUT)/pbcast-fig1-iso/s$$s/f1-tv16-50-* >/dev/null 2>&1 || $(LOGGED) $(ORCH) run topologies/pbcast-fig1.yaml \
	    --set protocol=tradvsync --set buffer=20 --set members=16 --set p=0.5 --set seed=$$s --out $(REPRO_OUT)/pbcast-fig1-iso/s$$s; \
	  ls -d $(REPRO_OUT)/pbcast-fig1-iso/s$$s/f1-vs16-90-* >/dev/null 2>&1 || $(LOGGED) $(ORCH) run topologies/pbcast-fig1.yaml \
	    --set protocol=vsync --set members=16 --set p=0.9 --set seed=$$s --out $(REPRO_OUT)/pbcast-fig1-iso/s$$s; done
	$(PY) -m analysis.figures_pbcast $(REPRO_OUT)/pbcast-fig1-iso/s*/f1-* --out $(REPRO_OUT)/results/pbcast-fig1-iso --load $(REPRO_OUT)/load.log
	$(LOGGED) $(ORCH) sweep topologies/pbcast-table2-sweep.yaml --out $(REPRO_OUT)/pbcast-table2 --no-analyze
	@set -e; for k in 1 2 3 4; do ls -d $(REPRO_OUT)/pbcast-table2-defer/t2-k$$k-d50ms-* >/dev/null 2>&1 || \
	  $(LOGGED) $(ORCH) run topologies/pbcast-table2.yaml --set k=$$k --set defer=50ms --out $(REPRO_OUT)/pbcast-table2-defer; done
	$(PY) -m analysis.figures_pbcast_more table2 $(REPRO_OUT)/pbcast-table2 $(REPRO_OUT)/pbcast-table2-defer/t2-* \
	  --out $(REPRO_OUT)/results/pbcast-table2 --load $(REPRO_OUT)/load.log
	$(LOGGED) $(ORCH) sweep topologies/pbcast-fig4-sweep.yaml --out $(REPRO_OUT)/pbcast-fig4 --no-analyze
	@set -e; for s in 1 2 3; do for n in 64 128; do ls -d $(REPRO_OUT)/pbcast-fig4-packed/s$$s/f4-pb$$n-p16-* >/dev/null 2>&1 || \
	  $(LOGGED) $(ORCH) run topologies/pbcast-fig4.yaml --set members=$$n --set packing=16 --set seed=$$s \
	    --out $(REPRO_OUT)/pbcast-fig4-packed/s$$s; done; done
	$(PY) -m analysis.figures_pbcast_more fig4 $(REPRO_OUT)/pbcast-fig4 $(REPRO_OUT)/pbcast-fig4-packed/s*/f4-* \
	  --out $(REPRO_OUT)/results/pbcast-fig4 --load $(REPRO_OUT)/load.log
	@set -e; for n in 8 16 32 64 128; do ls -d $(REPRO_OUT)/pbcast-fig4-loss1/f4-pb$$n-p16-* >/dev/null 2>&1 || \
	  $(LOGGED) $(ORCH) run topologies/pbcast-fig4.yaml --set members=$$n --set packing=16 --set loss=1% --set seed=1 \
	    --out $(REPRO_OUT)/pbcast-fig4-loss1; done
	$(PY) -m analysis.figures_pbcast_more fig4 $(REPRO_OUT)/pbcast-fig4-loss1/f4-* --out $(REPRO_OUT)/results/pbcast-fig4-loss1 --load $(REPRO_OUT)/load.log
	$(LOGGED) $(ORCH) sweep topologies/pbcast-fig10-sweep.yaml --out $(REPRO_OUT)/pbcast-fig10 --no-analyze
	@set -e; for s in 1 2; do for r in 100 25; do ls -d $(REPRO_OUT)/pbcast-fig10-packed/s$$s/f10-vs64p16-r$$r-* \
	  >/dev/null 2>&1 || $(LOGGED) $(ORCH) run topologies/pbcast-fig10.yaml --set members=64 --set packing=16 --set rate=$$r \
	    --set seed=$$s --out $(REPRO_OUT)/pbcast-fig10-packed/s$$s; done; done
	$(PY) -m analysis.figures_pbcast_more fig10 $(REPRO_OUT)/pbcast-fig10 $(REPRO_OUT)/pbcast-fig10-packed/s*/f10-* \
	  --out $(REPRO_OUT)/results/pbcast-fig10 --load $(REPRO_OUT)/load.log
	@set -e; for s in 1 2 3; do for v in none:2:n20 none:0.5:n5 mcast:2:m20; do p=$${v%%:*}; c=$${v#*:}; c=$${c%:*}; \
	  ls -d $(REPRO_OUT)/pbcast-bimodal/bm32-25$${v##*:}-s$$s-* >/dev/null 2>&1 || \
	  $(LOGGED) $(ORCH) run topologies/pbcast-bimodal.yaml --set seed=$$s --set phase=$$p --set gc_c=$$c \
	    --out $(REPRO_OUT)/pbcast-bimodal; done; done
	@set -e; for s in 1 2 3; do for v in tree:silent:t20q none:kill:n20; do p=$${v%%:*}; m=$${v#*:}; m=$${m%:*}; \
	  ls -d $(REPRO_OUT)/pbcast-bimodal-tree/bm32-25$${v##*:}-s$$s-* >/dev/null 2>&1 || \
	  $(LOGGED) $(ORCH) run topologies/pbcast-bimodal.yaml --set seed=$$s --set phase=$$p --set crash_mode=$$m \
	    --set capture=access --out $(REPRO_OUT)/pbcast-bimodal-tree; done; done
	$(PY) -m analysis.figures_pbcast_more bimodal $(REPRO_OUT)/pbcast-bimodal/bm* $(REPRO_OUT)/pbcast-bimodal-tree/bm* \
	  --out $(REPRO_OUT)/results/pbcast-bimodal --load $(REPRO_OUT)/load.log

# docs/qsm.md's simulator table (deterministic, ~20 s): experiments/qsm_sim_table.py
repro-qsm-sim: setup
	$(PY) -m experiments.qsm_sim_table --out docs/results/qsm-sim

# QSM with two members crashed during recovery (issue 34; docs/qsm.md "The membership service"): the GMS's view
# after 0.5 s and 2 s, 3 runs each, the load logged beside them; about 6 minutes.
repro-qsm-crash: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-crash-sweep.yaml --out $(REPRO_OUT)/qsm-crash --no-analyze
	$(PY) -m experiments.qsm_crash_table $(REPRO_OUT)/qsm-crash --out docs/results/qsm-crash --load $(REPRO_OUT)/load.log

# docs/qsm.md's lab numbers: topologies/qsm-small.yaml as shipped (24 members, two overlapping groups, 1 % loss,
# two senders capped at 60/s), seeds 1-3, one at a time, the load logged; about 4 minutes. Resumable.
repro-qsm-small: setup
	@set -e; for s in 1 2 3; do ls -d $(REPRO_OUT)/qsm-small/s$$s/qsm-small-* >/dev/null 2>&1 || \
	  $(LOGGED) $(ORCH) run topologies/qsm-small.yaml --seed $$s --out $(REPRO_OUT)/qsm-small/s$$s; done
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-small --out docs/results/qsm-small --load $(REPRO_OUT)/load.log

# QSM's Figures 19-20 (recovery and ACK latency against the members, under loss) at the current code (the caching-
# replica ACK, the delayed pulls): 8 and 16 members, 0.1 % and 1 % loss, every member at a CPU budget of 0.2 virtual
# cores at dilation 2 for every point (auto would pick 1 or 2 from the CPU measured before), sending 2-22 s of 28 s,
# 3 runs per point, one at a time, the load logged; about 15 minutes.
repro-qsm-fig19-20: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=8,16 --axis links.loss=0.1%,1% \
	  --axis nodes.cpu=0.2 --axis workload.stop=22s --axis duration=28s --dilation 2 --no-analyze \
	  --out $(REPRO_OUT)/qsm-fig19-20
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig19-20 --out docs/results/qsm-fig19-20 --load $(REPRO_OUT)/load.log
	{ echo "# python -m experiments.qsm_undelivered on the three runs of the 8-member, 1 % loss point of make repro-qsm-fig19-20"; \
	  $(PY) -m experiments.qsm_undelivered $(REPRO_OUT)/qsm-fig19-20/points/nodes-8_loss-1_*/*/; } \
	  > docs/results/qsm-fig19-20/undelivered-8-members-1pct.txt

# QSM's Figure 14 (issue 34): one 25-member group split into 1, 2, 4, 8 regions by artificial groups, every member
# at a CPU budget of 0.2 virtual cores (N = 4), 3 runs per point, one at a time, the load logged; about 20 minutes.
repro-qsm-fig14: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig14-sweep.yaml --out $(REPRO_OUT)/qsm-fig14 --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig14 --out docs/results/qsm-fig14 --load $(REPRO_OUT)/load.log

# QSM's Figure 20 (issue 34): is the ring length what makes 8 members acknowledge later than 16 at 1 % loss? One
# token ring of 16 (R = 16) against three (R = 5) at 16 members, two rings of 4 (R = 3) against one of 8 (R = 5)
# at 8 members; as repro-qsm-fig19-20 otherwise (0.2 virtual cores per member, N = 2, sending 2-22 s of 28 s),
# 3 runs per point, one at a time, the load logged; about 20 minutes.
repro-qsm-fig20-ring: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=8 --axis links.loss=1% \
	  --axis protocol.qsm.partition_size=3,5 --axis nodes.cpu=0.2 --axis workload.stop=22s --axis duration=28s \
	  --dilation 2 --no-analyze --out $(REPRO_OUT)/qsm-fig20-ring/n8
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=16 --axis links.loss=1% \
	  --axis protocol.qsm.partition_size=5,16 --axis nodes.cpu=0.2 --axis workload.stop=22s --axis duration=28s \
	  --dilation 2 --no-analyze --out $(REPRO_OUT)/qsm-fig20-ring/n16
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig20-ring/n8 $(REPRO_OUT)/qsm-fig20-ring/n16 \
	  --out docs/results/qsm-fig20-ring --load $(REPRO_OUT)/load.log

# QSM's Figure 16 (issue 34) at a CPU budget per member: S = 1, 2, 4, 8 senders in one 25-member group, every
# member at 0.2 virtual cores (N = 4), 3 runs per point, one at a time, the load logged; about 20 minutes.
repro-qsm-fig16-budget: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig16-budget-sweep.yaml --out $(REPRO_OUT)/qsm-fig16-budget-n4 --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig16-budget-n4 --out docs/results/qsm-fig16-budget-n4 \
	  --load $(REPRO_OUT)/load.log

# The control for Figure 16's S = 1 point (docs/reproduction-qsm.md): Figure 14's k = 1 point again (the same
# setting), 3 runs, then the same at the code Figure 14 ran on (441bd68, a git worktree), one at a time, the load
# logged; about 12 minutes.
repro-qsm-budget-control: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig14-sweep.yaml --only regions=1 --no-analyze \
	  --out $(REPRO_OUT)/qsm-fig14-k1-again
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig14-k1-again --out docs/results/qsm-fig14-k1-again \
	  --load $(REPRO_OUT)/load.log
	@# the same point at the code of Figure 14's runs (441bd68), in a worktree, on this checkout's venv
	rm -rf $(abspath $(REPRO_OUT))/wt-441bd68; git worktree prune
	git worktree add --detach $(abspath $(REPRO_OUT))/wt-441bd68 441bd68
	cp orchestrator/shaping/delayline/_cengine*.so $(abspath $(REPRO_OUT))/wt-441bd68/orchestrator/shaping/delayline/
	cd $(abspath $(REPRO_OUT))/wt-441bd68 && PYTHONPATH=$$PWD:$$PWD/node_image $(CURDIR)/$(PY) -m experiments.busy \
	  --loops 0 --load-log $(abspath $(REPRO_OUT))/load.log -- $(CURDIR)/$(PY) -m orchestrator.cli sweep \
	  topologies/qsm-fig14-sweep.yaml --only regions=1 --no-analyze --out $(abspath $(REPRO_OUT))/qsm-fig14-k1-at-441bd68
	git worktree remove --force $(abspath $(REPRO_OUT))/wt-441bd68
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig14-k1-at-441bd68 --out docs/results/qsm-fig14-k1-at-441bd68 \
	  --load $(REPRO_OUT)/load.log

# What a CPU budget's second is worth (docs/virtual-time.md, "What a budget cannot hold"): Figure 14's k = 1 point
# (one sender at a budget of 0.2 virtual cores, N = 4), 3 runs on a quiet machine, then 3 beside one and 3 beside two
# noisy neighbours (experiments.busy --neighbours K: nice-19 processes streaming through memory), one at a time,
# the load and each run's host speed logged; about 15 minutes. Resumable.
repro-host-speed: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig14-sweep.yaml --only regions=1 --no-analyze \
	  --out $(REPRO_OUT)/host-speed/quiet
	@set -e; for k in 1 2; do $(PY) -m experiments.busy --loops 0 --neighbours $$k --load-log $(REPRO_OUT)/load.log -- \
	  $(ORCH) sweep topologies/qsm-fig14-sweep.yaml --only regions=1 --no-analyze \
	  --out $(REPRO_OUT)/host-speed/neighbours-$$k; done
	@set -e; for c in quiet neighbours-1 neighbours-2; do $(PY) -m analysis.figures_qsm $(REPRO_OUT)/host-speed/$$c \
	  --out $(REPRO_OUT)/results/host-speed-$$c --load $(REPRO_OUT)/load.log > /dev/null; done
	$(PY) -m experiments.host_speed_table quiet=$(REPRO_OUT)/results/host-speed-quiet/runs.csv \
	  "one neighbour=$(REPRO_OUT)/results/host-speed-neighbours-1/runs.csv" \
	  "two neighbours=$(REPRO_OUT)/results/host-speed-neighbours-2/runs.csv" --out docs/results/host-speed

# QSM's Figure 1 (issue 34) at a CPU budget per member: G = 1, 2, 4, 8, 16 groups on the same 25 members, one sender
# round robin, every member at 0.2 virtual cores (N = 4), sending 2-14 s of 18 s, 3 runs per point, one at a time,
# the load logged; about 25 minutes.
repro-qsm-fig1-budget: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig1-sweep.yaml --axis nodes.cpu=0.2 --axis workload.stop=14s \
	  --axis duration=18s --dilation 4 --repetitions 3 --no-analyze --out $(REPRO_OUT)/qsm-fig1-budget-n4
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig1-budget-n4 --out docs/results/qsm-fig1-budget-n4 \
	  --load $(REPRO_OUT)/load.log

repro-qsm: setup
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=4,8,12,16 --out $(REPRO_OUT)/qsm-fig9 --no-analyze
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=16 \
	  --axis protocol.qsm.partition_size=1,2,3,8,16 --out $(REPRO_OUT)/qsm-figR --no-analyze
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=8,16 --axis links.loss=0.1%,1% \
	  --out $(REPRO_OUT)/qsm-figloss --no-analyze
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=16 --axis links.loss=1% \
	  --axis protocol.qsm.partition_size=1,2,3,8,16 --repetitions 2 --out $(REPRO_OUT)/qsm-figRloss --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig9 $(REPRO_OUT)/qsm-figR $(REPRO_OUT)/qsm-figloss \
	  $(REPRO_OUT)/qsm-figRloss --out $(REPRO_OUT)/results/qsm-fig9
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=24,32,48 --out $(REPRO_OUT)/qsm-fig9-large --no-analyze
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=16 --axis links.loss=1% \
	  --axis protocol.qsm.partition_size=5,8,16 --repetitions 2 --out $(REPRO_OUT)/qsm-figRloss5 --no-analyze
	$(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=25 --axis protocol.qsm.partition_size=5,25 \
	  --repetitions 2 --out $(REPRO_OUT)/qsm-fig13-25 --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig9-large $(REPRO_OUT)/qsm-figRloss5 $(REPRO_OUT)/qsm-fig13-25 \
	  --out $(REPRO_OUT)/results/qsm-fig9-more
	$(ORCH) sweep topologies/qsm-fig1-sweep.yaml --out $(REPRO_OUT)/qsm-fig1 --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig1 --out $(REPRO_OUT)/results/qsm-fig1
	$(ORCH) sweep topologies/qsm-fig16-sweep.yaml --out $(REPRO_OUT)/qsm-fig16 --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig16 --out $(REPRO_OUT)/results/qsm-fig16
	$(ORCH) sweep topologies/qsm-fig15-sweep.yaml --out $(REPRO_OUT)/qsm-fig15 --no-analyze
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig15 --out $(REPRO_OUT)/results/qsm-fig15

# GSGC (issue 17; docs/reproduction.md): the starting-points experiment, Figures 12-13 (global vs local on the
# sparse 1000-node tree; global at n = 500 with longer steps; the local scheme on 10x faster links, the isolating
# run), Figure 6 (Simulation I, dense 200) at b = 1..5, b = 3 at 4 s with the link rate scaled to the paper's
# header bytes (the isolating run), Figure 8 (Simulation II) at b = 1..5, the adaptive method with the paper's
# inputs (5 runs per step interval) and the local scheme at longer steps on 30 kbit/s links. Resumable; about 6.5
# hours on 2 cores.
GSGC_SIM1 := topologies/gsgc-sim1-dense-200.yaml
GSGC_LOCAL := topologies/gsgc-local-sparse-1000.yaml
GSGC_SIM2 := topologies/gsgc-sim2-dense-200.yaml
GSGC_SWEEP := --engine events --no-analyze --measure-first
# Figures 6 and 8: 200 members packed 20 per process, 5 runs per point, three labs at once
GSGC_DENSE := --axis nodes.packing=20 --repetitions 5 $(GSGC_SWEEP) --parallel 3
repro-gsgc: setup
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=3 --axis protocol.gsgc.step=4s,6s,9s \
	  --axis protocol.gsgc.start_phase=per_step,fixed --axis duration=75s --axis nodes.packing=20 --repetitions 3 \
	  $(GSGC_SWEEP) --parallel 3 --out $(REPRO_OUT)/gsgc-startphase
	$(ORCH) sweep $(GSGC_LOCAL) --only n=50 --only n=100 --only n=200 --only n=300 --only n=500 --repetitions 2 \
	  --axis duration=150s --axis nodes.packing=25 $(GSGC_SWEEP) --parallel 2 --out $(REPRO_OUT)/gsgc-fig12-13
	$(ORCH) sweep $(GSGC_LOCAL) --only n=100 --only n=200 --only n=500 --repetitions 1 --axis links.rate=300kbit \
	  --axis duration=150s --axis nodes.packing=25 $(GSGC_SWEEP) --parallel 2 --out $(REPRO_OUT)/gsgc-fig13-fastlinks
	$(ORCH) sweep $(GSGC_LOCAL) --only scheme=global --only n=500 --axis protocol.gsgc.step=5s,8s --repetitions 1 \
	  --axis duration=180s --axis nodes.packing=25 $(GSGC_SWEEP) --parallel 2 --out $(REPRO_OUT)/gsgc-fig12-global500
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=3 --axis protocol.gsgc.step=2s,4s,6s,9s,12s \
	  --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig6-b3
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=3 --axis protocol.gsgc.step=4s --axis links.rate=33100bit \
	  --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig6-b3-bytes
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=5 --axis protocol.gsgc.step=2s,4s,6s,9s,12s,15s \
	  --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig6-b5
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=1 --axis protocol.gsgc.step=1s,2s,3s,4s,6s \
	  --axis duration=120s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig6-b1
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=2 --only protocol.gsgc.subgroup=4 \
	  --axis protocol.gsgc.step=2s,4s,6s,9s,12s,15s --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig6-b24
	$(ORCH) sweep $(GSGC_SIM2) --only protocol.gsgc.subgroup=3 --axis protocol.gsgc.step=2s,4s,6s,9s,12s \
	  --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig8-b3
	$(ORCH) sweep $(GSGC_SIM2) --only protocol.gsgc.subgroup=1 --only protocol.gsgc.subgroup=2 \
	  --axis protocol.gsgc.step=2s,3s,6s --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig8-b12
	$(ORCH) sweep $(GSGC_SIM2) --only protocol.gsgc.subgroup=4 --only protocol.gsgc.subgroup=5 \
	  --axis protocol.gsgc.step=4s,9s,12s --axis duration=90s $(GSGC_DENSE) --out $(REPRO_OUT)/gsgc-fig8-b45
	$(ORCH) tune $(GSGC_SIM1) --param protocol.gsgc.step --a0 0 --b0 20 --g 2 --e 0.1 --p 1 --metric round0 \
	  --reps 5 --parallel 3 --measure-first --duration 60s --steps-per-run 4 --fix nodes.packing=20 --engine events \
	  --out $(REPRO_OUT)/tune-sim1-dense200-round0-r5
	$(ORCH) sweep $(GSGC_LOCAL) --only scheme=local --only n=200 --only n=500 --repetitions 1 \
	  --axis protocol.gsgc.step=2s,4s --axis protocol.gsgc.sc_step=1s,2s --axis duration=150s \
	  --axis nodes.packing=25 $(GSGC_SWEEP) --parallel 2 --out $(REPRO_OUT)/gsgc-fig13-localsteps
	@set -e; for d in gsgc-startphase gsgc-fig12-13 gsgc-fig13-fastlinks gsgc-fig12-global500 gsgc-fig6-b3 gsgc-fig6-b3-bytes \
	  gsgc-fig6-b1 gsgc-fig6-b24 gsgc-fig6-b5 gsgc-fig8-b3 gsgc-fig8-b12 gsgc-fig8-b45 gsgc-fig13-localsteps; do \
	  $(PY) -m analysis.sweep $(REPRO_OUT)/$$d --engine events; done
	$(PY) -m analysis.figures_gsgc startphase $(REPRO_OUT)/gsgc-startphase --out $(REPRO_OUT)/results/gsgc-startphase
	$(PY) -m analysis.figures_gsgc fig12_13 $(REPRO_OUT)/gsgc-fig12-13 --out $(REPRO_OUT)/results/gsgc-fig12-13
	$(PY) -m analysis.figures_gsgc fig12_13 $(REPRO_OUT)/gsgc-fig13-fastlinks --out $(REPRO_OUT)/results/gsgc-fig13-fastlinks
	$(PY) -m analysis.figures_gsgc fig6 $(REPRO_OUT)/gsgc-fig6-b3 --sim I --out $(REPRO_OUT)/results/gsgc-fig6
	$(PY) -m analysis.figures_gsgc fig6 $(REPRO_OUT)/gsgc-fig6-b1 $(REPRO_OUT)/gsgc-fig6-b24 $(REPRO_OUT)/gsgc-fig6-b3 \
	  $(REPRO_OUT)/gsgc-fig6-b5 --sim I --out $(REPRO_OUT)/results/gsgc-fig6-all
	$(PY) -m analysis.figures_gsgc fig6 $(REPRO_OUT)/gsgc-fig8-b3 --sim II --out $(REPRO_OUT)/results/gsgc-fig8
	$(PY) -m analysis.figures_gsgc fig6 $(REPRO_OUT)/gsgc-fig8-b12 $(REPRO_OUT)/gsgc-fig8-b3 $(REPRO_OUT)/gsgc-fig8-b45 \
	  --sim II --out $(REPRO_OUT)/results/gsgc-fig8-all
	$(PY) -m analysis.figures_gsgc sims --sim1 $(REPRO_OUT)/gsgc-fig6-b1 $(REPRO_OUT)/gsgc-fig6-b24 \
	  $(REPRO_OUT)/gsgc-fig6-b3 $(REPRO_OUT)/gsgc-fig6-b5 --sim2 $(REPRO_OUT)/gsgc-fig8-b12 $(REPRO_OUT)/gsgc-fig8-b3 \
	  $(REPRO_OUT)/gsgc-fig8-b45 --out $(REPRO_OUT)/results/gsgc-sims
	$(PY) -m analysis.figures_gsgc tune $(REPRO_OUT)/tune-sim1-dense200-round0-r5/tune.json \
	  --grid $(REPRO_OUT)/gsgc-fig6-b3 --out $(REPRO_OUT)/results/gsgc-tune

# Virtual time and CPU budgets (issue 33; docs/virtual-time.md): the small experiments at N = 1 and 4 (5 runs each),
# the probe at N = 10, budgets held, QSM at 48 members and vsync at 64 quiet and loaded (two busy loops) with budgets
# and auto against N = 1 without, the undilated kernel timers. Resumable; about 4 hours on 2 cores.
VT := $(REPRO_OUT)/vt
VT_RESULTS ?= docs/results/virtual-time
QUIET := $(PY) -m experiments.busy --loops 0 --load-log $(VT)/load.log --
LOADED := $(PY) -m experiments.busy --loops 2 --load-log $(VT)/load.log --
once = ls -d $(1)/*/manifest.json >/dev/null 2>&1 ||   # skip a command whose run directory exists (resumable)
repro-virtual-time: vt-transparency vt-probe vt-budget vt-load vt-undilated vt-tables
# repetitions per dilation: 5 for the short demo and pbcast-small, 3 for qsm-small (30 s) and hyparview-small (34 s),
# whose three pairs at N = 1 and 4 already take ~12 min each
vt-transparency: setup
	@set -e; for x in demo:5 pbcast-small:5 qsm-small:3 hyparview-small:3; do \
	  $(QUIET) $(ORCH) sweep topologies/$${x%:*}.yaml --axis time.dilation=1,4 --repetitions $${x#*:} --no-analyze \
	    --out $(VT)/transparency/$${x%:*}; done
vt-probe: setup
	@set -e; test -s $(VT)/probe-n10.json || { $(ORCH) up topologies/demo.yaml --name vtprobe --dilation 10; \
	  $(ORCH) probe vtprobe --links 6 --paths 2 --count 20 --no-rate --json > $(VT)/probe-n10.json; \
	  $(ORCH) teardown vtprobe; }
vt-budget: setup
	@set -e; for k in process 3; do $(call once,$(VT)/budget-$$k) \
	  $(QUIET) $(ORCH) run topologies/vt-budget.yaml --set packing=$$k --out $(VT)/budget-$$k; done
vt-load: setup
	@set -e; for c in quiet loaded; do w=$$( [ $$c = quiet ] && echo "$(QUIET)" || echo "$(LOADED)" ); \
	  for s in 1 2 3; do \
	    test -n "$$(ls $(VT)/load/qsm-budget-$$c/s$$s 2>/dev/null)" || $$w $(ORCH) run topologies/qsm-fig9.yaml \
	      --set members=48 --set send=8s --set cpu=1.0 --set seed=$$s --dilation auto --out $(VT)/load/qsm-budget-$$c/s$$s; \
	    test -n "$$(ls $(VT)/load/qsm-plain-$$c/s$$s 2>/dev/null)" || $$w $(ORCH) run topologies/qsm-fig9.yaml \
	      --set members=48 --set send=8s --set seed=$$s --out $(VT)/load/qsm-plain-$$c/s$$s; \
	  done; done
	@set -e; test -n "$$(ls $(VT)/load/pbcast-pilot 2>/dev/null)" || $(QUIET) $(ORCH) run topologies/pbcast-fig10.yaml \
	  --set members=64 --set span=6s --set cpu=1.0 --dilation 8 --out $(VT)/load/pbcast-pilot
	@set -e; pilot=$$(ls -d $(VT)/load/pbcast-pilot/f10-* | head -1); for c in quiet loaded; do \
	  w=$$( [ $$c = quiet ] && echo "$(QUIET)" || echo "$(LOADED)" ); for s in 1 2 3; do \
	    test -n "$$(ls $(VT)/load/pbcast-budget-$$c/s$$s 2>/dev/null)" || $$w $(ORCH) run topologies/pbcast-fig10.yaml \
	      --set members=64 --set span=21s --set cpu=1.0 --set seed=$$s --dilation auto --cpu-from $$pilot \
	      --out $(VT)/load/pbcast-budget-$$c/s$$s; \
	    test -n "$$(ls $(VT)/load/pbcast-plain-$$c/s$$s 2>/dev/null)" || $$w $(ORCH) run topologies/pbcast-fig10.yaml \
	      --set members=64 --set span=21s --set seed=$$s --out $(VT)/load/pbcast-plain-$$c/s$$s; \
	  done; done
vt-undilated: setup
	$(QUIET) $(ORCH) sweep topologies/direct-tcp.yaml --axis links.loss=2% --axis time.dilation=1,5 --repetitions 3 \
	  --no-analyze --out $(VT)/undilated/tcp-loss
	$(QUIET) $(ORCH) sweep topologies/direct-mcast.yaml --axis time.dilation=1,5 --repetitions 3 --no-analyze \
	  --out $(VT)/undilated/mcast
	@set -e; for n in 1 10; do test -s $(VT)/arp-n$$n.json || { $(ORCH) up topologies/demo.yaml --name vtarp \
	  --dilation $$n; $(PY) -m experiments.arp_first vtarp > $(VT)/arp-n$$n.json; $(ORCH) teardown vtarp; }; done
vt-tables: setup
	$(PY) -m analysis.virtual_time transparency $(VT)/transparency/* --out $(VT_RESULTS)
	$(PY) -m analysis.virtual_time probe $(VT)/probe-n10.json --out $(VT_RESULTS)
	$(PY) -m analysis.virtual_time budget $(VT)/budget-*/vtb-* --out $(VT_RESULTS)
	$(PY) -m analysis.virtual_time load $(foreach k,qsm pbcast,$(foreach c,budget plain,$(foreach l,quiet loaded,\
	  $(k)-$(c)-$(l)=$(VT)/load/$(k)-$(c)-$(l)))) --load-log $(VT)/load.log --out $(VT_RESULTS)
	$(PY) -m analysis.virtual_time undilated $(VT)/undilated/tcp-loss $(VT)/undilated/mcast \
	  --arp $(VT)/arp-n1.json $(VT)/arp-n10.json --out $(VT_RESULTS)

# The CPU-bound results again with a CPU per member (issue 33; docs/reproduction-qsm.md, docs/reproduction-pbcast.md,
# docs/reproduction.md): QSM Figure 9 (2-71 members) and 16, vsync's Figure 10a (8-105 members), Figure 12 at 66,
# traditional virtual synchrony's Figure 1 at 32, 64, 96 members and 200 msgs/s, GSGC Figure 6 at b = 3 at
# dilation 4 (its members' start-up burst, not their load, needs the time: 47 ms start lag p99 at N = 1, 200 members
# packed 20 per process). Resumable; many hours on 2 cores.
BUDGET := --axis nodes.cpu=1.0 --dilation auto --no-analyze
# QSM Figure 9 alone: FIG9_NODES (a run of n members at one core each lasts about n / 1.5 x 18 s: N = auto), 3
# repetitions, one at a time, the load logged; 2-32 members take about 50 minutes, 48 and 71 about 2 hours more.
# FIG9_DIR names the sweep and its results directory.
FIG9_NODES ?= 2,4,8,16,32,48,71
FIG9_DIR ?= qsm-fig9-budget
repro-qsm-fig9-budget: setup
	$(LOGGED) $(ORCH) sweep topologies/qsm-fig9-sweep.yaml --axis topology.nodes=$(FIG9_NODES) \
	  --axis workload.stop=12s --axis duration=18s $(BUDGET) --out $(REPRO_OUT)/$(FIG9_DIR)
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/$(FIG9_DIR) --out docs/results/$(FIG9_DIR) \
	  --load $(REPRO_OUT)/load.log
repro-budgets: repro-qsm-fig9-budget
	$(ORCH) sweep $(GSGC_SIM1) --only protocol.gsgc.subgroup=3 --axis protocol.gsgc.step=2s,4s,6s,9s,12s \
	  --axis duration=90s --axis nodes.packing=20 --repetitions 5 --dilation 4 $(GSGC_SWEEP) --parallel 3 \
	  --out $(REPRO_OUT)/gsgc-fig6-b3-n4
	$(PY) -m analysis.sweep $(REPRO_OUT)/gsgc-fig6-b3-n4 --engine events
	$(PY) -m analysis.figures_gsgc fig6 $(REPRO_OUT)/gsgc-fig6-b3-n4 --sim I --out docs/results/gsgc-fig6-n4
	$(ORCH) sweep topologies/pbcast-fig10-sweep.yaml --axis topology.nodes=8,16,32,64,105 $(BUDGET) \
	  --out $(REPRO_OUT)/pbcast-fig10-budget
	$(PY) -m analysis.figures_pbcast_more fig10 $(REPRO_OUT)/pbcast-fig10-budget --out docs/results/pbcast-fig10-budget
	$(ORCH) sweep topologies/qsm-fig16-sweep.yaml --axis workload.stop=12s --axis duration=18s --repetitions 3 \
	  $(BUDGET) --out $(REPRO_OUT)/qsm-fig16-budget
	$(PY) -m analysis.figures_qsm $(REPRO_OUT)/qsm-fig16-budget --out docs/results/qsm-fig16-budget
	@set -e; for s in 1 2; do for n in 32 64 96; do for p in 0 0.1 0.3 0.5; do d=$(REPRO_OUT)/pbcast-fig1-budget/s$$s/n$$n-p$$p; \
	  test -n "$$(ls $$d 2>/dev/null)" || $(ORCH) run topologies/pbcast-fig1.yaml --set protocol=tradvsync --set rate=200 \
	    --set members=$$n --set p=$$p --set span=41s --set cpu=1.0 --set seed=$$s --dilation auto --out $$d; \
	  done; done; done
	$(PY) -m analysis.figures_pbcast $(REPRO_OUT)/pbcast-fig1-budget/s*/n*/f1-* --out docs/results/pbcast-fig1-budget
	@set -e; for s in 1 2; do for p in 0 0.1 0.3 0.5; do d=$(REPRO_OUT)/pbcast-fig12-budget/s$$s/p$$p; \
	  test -n "$$(ls $$d 2>/dev/null)" || $(ORCH) run topologies/pbcast-fig1.yaml --set protocol=vsync --set rate=100 \
	    --set members=66 --set p=$$p --set span=61s --set cpu=1.0 --set seed=$$s --dilation auto --out $$d; \
	  done; done
	$(PY) -m analysis.figures_pbcast $(REPRO_OUT)/pbcast-fig12-budget/s*/p*/f1-* --out docs/results/pbcast-fig12-budget

# One lab over several machines (issue #35; docs/machines.md): the demo 3 times on this machine and 3 times split over
# three "machines" made on it (namespaces with their own sshd, the cut links VXLAN tunnels between them), the key
# metrics side by side, the load logged beside. Resumable (finished runs are skipped); about 15 minutes.
MC := $(REPRO_OUT)/machines
repro-machines: setup
	$(PY) -m experiments.busy --loops 0 --load-log $(MC)/load.log -- $(PY) -m experiments.machines_demo $(MC)
	$(PY) -m analysis.machines_compare $(MC)/one/demo $(MC)/split/demo --out docs/results/machines
	cp $(MC)/load.log docs/results/machines/load.log

# The same small experiment of each protocol family under netem (in the netem VM, at dilation 5: Python there runs
# ~20x slower) and under the delay line on this machine (dilation 1; virtual time's transparency on these
# experiments: docs/virtual-time.md), 3 repetitions each, members packed into one process; the key metrics side by
# side (docs/netem.md). Resumable: a sweep whose directory exists is skipped. ~40 min in the VM, ~10 here.
NC := $(REPRO_OUT)/netem-compare
NC_EXPS := demo:--axis=topology.nodes=16:--axis=duration=40s:--axis=nodes.packing=16 \
  pbcast-small:--axis=nodes.packing=12 qsm-small:--axis=nodes.packing=24 hyparview-small:--axis=nodes.packing=20
repro-netem: setup
	@test -n "$(NETEM_VM)" -a -x "$(NETEM_VM)" || { echo "run-in-netem-vm.sh not found: pass NETEM_VM=/path/to/run-in-netem-vm.sh" >&2; exit 2; }
	$(NETEM_VM) --setup
	@mkdir -p $(NC); for x in $(NC_EXPS); do n=$${x%%:*}; a=$$(echo $${x#*:} | tr ":" " "); \
	  test -e $(NC)/netem/$$n || echo "$$n $$a"; done > $(NC).todo; \
	if [ -s $(NC).todo ]; then $(NETEM_VM) --timeout 3600 -- bash -c 'while read n a; do \
	  $(ORCH) sweep topologies/$$n.yaml $$a --repetitions 3 --shaper netem --dilation 5 --no-analyze \
	    --out $(NC)/netem/$$n || exit 1; done < $(NC).todo'; fi
	@set -e; for x in $(NC_EXPS); do n=$${x%%:*}; a=$$(echo $${x#*:} | tr ':' ' '); \
	  test -e $(NC)/delayline/$$n || $(ORCH) sweep topologies/$$n.yaml $$a --repetitions 3 --shaper delayline \
	    --no-analyze --out $(NC)/delayline/$$n; done
	$(PY) -m analysis.netem_compare $$(ls -d $(NC)/netem*/* $(NC)/delayline*/* $(NC)/vm-delayline*/* 2>/dev/null) \
	  --merge --out docs/results/netem

# The main table's disagreements apart (docs/netem.md): the delay line at the VM's dilation 5 in the VM (~35 min; it
# needs the machine to itself) and on this machine (~15 min), 3 runs each of pbcast-small and qsm-small, then both
# tables (the runs of make repro-netem too). NCI_N=10: netem and the delay line both in the VM at dilation 10 (where
# the delay line is faithful there too; ~80 min), the delay line here at 10 (~25 min): a chain of its own. The CSV
# keeps the runs of earlier sweeps (--merge: a run again replaces its row).
NCI_EXPS := pbcast-small:--axis=nodes.packing=12 qsm-small:--axis=nodes.packing=24
NCI_N ?= 5
NCI_VM_DIRS := $(if $(filter 5,$(NCI_N)),vm-delayline:delayline,netem-n$(NCI_N):netem vm-delayline-n$(NCI_N):delayline)
repro-netem-isolate: setup
	@test -n "$(NETEM_VM)" -a -x "$(NETEM_VM)" || { echo "run-in-netem-vm.sh not found: pass NETEM_VM=/path/to/run-in-netem-vm.sh" >&2; exit 2; }
	@mkdir -p $(NC); for d in $(NCI_VM_DIRS); do for x in $(NCI_EXPS); do n=$${x%%:*}; a=$$(echo $${x#*:} | tr ":" " "); \
	  test -e $(NC)/$${d%%:*}/$$n || echo "$${d%%:*} $${d#*:} $$n $$a"; done; done > $(NC).todo; \
	if [ -s $(NC).todo ]; then $(NETEM_VM) --timeout 9000 -- bash -c 'while read d s n a; do \
	  $(ORCH) sweep topologies/$$n.yaml $$a --repetitions 3 --shaper $$s --dilation $(NCI_N) --no-analyze \
	    --out $(NC)/$$d/$$n || true; done < $(NC).todo'; fi
	@set -e; for x in $(NCI_EXPS); do n=$${x%%:*}; a=$$(echo $${x#*:} | tr ':' ' '); \
	  test -e $(NC)/delayline-n$(NCI_N)/$$n || $(ORCH) sweep topologies/$$n.yaml $$a --repetitions 3 --shaper delayline \
	    --dilation $(NCI_N) --no-analyze --out $(NC)/delayline-n$(NCI_N)/$$n; done
	$(PY) -m analysis.netem_compare $$(ls -d $(NC)/netem*/* $(NC)/delayline*/* $(NC)/vm-delayline*/* 2>/dev/null) \
	  --merge --out docs/results/netem

clean-labs: venv
	$(VENV)/bin/orchestrator teardown --all
