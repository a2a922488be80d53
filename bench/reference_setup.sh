#!/usr/bin/env bash
# The reference agent's own virtualenv (bench/reference_ppo.py): PyTorch, kept out of the
# project's .venv, with the project's pins of the environment stack so that both run the very
# same environments. Idempotent. Usage: bash bench/reference_setup.sh [VENV_DIR]
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="${1:-/tmp/impala_reference_venv}"
TORCH_VERSION=2.13.0
pin() { grep -E "^$1==" "$REPO_DIR/requirements.txt"; }
if [ ! -x "$VENV_DIR/bin/python" ]; then
  echo "[reference] creating $VENV_DIR"
  python3 -m venv "$VENV_DIR"
fi
echo "[reference] installing torch $TORCH_VERSION (CPU) and the project's environment pins"
"$VENV_DIR/bin/pip" install -q "torch==$TORCH_VERSION" "$(pin numpy)" "$(pin gymnasium)" \
  "$(pin ale-py)" "$(pin opencv-python-headless)"
"$VENV_DIR/bin/python" -c "import torch, ale_py; print('[reference] ready: torch', torch.__version__)"
