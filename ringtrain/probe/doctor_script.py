"""The doctor's part of the probe script: what each host is asked about its GPUs and NICs.

PURE (text only). ``hostprobe.PROBE_SCRIPT`` runs these functions as sections in the same SSH
round trip as the rest of the probe; ``doctor_parse`` reads them. Every command is fixed here:
nothing from the inventory or the user reaches them. Formats (checked against real outputs in
tests/unit/golden/probe/doctor/):

    health  ``#fields a,b,...`` then nvidia-smi CSV rows of those fields (noheader, nounits).
            A field this driver does not know is dropped and the query asked again, so one
            old driver never loses the whole check ("not supported", never a failure).
            R535 drivers know no remapped_rows.* in --query-gpu: then ``#remap BUS, pending,
            failure`` lines from --query-remapped-rows follow.
    apps    nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory
    pcie    the ``GPU <bus id>`` and ``Replays Since Reset`` lines of ``nvidia-smi -q``
    nvlink  nvidia-smi nvlink -s (per link: speed or ``<inactive>``)
    topo    nvidia-smi topo -m
    xid     ``#boot <id>``, ``#uptime <s>``, then the kernel log's ``NVRM: Xid`` lines (dmesg);
            when dmesg is refused (kernel.dmesg_restrict) its one line and its exit code
    links   ``port DEV N|state|phys_state|rate|link_layer|link_downed`` per InfiniBand/RoCE
            port and ``net IF|speed|operstate|rdma device`` per interface, from sysfs
    jobs    ``rank PID RUN_ID`` for every process on the host (same UTS namespace) whose
            environment names a ringtrain run: another job's ranks, found by the probe's Python
"""

from __future__ import annotations

from ringtrain.rank import envvars

# The fields of the health query. Alternatives across drivers are both asked for: the one
# the driver does not know is dropped (clocks_throttle_reasons became clocks_event_reasons in
# R535; reset_status.* were replaced by gpu_recovery_action in R550-R570 drivers).
HEALTH_FIELDS = (
    "index",
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
    "clocks_throttle_reasons.active",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "gpu_recovery_action",
    "reset_status.reset_required",
    "reset_status.drain_and_reset_recommended",
    "temperature.gpu",
    "utilization.gpu",
)
MAX_DROPPED = 8  # tries of the health query, each dropping one field the driver refused
XID_LINES = 50  # the newest Xid lines kept
SIM_SYSFS_ENV = "RINGTRAIN_SIM_SYSFS"  # the simulated cluster's fake /sys (unset: /sys)

# Standard library only, run by the probe's Python: processes of ringtrain runs on this host.
JOBS_PY = """\
import os, re
marker = b"@RUN_ID@="
def uts(pid):
    try:
        return os.readlink("/proc/%s/ns/uts" % pid)
    except OSError:
        return None
mine = uts("self")
me = os.getpid()
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == me:
        continue
    try:
        with open("/proc/%s/environ" % entry, "rb") as fh:
            env = fh.read()
    except OSError:
        continue
    i = env.find(marker)
    if i < 0 or (i > 0 and env[i - 1] != 0):
        continue
    run = env[i + len(marker):].split(b"\\0", 1)[0].decode("ascii", "replace")
    if uts(entry) == mine and re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", run):
        print("rank", entry, run)
""".replace("@RUN_ID@", envvars.RUN_ID)

FUNCTIONS = f"""\
S=${{{SIM_SYSFS_ENV}:-/sys}}
rt_health() {{
  f={",".join(HEALTH_FIELDS)}
  n=0
  while :; do
    out=$($T nvidia-smi --query-gpu="$f" --format=csv,noheader,nounits 2>&1 </dev/null)
    rc=$?
    bad=$(printf '%s\\n' "$out" | sed -n \\
      's/^Field "\\([A-Za-z0-9_.]*\\)" is not a valid field to query\\.$/\\1/p' | head -n 1)
    if [ -z "$bad" ] || [ $n -ge {MAX_DROPPED} ]; then break; fi
    re=$(printf '%s' "$bad" | sed 's/\\./\\\\./g')
    f=$(printf ',%s,' "$f" | sed "s/,$re,/,/; s/^,//; s/,$//")
    n=$((n + 1))
  done
  printf '#fields %s\\n' "$f"
  if [ -n "$out" ]; then printf '%s\\n' "$out"; fi
  case ",$f," in
    *,remapped_rows.pending,*) ;;
    *) [ $rc -eq 0 ] && $T nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,\\
remapped_rows.failure --format=csv,noheader,nounits 2>/dev/null </dev/null | sed 's/^/#remap /' ;;
  esac
  return $rc
}}
rt_pcie() {{
  out=$($T nvidia-smi -q 2>&1 </dev/null)
  rc=$?
  printf '%s\\n' "$out" | grep -E '^GPU [0-9A-Fa-f]|Replays Since Reset|Replay Number Rollovers'
  return $rc
}}
rt_xid() {{
  b=; u=
  read -r b < /proc/sys/kernel/random/boot_id 2>/dev/null
  read -r u _ < /proc/uptime 2>/dev/null
  printf '#boot %s\\n#uptime %s\\n' "$b" "$u"
  out=$(dmesg 2>&1 </dev/null)
  rc=$?
  if [ $rc -ne 0 ]; then printf '%s\\n' "$out" | head -n 1; return $rc; fi
  printf '%s\\n' "$out" | grep -F 'NVRM: Xid' | tail -n {XID_LINES}
  return 0
}}
rt_read() {{ v=; read -r v < "$1" 2>/dev/null; printf '%s' "$v"; }}
rt_links() {{
  for p in "$S"/class/infiniband/*/ports/*; do
    [ -d "$p" ] || continue
    d=${{p%/ports/*}}; d=${{d##*/}}
    printf 'port %s %s|%s|%s|%s|%s|%s\\n' "$d" "${{p##*/}}" "$(rt_read "$p/state")" \\
      "$(rt_read "$p/phys_state")" "$(rt_read "$p/rate")" "$(rt_read "$p/link_layer")" \\
      "$(rt_read "$p/counters/link_downed")"
  done
  for n in "$S"/class/net/*; do
    [ -e "$n" ] || continue
    r=
    for i in "$n"/device/infiniband/*; do [ -e "$i" ] && r=${{i##*/}}; done
    printf 'net %s|%s|%s|%s\\n' "${{n##*/}}" "$(rt_read "$n/speed")" \\
      "$(rt_read "$n/operstate")" "$r"
  done
  return 0
}}
fsection() {{
  printf '@@ringtrain:begin %s@@\\n' "$1"
  "$2"
  printf '@@ringtrain:end %s@@\\n' "$?"
}}
"""

SECTIONS = """\
fsection health rt_health
section apps nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory \\
  --format=csv,noheader,nounits
fsection pcie rt_pcie
section nvlink nvidia-smi nvlink -s
section topo nvidia-smi topo -m
fsection xid rt_xid
fsection links rt_links
section jobs "$PY" -c "$3"
"""
