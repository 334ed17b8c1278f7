# GENERATED from tests/primitives/_async/__init__.py by tools/gen_sync.py: edit that file instead.
