#!/bin/sh
# Build step of the Dockerfile: put sshd, bash and procps into the image (when missing), create
# the login user, install the shared sshd settings. Usage: setup.sh USER "EXTRA PACKAGES"
set -eu
user="$1"
extra="${2:-}"
here=/usr/local/lib/remote-bash

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

if ! have sshd || ! have bash || ! have ps || [ -n "$extra" ]; then
    if have apt-get; then
        apt-get update
        # shellcheck disable=SC2086 # the package list is meant to split into words
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-server bash procps $extra
        rm -rf /var/lib/apt/lists/*
    elif have apk; then
        # shellcheck disable=SC2086
        apk add --no-cache openssh-server bash procps $extra
    elif have dnf; then
        # shellcheck disable=SC2086
        dnf install -y openssh-server bash procps-ng $extra && dnf clean all
    elif have microdnf; then
        # shellcheck disable=SC2086
        microdnf install -y openssh-server bash procps-ng $extra && microdnf clean all
    else
        echo "setup.sh: this image has no sshd and no package manager (apt-get, apk, dnf) to install it" >&2
        exit 1
    fi
fi

bash_path="$(command -v bash)"
if have useradd; then
    useradd --create-home --shell "$bash_path" "$user"
else
    adduser -D -s "$bash_path" "$user"
fi
# '*' matches no password but leaves the account usable: sshd (UsePAM no) refuses key logins to an
# account locked with '!'.
if have usermod; then usermod --password '*' "$user"; else sed -i "s/^$user:!*:/$user:*:/" /etc/shadow; fi

mkdir -p /etc/ssh /run/sshd
cp "$here/sshd_config" /etc/ssh/sshd_config
# Host keys are made when a container starts, so no two containers of this image share one.
rm -f /etc/ssh/ssh_host_*
chmod 0755 "$here/entrypoint.sh"
