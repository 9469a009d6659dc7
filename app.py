"""Root entry point (SPEC §5, contract).

    import app
    server = app.make_server(host="127.0.0.1", port=0)   # bound on return
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ...
    server.shutdown()

`app.app` is the ASGI application on the configured database (PAYCORE_DATABASE_URL, else
./paycore.db). The embedded default is migrated on first use.

Both set up paycore's JSON logs on standard error (PAYCORE_LOG_FORMAT, PAYCORE_LOG_LEVEL) only
if the root logger has no handler yet: an application that configured its own logging keeps it.
"""

from __future__ import annotations

import sys
from pathlib import Path

_SRC = Path(__file__).resolve().parent / "src"
if _SRC.is_dir() and str(_SRC) not in sys.path:
    sys.path.insert(0, str(_SRC))  # a fresh clone works before `pip install -e .` too

from paycore.config import Settings  # noqa: E402
from paycore.db import migrate  # noqa: E402
from paycore.db.engine import Database  # noqa: E402
from paycore.http.app import create_app  # noqa: E402
from paycore.http.server import Server, check_app_keyring  # noqa: E402
from paycore.kit import logs  # noqa: E402

__all__ = ["make_server"]  # and `app`, built lazily by __getattr__


def _build() -> object:
    settings = Settings.from_env()
    logs.configure_unless_configured(settings.log_format, settings.log_level)
    database = Database(settings)
    migrate.upgrade(database)
    app = create_app(settings, database)
    check_app_keyring(app)  # no app without its key outside local mode (ADR 0017), as make_server
    return app


def make_server(host: str = "127.0.0.1", port: int = 8000) -> Server:
    """A server bound to (host, port) serving the whole /v1 API; port 0 picks a free port.
    Raises `paycore.http.exposure.UnsafeBind`, before binding, for an address it must not
    serve in this state (local mode or the public webhook secret off loopback), and
    `paycore.keyring.SecretsKeyRefused` outside local mode without PAYCORE_SECRETS_KEY.
    The server owns its database: `shutdown()` (or `server_close()`) closes its connections
    and stops its writer thread once the last request is answered."""
    settings = Settings.from_env()
    logs.configure_unless_configured(settings.log_format, settings.log_level)
    database = Database(settings)
    try:
        migrate.upgrade(database)
        return Server(create_app(settings, database), host, port, owned=[database.dispose])
    except BaseException:
        database.dispose()  # a refused start leaves no pooled connection behind
        raise


def __getattr__(name: str) -> object:
    # `app.app` is built on first access, so importing this module has no side effects.
    if name == "app":
        globals()["app"] = _build()
        return globals()["app"]
    raise AttributeError(name)
