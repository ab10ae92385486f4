"""Campaigns are due at a time (due_at): the sweep selects the running campaigns that are due,
not the oldest running ones, so campaigns whose schedule window is closed hide no others.

Campaigns kept from before are due at once (their last change); the first sweep that finds a
window closed sets its next opening.
"""

from datetime import datetime

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    # Added as NULL, filled with the default, then NOT NULL; then each row's own time.
    migrator.add_fields("campaign", due_at=pw.DateTimeField(default=datetime(2026, 1, 1)))
    migrator.sql("UPDATE campaign SET due_at = updated_at")
    migrator.drop_index("campaign", "status", "created_at")
    migrator.add_index("campaign", "status", "due_at")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("campaign", "status", "due_at")
    migrator.add_index("campaign", "status", "created_at")
    migrator.remove_fields("campaign", "due_at")
