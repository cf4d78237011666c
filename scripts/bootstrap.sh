#!/usr/bin/env bash
# Set up everything ringtrain needs on a Debian machine, idempotently:
#   1. Debian packages (Open MPI, sshd, iproute2, ...), installed with apt-get when run as root;
#      otherwise a message naming what to install.
#   2. A virtualenv in .venv (or $RINGTRAIN_VENV) with TensorFlow 2.15.1 first, then Horovod
#      0.28.1 compiled against it (--no-build-isolation; MPI + Gloo + TensorFlow), then ringtrain
#      and its pinned dependencies (requirements/constraints.txt). Horovod is ringtrain's
#      0.28.1+ringtrain.4: PyPI's sdist with scripts/horovod-0.28.1-ringtrain.patch applied (a
#      peer lost while an elastic ring forms fails hvd.init() instead of std::terminate in every
#      survivor; a Gloo pair waits one timeout, not five, for a peer's first connection; a stray
#      message on a broken ring fails that pair, not the process; a peer lost mid-message fails
#      the buffer that message was filling at once, not after Gloo's timeout). Its wheel is kept in ~/.cache/ringtrain/wheels/<cpu|gpu> (or
#      $RINGTRAIN_WHEELS) and, like one on PIP_FIND_LINKS, installed instead of a new build.
#      On a machine where nvidia-smi lists a GPU: TensorFlow's GPU build with its CUDA 12 wheels
#      (tensorflow[and-cuda]) and Horovod built with HOROVOD_GPU_OPERATIONS=NCCL (NCCL from
#      those wheels, nvcc from the CUDA toolkit). Elsewhere tensorflow-cpu. RINGTRAIN_TF=cpu or
#      RINGTRAIN_TF=gpu decides instead.
#   3. A check that Horovod really has TensorFlow, MPI and Gloo (and NCCL for a GPU build); a
#      loud failure otherwise.
# A second run with nothing changed only checks a stamp and returns in about a second.
# Usage: scripts/bootstrap.sh            (what the README's two commands call)
#        scripts/bootstrap.sh --plan     (say what it would install and why; change nothing)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${RINGTRAIN_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
CONSTRAINTS=requirements/constraints.txt
APT_PACKAGES=(openmpi-bin libopenmpi-dev openssh-server openssh-client iproute2 procps make
              slurm-wlm munge libpmix-dev g++ patch python3-dev python3-venv)
EXTRAS="s3,hdfs,demo,bench,dev"
STAMP="$VENV/.ringtrain-bootstrap"
HOROVOD=0.28.1
HOROVOD_OURS="$HOROVOD+ringtrain.4"  # keep in step with the patch's horovod/__init__.py
HOROVOD_PATCH=scripts/horovod-0.28.1-ringtrain.patch

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
    cat setup.cfg pyproject.toml "$CONSTRAINTS" scripts/bootstrap.sh "$HOROVOD_PATCH" |
        sha256sum | cut -d' ' -f1
    "$PYTHON" -V 2>&1
    echo "tf=$FLAVOUR"
}

# gpu when nvidia-smi lists a GPU (or RINGTRAIN_TF=gpu), else cpu; GPUS says what was seen
choose_flavour() {
    GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
           awk '{$1=$1; print}' | paste -sd ',' - || true)
    case "${RINGTRAIN_TF:-}" in
        cpu|gpu) FLAVOUR=$RINGTRAIN_TF; WHY="RINGTRAIN_TF=$RINGTRAIN_TF" ;;
        "") if [ -n "$GPUS" ]; then FLAVOUR=gpu; WHY="nvidia-smi lists $GPUS"
            else FLAVOUR=cpu; WHY="nvidia-smi lists no GPU"; fi ;;
        *) die "RINGTRAIN_TF=$RINGTRAIN_TF" "set RINGTRAIN_TF=cpu or RINGTRAIN_TF=gpu, or unset it" ;;
    esac
}

cuda_home() {  # the CUDA toolkit Horovod's GPU build compiles with (nvcc)
    local nvcc
    if [ -n "${HOROVOD_CUDA_HOME:-}" ]; then echo "$HOROVOD_CUDA_HOME"; return 0; fi
    nvcc=$(command -v nvcc || true)
    [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
    [ -n "$nvcc" ] && dirname "$(dirname "$(readlink -f "$nvcc")")"
    return 0
}

plan() {
    say "python: $("$PYTHON" -V 2>&1) ($PYTHON)"
    "$PYTHON" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null ||
        say "  TensorFlow 2.15 needs Python 3.10 or 3.11: set PYTHON=/path/to/python3.11"
    say "TensorFlow: $FLAVOUR build ($WHY)"
    if [ "$FLAVOUR" = gpu ]; then
        say "  tensorflow[and-cuda]==2.15.1: TensorFlow's GPU build and its CUDA 12 / cuDNN 8.9 wheels"
        local cuda
        cuda=$(cuda_home)
        if [ -n "$cuda" ]; then
            say "  Horovod $HOROVOD_OURS with HOROVOD_GPU_OPERATIONS=NCCL: nvcc of $cuda, NCCL of the nvidia-nccl-cu12 wheel"
            local major
            major=$("$cuda/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' || true)
            [ "$major" = 12 ] || say "  warning: that toolkit is CUDA ${major:-of unknown version}; TensorFlow 2.15 is built for CUDA 12 (set HOROVOD_CUDA_HOME to a CUDA 12 toolkit)"
        else
            say "  Horovod with NCCL needs the CUDA toolkit's nvcc: none on PATH or in /usr/local/cuda"
            say "  (install the CUDA 12 toolkit, or set RINGTRAIN_TF=cpu for a CPU build)"
        fi
    else
        say "  tensorflow-cpu==2.15.1; Horovod $HOROVOD_OURS without GPU operations"
    fi
}

horovod_gpu_env() {  # NCCL for Horovod's build from TensorFlow's own nvidia-nccl-cu12 wheel
    local cuda nccl
    cuda=$(cuda_home)
    [ -n "$cuda" ] || die "Horovod's NCCL build needs the CUDA toolkit (nvcc): none on PATH or in /usr/local/cuda" \
        "install the CUDA 12 toolkit, or run with RINGTRAIN_TF=cpu for a CPU build"
    nccl=$("$VENV/bin/python" -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])") ||
        die "no nvidia-nccl-cu12 in $VENV (tensorflow[and-cuda] installs it)" "rm -rf $VENV and run this again"
    mkdir -p "$VENV/nccl-home/lib"  # Horovod links -lnccl; the wheel ships libnccl.so.2 only
    ln -sfn "$nccl/include" "$VENV/nccl-home/include"
    ln -sfn "$nccl/lib/libnccl.so.2" "$VENV/nccl-home/lib/libnccl.so"
    HVD_GPU_ENV=(HOROVOD_GPU_OPERATIONS=NCCL "HOROVOD_CUDA_HOME=$cuda" "HOROVOD_NCCL_HOME=$VENV/nccl-home")
}

verify_horovod() {
    say "checking that Horovod has TensorFlow, MPI and Gloo"
    FLAVOUR=$FLAVOUR "$VENV/bin/python" - <<'EOF' || die "Horovod is not usable (see above)" "rm -rf $VENV and run this script again; check the build log above"
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod.tensorflow as hvd  # loads the compiled TensorFlow ops or fails
need = [("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())]
if os.environ["FLAVOUR"] == "gpu":
    need.append(("NCCL", hvd.nccl_built()))
missing = [name for name, ok in need if not ok]
if missing:
    sys.exit(f"Horovod was built without {', '.join(missing)}")
import horovod
print(f"bootstrap: Horovod {horovod.__version__}: TensorFlow yes, " + ", ".join(f"{n} yes" for n, _ in need),
      file=sys.stderr)
EOF
}

# ringtrain's Horovod: a wheel already built (ours, or one on PIP_FIND_LINKS), else PyPI's
# sdist of 0.28.1, patched, built into the wheel folder and installed from there
install_horovod() {
    local wheels="${RINGTRAIN_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/ringtrain/wheels}/$FLAVOUR"
    local links=("$wheels" ${PIP_FIND_LINKS:-}) work
    mkdir -p "$wheels"
    if "$@" --no-deps --only-binary horovod --find-links "$wheels" "horovod==$HOROVOD_OURS" 2>/dev/null; then
        say "installed Horovod $HOROVOD_OURS from a wheel built before (${links[*]})"
        return 0
    fi
    say "building Horovod $HOROVOD_OURS against TensorFlow: PyPI's $HOROVOD with $HOROVOD_PATCH (first time on a machine: 4-15 minutes; the wheel is kept in $wheels)"
    work=$(mktemp -d)
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
        --no-binary horovod -d "$work" "horovod==$HOROVOD" ||
        die "could not download Horovod $HOROVOD's sdist from the package index" "check the network or PIP_INDEX_URL"
    tar -xzf "$work/horovod-$HOROVOD.tar.gz" -C "$work"
    patch -d "$work/horovod-$HOROVOD" -p1 --quiet < "$HOROVOD_PATCH" ||
        die "$HOROVOD_PATCH does not apply to Horovod $HOROVOD's sdist" "rm -rf $work and report it"
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
        HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS="-j$(nproc)" "${HVD_GPU_ENV[@]}" \
        "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps \
        --no-build-isolation -w "$wheels" "$work/horovod-$HOROVOD"
    rm -rf "$work"
    "$@" --no-deps --no-index --find-links "$wheels" "horovod==$HOROVOD_OURS"
}

install_venv() {
    local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS")
    local extra=train-cpu tf=tensorflow-cpu
    HVD_GPU_ENV=()
    if [ "$FLAVOUR" = gpu ]; then extra=train; tf="tensorflow[and-cuda]"; fi
    [ -x "$VENV/bin/python" ] || { say "creating virtualenv $VENV"; "$PYTHON" -m venv "$VENV"; }
    say "installing build tools and TensorFlow 2.15.1, $FLAVOUR build (first time: a few minutes)"
    "${pip[@]}" pip setuptools wheel cmake
    "${pip[@]}" "$tf"
    if [ "$FLAVOUR" = gpu ]; then horovod_gpu_env; fi
    if ! "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('horovod') == '$HOROVOD_OURS'" 2>/dev/null; then
        install_horovod "${pip[@]}"
    fi
    say "installing ringtrain[$extra,$EXTRAS]"
    "${pip[@]}" --no-build-isolation -e ".[$extra,$EXTRAS]"
}

main() {
    choose_flavour
    if [ "${1:-}" = --plan ]; then plan; return 0; fi
    [ $# -eq 0 ] || die "unknown argument: $1" "scripts/bootstrap.sh [--plan]"
    install_debian_packages
    check_python
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_value)" ]; then
        say "environment up to date ($VENV)"
        return 0
    fi
    plan
    install_venv
    verify_horovod
    stamp_value > "$STAMP"
    say "done: $VENV is ready"
}

main "$@"
