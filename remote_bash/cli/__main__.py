"""``python -m remote_bash.cli``: the same as the ``remote-bash`` command."""

import sys

from remote_bash.cli import main

sys.exit(main())
