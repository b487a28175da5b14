#!/usr/bin/env bash
# Everything the test suite needs on a machine of this kind, installed once: idempotent, and
# quick when it is all there (a few `command -v`). tests/run.sh calls it before the tests;
# so does .ci/run. Needs root (apt-get) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."

# debootstrap builds the runtime image (argus image build, run by the tests when absent).
# The multi-host fixture (tests/fixtures/multihost.sh) needs ip (iproute2); unshare, nsenter,
# flock and mountpoint (util-linux); Debian's docker-registry; sshd and ssh (openssh); openssl
# (the certificates of its TLS engines).
# The Slurm fixture on top of it (tests/fixtures/slurm.sh): Debian's slurm-wlm (Slurm 22.05:
# slurmctld, slurmd, sbatch/srun/scontrol/...) and munge (munged, mungekey).
apt_needs=()
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || apt_needs+=(debootstrap)
command -v ip >/dev/null 2>&1 || apt_needs+=(iproute2)
# A firewall rule inside an emulated host's namespace (tests/it/doctor_net.rs).
command -v iptables >/dev/null 2>&1 || apt_needs+=(iptables)
for tool in unshare nsenter flock mountpoint; do
    command -v "$tool" >/dev/null 2>&1 || { apt_needs+=(util-linux); break; }
done
command -v docker-registry >/dev/null 2>&1 || apt_needs+=(docker-registry)
[ -x /usr/sbin/sshd ] || apt_needs+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 && [ -x /usr/bin/ssh ] || apt_needs+=(openssh-client)
command -v openssl >/dev/null 2>&1 || apt_needs+=(openssl)
for tool in slurmctld slurmd sbatch; do
    command -v "$tool" >/dev/null 2>&1 || { apt_needs+=(slurm-wlm); break; }
done
command -v munged >/dev/null 2>&1 && command -v mungekey >/dev/null 2>&1 || apt_needs+=(munge)
# A Slurm node whose engine is Podman (tests/it/podman.rs): Debian's podman and catatonit.
command -v podman >/dev/null 2>&1 || apt_needs+=(podman)
[ -x /usr/libexec/podman/catatonit ] || command -v catatonit >/dev/null 2>&1 || apt_needs+=(catatonit)
if [ ${#apt_needs[@]} -gt 0 ]; then
    echo "tests/setup.sh: installing Debian packages: ${apt_needs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${apt_needs[@]}" >/dev/null
fi
command -v cargo-nextest >/dev/null 2>&1 || cargo install cargo-nextest --locked
# The olah mirror and the Python readers (pyarrow, datasets, huggingface_hub, transformers).
tests/venvs.sh all
# A Docker Engine of 25 or later beside the system's (Debian 12's 20.10), whose `docker save`
# writes an OCI image layout (tests/it/image_distribution.rs): the dockerd of Debian 13's
# docker.io, downloaded from Debian's archive (signatures checked against the system's keyring)
# and unpacked under /var/cache/argus-test, not installed (the system's engine stays as it is).
NEWER_DOCKERD=/var/cache/argus-test/docker.io-trixie/usr/sbin/dockerd
if ! "$NEWER_DOCKERD" --version >/dev/null 2>&1; then
    echo "tests/setup.sh: fetching Debian 13's docker.io (a newer dockerd, unpacked)" >&2
    # Beside its place (one file system, so the move below is a rename), gone on any exit.
    mkdir -p /var/cache/argus-test
    apt_dir=$(mktemp -d /var/cache/argus-test/.docker.io-XXXXXX)
    trap 'rm -rf "$apt_dir"' EXIT
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main' \
        >"$apt_dir/sources.list"
    apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
    apt-get "${apt_opts[@]}" update -qq
    (cd "$apt_dir" && apt-get "${apt_opts[@]}" download -qq docker.io)
    # Unpacked there and moved whole: an interrupted run leaves nothing half.
    dpkg-deb -x "$apt_dir"/docker.io_*.deb "$apt_dir/unpacked"
    "$apt_dir/unpacked/usr/sbin/dockerd" --version >/dev/null
    rm -rf /var/cache/argus-test/docker.io-trixie
    mv "$apt_dir/unpacked" /var/cache/argus-test/docker.io-trixie
    rm -rf "$apt_dir"
fi
