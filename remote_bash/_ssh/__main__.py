"""``python -m remote_bash._ssh ADDRESS PORT HOST_KEY AUTHORIZED_KEYS``: the fallback sandbox server."""

import asyncio
import contextlib
import sys

from .fallback import serve_fallback

addr, port_text, key_path, auth_path = sys.argv[1:5]
with contextlib.suppress(KeyboardInterrupt):
    asyncio.run(serve_fallback(addr, int(port_text), key_path, auth_path))
