"""Command-line registration for the faces commands."""


def register(sub):
    """Add the faces subcommands to the ``gpumr`` parser."""
