# GENERATED from src/fencelock/compat/_async/__init__.py by tools/gen_sync.py: edit that file instead.
