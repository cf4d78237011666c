#!/usr/bin/env bash
# Set up everything ringtrain needs on a Debian machine, idempotently:
#   1. Debian packages (Open MPI, sshd, iproute2, ...), installed with apt-get when run as root;
#      otherwise a message naming what to install.
#   2. A virtualenv in .venv (or $RINGTRAIN_VENV) with TensorFlow 2.15.1 first, then Horovod
#      0.28.1 compiled against it (--no-build-isolation; MPI + Gloo + TensorFlow), then ringtrain
#      and its pinned dependencies (requirements/constraints.txt).
#   3. A check that Horovod really has TensorFlow, MPI and Gloo; a loud failure otherwise.
# A second run with nothing changed only checks a stamp and returns in about a second.
# Usage: scripts/bootstrap.sh            (what the README's two commands call)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${RINGTRAIN_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
CONSTRAINTS=requirements/constraints.txt
APT_PACKAGES=(openmpi-bin libopenmpi-dev openssh-server openssh-client iproute2 procps make
              slurm-wlm munge libpmix-dev g++ python3-dev python3-venv)
EXTRAS="train,s3,hdfs,demo,bench,dev"
STAMP="$VENV/.ringtrain-bootstrap"

say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { printf 'bootstrap: error: %s\n' "$1" >&2; [ $# -gt 1 ] && printf '  fix: %s\n' "$2" >&2; exit 1; }

missing_packages() {
    local p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

install_debian_packages() {
    command -v dpkg-query >/dev/null || die "this is not a Debian-based system (no dpkg-query)" \
        "install ${APT_PACKAGES[*]} with your package manager, then run this again"
    local missing
    mapfile -t missing < <(missing_packages)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        die "missing Debian packages: ${missing[*]}" "sudo apt-get install -y ${missing[*]}"
    fi
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

check_python() {
    command -v "$PYTHON" >/dev/null || die "no $PYTHON on PATH" "install Python 3.10 or 3.11, or set PYTHON=/path/to/python3.11"
    "$PYTHON" - <<'EOF' || die "TensorFlow 2.15 needs Python 3.10 or 3.11; $PYTHON is $("$PYTHON" -V 2>&1)" "set PYTHON=/path/to/python3.11"
import sys
sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 11) else 1)
EOF
}

stamp_value() {
    cat setup.cfg pyproject.toml "$CONSTRAINTS" scripts/bootstrap.sh | sha256sum | cut -d' ' -f1
    "$PYTHON" -V 2>&1
}

verify_horovod() {
    say "checking that Horovod has TensorFlow, MPI and Gloo"
    "$VENV/bin/python" - <<'EOF' || die "Horovod is not usable (see above)" "rm -rf $VENV and run this script again; check the build log above"
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod.tensorflow as hvd  # loads the compiled TensorFlow ops or fails
missing = [name for name, ok in (("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())) if not ok]
if missing:
    sys.exit(f"Horovod was built without {', '.join(missing)}")
print("bootstrap: Horovod 0.28.1: TensorFlow yes, MPI yes, Gloo yes", file=sys.stderr)
EOF
}

install_venv() {
    local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS")
    [ -x "$VENV/bin/python" ] || { say "creating virtualenv $VENV"; "$PYTHON" -m venv "$VENV"; }
    say "installing build tools and TensorFlow 2.15.1 (first time: a few minutes)"
    "${pip[@]}" pip setuptools wheel cmake
    "${pip[@]}" tensorflow-cpu
    if ! "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('horovod') == '0.28.1'" 2>/dev/null; then
        say "building Horovod 0.28.1 against TensorFlow (first time on a machine: 4-15 minutes)"
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
        HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS="-j$(nproc)" \
            "${pip[@]}" --no-build-isolation horovod
    fi
    say "installing ringtrain[$EXTRAS]"
    "${pip[@]}" --no-build-isolation -e ".[$EXTRAS]"
}

main() {
    install_debian_packages
    check_python
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_value)" ]; then
        say "environment up to date ($VENV)"
        return 0
    fi
    install_venv
    verify_horovod
    stamp_value > "$STAMP"
    say "done: $VENV is ready"
}

main "$@"
