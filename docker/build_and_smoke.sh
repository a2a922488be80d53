#!/usr/bin/env bash
# Builds docker/Dockerfile and smoke-tests the image on a machine without a Docker engine (root):
#
#   bash docker/build_and_smoke.sh        # image: IMPALA_IMAGE, default localhost/impala-horovod
#
# 1. Installs podman and debootstrap with apt-get if they are missing.
# 2. Makes the base image debian:bookworm-slim offline from Debian packages (debootstrap
#    minbase, set up like the official slim image), cached as a tarball in
#    IMPALA_CACHE_DIR/debootstrap/, and imports it unless podman already has that image.
# 3. `podman build --isolation=chroot` (RUN steps need no OCI runtime), with this host's Horovod
#    wheel cache and a pip cache mounted so that the image reuses them, and this host's CA bundle
#    for pip (PIP_CERT). The same Dockerfile builds unchanged with plain `docker build`.
# 4. Mounts the image read-only and runs docker/smoke_test.sh chrooted in it, with the image's
#    environment and working directory and with /proc, /sys, /dev and a /tmp as a container
#    has them. Everything is unmounted at exit, even on failure.
#
# Success: exit status 0; "build OK: IMAGE in N s, SIZE MB" after the build, "smoke OK: ..." last.
# One build at a time: a lock in IMPALA_CACHE_DIR makes a second invocation wait.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${IMPALA_CACHE_DIR:-/var/cache/impala-horovod}"
IMAGE="${IMPALA_IMAGE:-localhost/impala-horovod:latest}"
SUITE=bookworm
BASE_IMAGE="docker.io/library/debian:$SUITE-slim"
MIRROR=http://deb.debian.org/debian
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
# The official image's PATH and CMD; an imported tarball has no configuration of its own.
BASE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

step() { echo "[build_and_smoke $(date +%H:%M:%S)] $*"; }
die() {
  echo "[build_and_smoke] ERROR: $*" >&2
  exit 1
}

# Undone in reverse order at exit: mount points to unmount, then temporary directories.
MOUNTS=()
TEMP_DIRS=()
IMAGE_MOUNTED=0
cleanup() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount -R "${MOUNTS[i]}" 2>/dev/null || umount -R -l "${MOUNTS[i]}" \
      || echo "[build_and_smoke] could not unmount ${MOUNTS[i]}" >&2
  done
  if [ "$IMAGE_MOUNTED" = 1 ]; then
    podman image unmount "$IMAGE" >/dev/null \
      || echo "[build_and_smoke] could not unmount $IMAGE" >&2
  fi
  for dir in "${TEMP_DIRS[@]}"; do
    rm -rf --one-file-system "$dir"
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if [ ${#missing[@]} -eq 0 ]; then
    return
  fi
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The rootfs of debian:SUITE-slim: minbase, the official image's APT sources (with security
# updates) and its dpkg filter that keeps documentation, man pages and locales out.
make_base_tarball() {
  local tarball="$1" rootfs
  rootfs="$(mktemp -d)"
  TEMP_DIRS+=("$rootfs")
  step "debootstrap --variant=minbase $SUITE (about 30 s)"
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" > "$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
  rm -f "$rootfs.log" "$rootfs/etc/apt/sources.list" "$rootfs/etc/hostname" \
    "$rootfs/etc/resolv.conf"
  cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $MIRROR-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat > "$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  mkdir -p "$(dirname "$tarball")"
  # Moved into place last so that an interrupted run never leaves a partial tarball.
  tar -C "$rootfs" --numeric-owner -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
}

import_base_image() {
  if podman image exists "$BASE_IMAGE"; then
    step "base image $BASE_IMAGE: present"
    return
  fi
  local tarball="$CACHE_DIR/debootstrap/$SUITE-minbase.tar"
  if [ -f "$tarball" ]; then
    step "base image: reusing $tarball"
  else
    make_base_tarball "$tarball"
  fi
  step "importing $tarball as $BASE_IMAGE"
  podman import --change "ENV PATH=$BASE_PATH" --change 'CMD ["bash"]' \
    "$tarball" "$BASE_IMAGE" >/dev/null
}

build_image() {
  local args=(
    --isolation=chroot --file "$REPO_DIR/docker/Dockerfile" --tag "$IMAGE"
    --volume "$CACHE_DIR:/var/cache/impala-horovod"
    --volume "$CACHE_DIR/pip:/root/.cache/pip"
  )
  # pip inside the build trusts this host's chain (a network may re-sign TLS); the bundle is
  # mounted where no package writes (over /etc/ssl/certs/ it would break dpkg).
  if [ -f "$HOST_CA_BUNDLE" ]; then
    args+=(--volume "$HOST_CA_BUNDLE:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
  fi
  mkdir -p "$CACHE_DIR/pip"
  step "podman build ${args[*]} $REPO_DIR"
  podman build "${args[@]}" "$REPO_DIR"
}

# `docker run IMAGE bash docker/smoke_test.sh`, without a container runtime.
smoke_test() {
  local root workdir env_lines
  root="$(podman image mount "$IMAGE")"
  IMAGE_MOUNTED=1
  mount -t proc proc "$root/proc"
  MOUNTS+=("$root/proc")
  mount --rbind --make-rslave /sys "$root/sys"
  MOUNTS+=("$root/sys")
  mount --rbind --make-rslave /dev "$root/dev"
  MOUNTS+=("$root/dev")
  # The image is mounted read-only; a container's writes (logs, MPI's session files) go to /tmp.
  mount -t tmpfs tmpfs "$root/tmp"
  MOUNTS+=("$root/tmp")
  workdir="$(podman image inspect --format '{{.Config.WorkingDir}}' "$IMAGE")"
  mapfile -t env_lines < <(
    podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | sed '/^$/d'
  )
  chroot "$root" /usr/bin/env -i --chdir="$workdir" HOME=/root "${env_lines[@]}" \
    bash docker/smoke_test.sh
}

[ "$(id -u)" -eq 0 ] || die "run as root (apt-get, debootstrap, podman storage, chroot)"
mkdir -p "$CACHE_DIR"
exec 9> "$CACHE_DIR/build_and_smoke.lock"
flock 9 || die "could not lock $CACHE_DIR/build_and_smoke.lock"

install_tools
import_base_image
build_start=$SECONDS
build_image
build_secs=$((SECONDS - build_start))
size="$(podman image inspect --format '{{.Size}}' "$IMAGE")"
step "build OK: $IMAGE in ${build_secs} s, $((size / 1000000)) MB"
smoke_start=$SECONDS
smoke_test
step "smoke OK: docker/smoke_test.sh passed in the image in $((SECONDS - smoke_start)) s"
