# GENERATED from src/fencelock/_async/__init__.py by tools/gen_sync.py: edit that file instead.
"""The asyncio implementation: the one source the sync twin in ``_sync/`` is generated from."""
