"""numba's builds of gpumr's CPU kernels, kept in gpumr's trusted kernel cache and keyed by the source.

numba's own ``cache=True`` keeps a build beside the source (or in a folder
named after the source's path), and finds it again only at that path: a task
that runs gpumr from a fresh copy (an unpacked bundle, a new virtual
environment) compiles again (seconds per task process). :func:`cached` gives
one ``@njit`` function a cache that lives in :func:`folder`, a folder of the
kernel cache (:func:`gpumr.gpu.kernels.cache_dir`, which :mod:`gpumr.trusted`
checks: yours, no link, nobody else may write in it), and that is keyed by
the SHA-256 of the source file's content, not by its path or time: any copy
of the same gpumr finds the build. numba's index holds the compiled code as a
pickle, so only a folder the rule trusts is ever used.
"""

import hashlib
import os

from .. import trusted


def folder():
    """The folder numba's builds of gpumr's kernels are kept in: ``numba-UID`` in the kernel cache.

    Made (mode 0700) if missing and checked under :mod:`gpumr.trusted`'s rule;
    one of this user's own even where the kernel cache is a shared folder.

    Returns
    -------
    str
        The folder's path.

    Raises
    ------
    gpumr.trusted.Untrusted
        If the rule refuses it (a link, another user's, writable by others).

    Examples
    --------
    >>> os.path.basename(folder()).startswith("numba-")
    True
    """
    from ..gpu.kernels import cache_dir
    return trusted.ensure_folder(os.path.join(cache_dir(), f"numba-{os.geteuid()}"), "numba's builds of gpumr")


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cached(dispatcher):
    """``dispatcher`` (an ``@njit`` function) with its builds cached in :func:`folder`, keyed by its source.

    Where the folder cannot be used (the rule refuses it; one warning says
    why) or numba's caching classes are not as expected, the function is
    returned as it is: compiled in each process, never failing for it.

    Parameters
    ----------
    dispatcher : numba.core.registry.CPUDispatcher
        A function made by ``numba.njit`` (without ``cache=True``).

    Returns
    -------
    numba.core.registry.CPUDispatcher
        The same function; its ``stats.cache_hits`` count the builds loaded from the cache.

    Examples
    --------
    >>> from numba import njit
    >>> @cached
    ... @njit
    ... def twice(x):
    ...     return 2 * x
    >>> twice(3)
    6
    """
    try:
        from numba.core import caching
    except ImportError:  # another numba: no cache rather than no kernel
        return dispatcher

    class Locator(caching._CacheLocator):
        """Builds in :func:`folder`, in a subfolder named by the source's content."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._stamp = _digest(py_file)
            name = os.path.splitext(os.path.basename(py_file))[0]
            self._path = os.path.join(folder(), f"{name}-{self._stamp[:16]}")

        def ensure_cache_path(self):
            trusted.ensure_folder(self._path, "numba's builds of gpumr")
            super().ensure_cache_path()

        def get_cache_path(self):
            return self._path

        def get_source_stamp(self):
            return self._stamp

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            try:
                locator = cls(py_func, py_file)
                locator.ensure_cache_path()
            except (OSError, trusted.Untrusted) as exc:
                trusted.warn_once(f"numba's builds of gpumr are not cached ({exc}): each process compiles them")
                return None
            return locator

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = [Locator]

    class Cache(caching.FunctionCache):
        _impl_class = Impl

    try:
        dispatcher._cache = Cache(dispatcher.py_func)
    except (RuntimeError, AttributeError, TypeError):  # no locator (said above), or another numba's classes
        pass
    return dispatcher
