"""``python -m fencelock``: the same as the ``fencelock`` command."""

# Guarded: multiprocessing's spawn re-imports the main module in every child it starts.
if __name__ == "__main__":
    from .cli import main

    raise SystemExit(main())
