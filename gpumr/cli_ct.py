"""Command-line registration for the ct commands."""


def register(sub):
    """Add the ct subcommands to the ``gpumr`` parser."""
