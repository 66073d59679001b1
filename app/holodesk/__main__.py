"""``python -m holodesk`` runs the ``holodesk`` command."""

from holodesk.cli import main

raise SystemExit(main())
