"""The only package that imports asyncssh: connect, channels, host keys, SFTP, error mapping.

Everything asyncssh raises is turned into a :mod:`remote_bash.errors` error in one place
(:mod:`.mapping`), naming the host. Nothing here retries anything that could run a command
twice.

- :mod:`.hostkeys`: known_hosts pins and the client that checks a host's key against them
- :mod:`.connection`: connect through jump hosts, credentials, exec channels, side commands
- :mod:`.channel`: the long-lived shell channel the session runs bash on, and input channels
- :mod:`.sftp`: file operations over SFTP
- :mod:`.mapping`: asyncssh/socket errors -> remote_bash errors
- :mod:`.fallback`: a tiny exec-only server for sandboxes on machines without sshd
"""

from .channel import InputChannel, ShellChannel
from .connection import Credentials, SshConnection, connect
from .hostkeys import default_known_hosts
from .sftp import FileInfo, SftpFiles

__all__ = [
    "Credentials", "FileInfo", "InputChannel", "SftpFiles", "ShellChannel", "SshConnection", "connect",
    "default_known_hosts",
]
