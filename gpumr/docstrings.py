"""Parameter text shared by several docstrings, written once and formatted in (as dask-jobqueue does).

Examples
--------
>>> SCAN = "geometry : Geometry\\n    The scan's geometry."
>>> @shared(scan=SCAN)
... def f(geometry):
...     '''The detector of ``geometry``.
...
...     Parameters
...     ----------
...     {scan}'''
>>> print(f.__doc__.splitlines()[-1])
        The scan's geometry.
"""

import re


def shared(**texts):
    """A decorator that puts ``texts[NAME]`` where a line of the docstring is only ``{NAME}``, indented as that line.

    Only named fields on a line of their own are replaced (a docstring's other braces are its own text); a field with
    no text is an error at import, not a hole in the documentation. Without docstrings (``python -OO``) it does
    nothing.
    """
    def fill(match):
        indent, name = match.groups()
        if name not in texts:
            raise KeyError(f"no shared docstring text named {name!r}")
        return "\n".join(indent + line if line else line for line in texts[name].splitlines())

    def decorate(obj):
        if obj.__doc__:
            obj.__doc__ = re.sub(r"^([ \t]*)\{(\w+)\}[ \t]*$", fill, obj.__doc__, flags=re.M)
        return obj
    return decorate
