#!/usr/bin/env bash
# The peers' virtualenv: Sample Factory 2.1.1 with CPU PyTorch, every version pinned
# (bench/peers/sf_requirements.txt), at .venv-peers in the checkout (git-ignored; or
# IMPALA_PEERS_VENV), apart from the project's .venv, whose numpy 2 and gymnasium 1.4 SF's pins
# exclude. Not part of scripts/setup.sh: only bench/peers needs it, and CI's time is precious.
#
# Idempotent, as scripts/setup.sh: the pins' hash is stamped into the virtualenv once installed,
# and a second run with the same pins only checks the install. Then a check that SF, its Atari
# example and the ALE's Pong import, and that torch is the CPU build.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV_DIR="${IMPALA_PEERS_VENV:-$REPO_DIR/.venv-peers}"
REQUIREMENTS="$REPO_DIR/bench/peers/sf_requirements.txt"

step() { echo "[setup_sf $(date +%H:%M:%S)] $*"; }
die() { echo "[setup_sf] ERROR: $*" >&2; exit 1; }

create_venv_and_install_pins() {
  local stamp="$VENV_DIR/.peers-requirements.sha256" want py
  want="$(sha256sum < "$REQUIREMENTS" | cut -d' ' -f1)"
  if [ ! -x "$VENV_DIR/bin/python" ]; then
    py="$(command -v python3.11 || command -v python3)" || die "no python3 found"
    "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
      || die "$py is not Python 3.11 (the pins are of a 3.11 install)"
    step "virtualenv: creating $VENV_DIR"
    "$py" -m venv "$VENV_DIR"
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    step "virtualenv: pinned requirements already installed"
    return
  fi
  step "virtualenv: installing $REQUIREMENTS (torch's CPU build is ~200 MB)"
  "$VENV_DIR/bin/pip" install --progress-bar off -q -r "$REQUIREMENTS"
  echo "$want" > "$stamp"
}

check_install() {
  "$VENV_DIR/bin/python" - <<'EOF'
import importlib.metadata

import ale_py  # noqa: F401 - registers the ALE's ids with gymnasium (ale-py 0.9.0)
import gymnasium
import sf_examples.atari.train_atari  # noqa: F401
import torch

assert importlib.metadata.version("sample-factory") == "2.1.1"
assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
gymnasium.make("PongNoFrameskip-v4").close()
print(f"sample-factory 2.1.1, torch {torch.__version__}, gymnasium {gymnasium.__version__}")
EOF
}

create_venv_and_install_pins
step "check"
check_install
step "done: $VENV_DIR/bin/python bench/peers/sf_train.py (python -m bench.peers runs it)"
