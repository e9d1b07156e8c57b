#!/bin/sh
# Container entrypoint: gather the login user's public keys ($AUTHORIZED_KEYS, a file mounted at
# /run/authorized_keys), make this container's host key, then run sshd in the foreground with a
# clean environment. Arguments (the container's command) are passed on to sshd.
set -eu
user="${RB_USER:-agent}"
home="$(awk -F: -v u="$user" '$1 == u { print $6 }' /etc/passwd)"
if [ -z "$home" ]; then
    echo "entrypoint: no user $user in this image" >&2
    exit 1
fi
mkdir -p "$home/.ssh"
keys="$home/.ssh/authorized_keys"
{
    if [ -n "${AUTHORIZED_KEYS:-}" ]; then printf '%s\n' "$AUTHORIZED_KEYS"; fi
    if [ -s /run/authorized_keys ]; then cat /run/authorized_keys; fi
} | grep -v '^[[:space:]]*$' > "$keys" || true
if [ ! -s "$keys" ]; then
    echo "entrypoint: no public key for $user: set AUTHORIZED_KEYS or mount a file at /run/authorized_keys" >&2
    exit 1
fi
chown -R "$user" "$home/.ssh"
chmod 0700 "$home/.ssh"
chmod 0600 "$keys"
key=/etc/ssh/ssh_host_ed25519_key
if [ ! -s "$key" ]; then ssh-keygen -q -t ed25519 -N '' -C "$(hostname)" -f "$key"; fi
mkdir -p /run/sshd
sshd="$(command -v sshd || echo /usr/sbin/sshd)"
# Nothing of the container's environment (the keys above, whatever the engine set) reaches sshd
# or the shells it starts.
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    "$sshd" -D -e -o "HostKey=$key" -o "AllowUsers=$user" -o "AuthorizedKeysFile=.ssh/authorized_keys" "$@"
