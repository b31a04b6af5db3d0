"""numba's builds of gpumr's CPU kernels, kept in gpumr's trusted kernel cache and keyed by the source."""

import hashlib
import os

from .. import trusted


def folder():
    """The path of the folder numba's builds of gpumr's kernels are kept in: ``numba-UID`` in the kernel cache. Raises
    ``gpumr.trusted.Untrusted`` if the rule refuses it (a link, another user's, writable by others).

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
