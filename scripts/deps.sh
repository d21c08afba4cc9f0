#!/usr/bin/env bash
# Install the Debian packages that building and testing sharp need.
# As root: installs what is missing with apt-get.  Otherwise: prints the
# exact command to run and fails.
set -euo pipefail

PKGS=(
    gcc make pkg-config        # toolchain
    libev-dev                  # event loop of every daemon
    libjansson-dev             # control-plane message encoding (JSON)
    libinih-dev                # configuration files (INI)
    libcmocka-dev              # unit tests
    libmpfr-dev libgmp-dev     # exact-mode tests: an independent exact reference
    uthash-dev                 # hash tables (header-only)
    clang-format               # make format-check
    clang libclang-rt-14-dev llvm-14  # make fuzz: libFuzzer, sanitizers, symbolizer
    libsodium-dev              # cluster-secret authentication (HMAC)
    libssl-dev                 # libcrypto: the Poly1305 of large multicast results
    libibverbs-dev librdmacm-dev ibverbs-providers  # the verbs transport (rxe)
    qemu-system-x86 busybox-static kmod  # its tests: a soft-RoCE qemu guest
    libopensm-dev libibumad-dev  # the AM's OpenSM plugin (its headers need umad.h)
    opensm infiniband-diags ibsim-utils  # simulated fabrics in the tests
    openmpi-bin libopenmpi-dev # libsharp_mpi for Open MPI, make demo
    mpich libmpich-dev         # libsharp_mpi for MPICH
    python3-mpi4py python3-numpy  # a Python MPI program (MPI_THREAD_MULTIPLE)
    libevent-dev               # libsharp_mpi_ompi links libevent first
    jq graphviz                # the sharpctl test: --json checks, --png
    groff-base man-db          # the man page test: groff -ww, man -w
    iproute2 nftables          # sharp-fabric --netns: namespaces, loss
    libmicrohttpd-dev          # sharp_am's Prometheus metrics endpoint
    libsqlite3-dev             # sharp_am's state database (reservations, ids)
    prometheus curl            # its test: a real Prometheus scrapes a fabric
    libslurm-dev               # the Slurm SPANK plugin (<slurm/spank.h>)
    slurmctld slurmd slurm-client munge  # its test: real Slurm daemons
    petsc-dev libpetsc3.18-dev-examples  # tests/apps: PETSc and its tutorials
    lammps lammps-examples     # tests/apps: LAMMPS and examples/melt
)

# `deps.sh deb` (make deb): also what builds and checks the Debian packages
if [ "${1:-}" = deb ] || [ "${1:-}" = cluster ]; then
    PKGS+=(dpkg-dev debhelper fakeroot lintian)
fi
# `deps.sh cluster` (make check-cluster): a root for the containers
# (mmdebstrap, from the Debian mirror), systemd-nspawn, nsenter
if [ "${1:-}" = cluster ]; then
    PKGS+=(mmdebstrap systemd-container util-linux)
fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing packages: ${missing[*]}" >&2
    echo "deps: run as root: apt-get update && $cmd" >&2
    exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
