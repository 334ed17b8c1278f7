"""The asyncio implementation: the one source the sync twin in ``_sync/`` is generated from."""
