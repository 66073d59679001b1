"""Screen capture backends: list monitors, grab one monitor into a Frame."""
