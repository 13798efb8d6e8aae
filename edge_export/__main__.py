"""``python -m edge_export`` is the ``edge-export`` command (for an interpreter whose scripts folder is not on PATH)."""

from .cli import main

if __name__ == "__main__":  # importing the module (a walk of the package) runs nothing
    main()
