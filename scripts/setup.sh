#!/usr/bin/env bash
# The one set-up entry point: Debian packages (Slurm's client commands and daemons too, which
# --launcher=slurm and its test use), the virtualenv at .venv with the pins of
# requirements.txt, Horovod built from its sdist against that TensorFlow and Debian's OpenMPI,
# then a self-check. The project itself is not installed: it runs from the checkout
# (docs/architecture.md).
#
# Idempotent: every step checks whether it is already done. The Horovod wheel is built once
# into a cache outside the checkout (IMPALA_CACHE_DIR, default /var/cache/impala-horovod),
# keyed on the Horovod, TensorFlow and Python versions, so fresh clones install it in seconds.
#
# GPU learners (untestable here, no GPU): set IMPALA_GPU=1 to install `tensorflow[and-cuda]`
# at the pinned TF version instead of tensorflow-cpu and build Horovod with
# HOROVOD_GPU_OPERATIONS=NCCL (needs CUDA and NCCL development files on the machine).
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${IMPALA_CACHE_DIR:-/var/cache/impala-horovod}"
VENV_DIR="${IMPALA_VENV_DIR:-$REPO_DIR/.venv}"
HOROVOD_VERSION=0.28.1
GPU="${IMPALA_GPU:-0}"
APT_PACKAGES=(python3 python3-venv python3-dev g++ make cmake openmpi-bin libopenmpi-dev
              tmux openssh-client openssh-server iproute2 procps psmisc ca-certificates
              libtcmalloc-minimal4 slurm-client slurmctld slurmd munge)

step() { echo "[setup $(date +%H:%M:%S)] $*"; }
die() { echo "[setup] ERROR: $*" >&2; exit 1; }

install_apt_packages() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    step "Debian packages: all present"
    return
  fi
  [ "$(id -u)" -eq 0 ] || die "Debian packages missing (${missing[*]}) and not root: install them first"
  step "Debian packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Debian's python3 is 3.11 on bookworm; a python3.11 earlier on PATH (pyenv) is used if present.
python_for_venv() {
  local py
  py="$(command -v python3.11 || command -v python3)" || die "no python3 found"
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || die "$py is not Python 3.11"
  echo "$py"
}

pinned_tf_version() {
  sed -n 's/^tensorflow-cpu==\([0-9.]*\).*/\1/p' "$REPO_DIR/requirements.txt"
}

create_venv_and_install_pins() {
  local stamp="$VENV_DIR/.impala-requirements.sha256"
  local want
  want="$(cat "$REPO_DIR/requirements.txt" <(echo "gpu=$GPU") | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV_DIR/bin/python" ]; then
    step "virtualenv: creating $VENV_DIR"
    "$(python_for_venv)" -m venv "$VENV_DIR"
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    step "virtualenv: pinned requirements already installed"
    return
  fi
  step "virtualenv: installing pinned requirements (TensorFlow is large; pip caches it)"
  "$VENV_DIR/bin/pip" install --progress-bar off -q --upgrade pip setuptools wheel
  if [ "$GPU" = 1 ]; then
    local reqs
    reqs="$(mktemp)"
    sed "s/^tensorflow-cpu==/tensorflow[and-cuda]==/" "$REPO_DIR/requirements.txt" > "$reqs"
    "$VENV_DIR/bin/pip" install --progress-bar off -r "$reqs"
  else
    "$VENV_DIR/bin/pip" install --progress-bar off -r "$REPO_DIR/requirements.txt"
  fi
  echo "$want" > "$stamp"
}

# Builds the Horovod wheel into the cache if it is not there yet; prints the wheel's path.
horovod_wheel() {
  local py_tag tf_version key wheel_dir build_dir
  py_tag="$("$VENV_DIR/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  tf_version="$(pinned_tf_version)"
  key="horovod-${HOROVOD_VERSION}_tf-${tf_version}_${py_tag}_$( [ "$GPU" = 1 ] && echo nccl || echo cpu)"
  wheel_dir="$CACHE_DIR/wheels/$key"
  if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    step "Horovod: building $key from its sdist (about 8 minutes on 2 cores; once per machine)" >&2
    build_dir="$(mktemp -d)"
    (
      cd "$build_dir"
      "$VENV_DIR/bin/pip" download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION"
      tar xzf "horovod-$HOROVOD_VERSION.tar.gz"
      # The XLA custom-call ops include headers that moved in newer TF; they only serve XLA/GPU.
      sed -i '/xla_mpi_ops.cc/d' "horovod-$HOROVOD_VERSION/horovod/tensorflow/CMakeLists.txt"
      export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1
      export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)"
      [ "$GPU" = 1 ] && export HOROVOD_GPU_OPERATIONS=NCCL
      "$VENV_DIR/bin/pip" wheel --no-build-isolation --no-deps -w "$build_dir/out" \
        "./horovod-$HOROVOD_VERSION" > "$build_dir/build.log" 2>&1 \
        || { tail -40 "$build_dir/build.log" >&2; die "Horovod build failed (log: $build_dir/build.log)"; }
    ) >&2
    mkdir -p "$wheel_dir"
    # Move into place last so an interrupted build never leaves a half wheel in the cache.
    mv "$build_dir"/out/horovod-*.whl "$wheel_dir/"
    rm -rf "$build_dir"
  fi
  ls "$wheel_dir"/horovod-*.whl
}

install_horovod() {
  if "$VENV_DIR/bin/python" -c "import horovod, sys; sys.exit(horovod.__version__ != '$HOROVOD_VERSION')" 2>/dev/null; then
    step "Horovod $HOROVOD_VERSION: already installed"
    return
  fi
  local wheel
  wheel="$(horovod_wheel)"
  step "Horovod: installing $wheel"
  "$VENV_DIR/bin/pip" install -q --no-deps "$wheel"
}

# Earlier versions installed this project into the virtualenv (editable); remove that install,
# whose top-level names (config, tools, replay, ...) other distributions could collide with.
remove_project_install() {
  rm -f "$VENV_DIR/.impala-project.sha256"
  if "$VENV_DIR/bin/pip" show -q impala-horovod 2>/dev/null; then
    step "project: removing its old install from the virtualenv (it runs from the checkout)"
    "$VENV_DIR/bin/pip" uninstall -q -y impala-horovod
  fi
}

install_apt_packages
create_venv_and_install_pins
install_horovod
remove_project_install
step "self-check"
# TensorFlow's and ALE's start-up lines only if it fails: main.sh's console is for the run.
if ! check_output="$("$VENV_DIR/bin/python" "$REPO_DIR/selfcheck.py" 2>&1)"; then
  printf '%s\n' "$check_output" >&2
  exit 1
fi
grep '^self-check passed' <<<"$check_output"
step "done: activate with 'source $VENV_DIR/bin/activate'"
