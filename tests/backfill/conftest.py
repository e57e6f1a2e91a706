"""The dispatcher's fixtures (a small cluster on both databases, the local cycle rig)."""

from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401
from tests.dispatcher.conftest import local_rig  # noqa: F401
