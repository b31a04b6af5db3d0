"""Byte sizes as people write them on a command line."""

import re

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4,
          "tb": 1000**4, "tib": 1024**4}


def parse_size(text):
    """Bytes of a positive size as people write it: ``"256MB"``, ``"1GiB"``, ``"64k"`` or ``"1000"`` (a fraction rounded
    down). Raises ``ValueError`` if the text is not a positive size.

    Examples
    --------
    >>> parse_size("256MB"), parse_size("1GiB"), parse_size("1.5k")
    (256000000, 1073741824, 1500)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (try 256MB, 1GiB, 64k)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return value


def human(n):
    """A byte count for people, in decimal units (B, KB, MB, GB, TB), one decimal above bytes.

    Examples
    --------
    >>> human(78123), human(12)
    ('78.1 KB', '12 B')
    """
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def size_arg(text):
    """``argparse`` type for sizes: :func:`parse_size`, whose refusal becomes argparse's usage error
    (``argparse.ArgumentTypeError``).

    Examples
    --------
    >>> size_arg("64k")
    64000
    """
    import argparse
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
