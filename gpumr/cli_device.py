"""Command-line registration for the device commands."""


def register(sub):
    """Add the device subcommands to the ``gpumr`` parser."""
