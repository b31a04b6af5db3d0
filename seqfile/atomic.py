"""Atomic file writes: the one helper every writer of this project uses.

A file is written under a hidden name beside its final one, flushed and renamed over it, so that readers see the
old file or the whole new one; clean-up is safe wherever an interrupt lands (:func:`interrupts_held`)."""

import contextlib
import errno
import functools
import os
import secrets
import shutil
import signal
import threading

#: The signals whose Python handlers :func:`interrupts_held` holds back (where the platform has them).
_HELD_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))
#: Hidden files and folders this process made by path and has neither published nor removed: name -> "file" or
#: "folder" (:func:`discard_unfinished`). A name goes in before it is made, so an interrupt cannot lose it.
_UNFINISHED = {}


@contextlib.contextmanager
def interrupts_held():
    """Run the ``with`` block whole: a SIGINT or SIGTERM that comes meanwhile is delivered when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted, saved = [], []

    def note(signum, frame):
        noted.append(signum)

    try:
        for signum in _HELD_SIGNALS:
            if callable(signal.getsignal(signum)):
                saved.append((signum, signal.signal(signum, note)))
        yield
    finally:
        _restore(saved)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


def _restore(saved):
    """Put back the signal handlers ``saved`` (``[(signum, handler)]``), every one even if a signal comes meanwhile."""
    if saved:
        try:
            signal.signal(*saved[-1])
        finally:
            _restore(saved[:-1])


def discard_unfinished():
    """Remove every hidden file and folder this process made by path and has not published or removed."""
    with interrupts_held():
        for name, what in list(_UNFINISHED.items()):
            try:
                if what == "folder":
                    shutil.rmtree(name, ignore_errors=True)
                else:
                    os.unlink(name)
            except OSError:
                pass
            _UNFINISHED.pop(name, None)


def temp_name(name):
    """A fresh hidden name for a temporary twin of file name ``name``: ``.NAME.xxxxxxxx.tmp`` (8 random hex digits), at most
    40 bytes of ``name`` kept so that a name near the 255-byte limit still has a twin.

    Examples
    --------
    >>> temp_name("part-00000.seq")[:16], temp_name("part-00000.seq")[-4:], len(temp_name("x" * 255))
    ('.part-00000.seq.', '.tmp', 54)
    """
    stem = os.fsdecode(os.fsencode(name)[:40])
    return f".{stem}.{secrets.token_hex(4)}.tmp"


def _split(path, dir_fd=None):
    """``(folder, name)`` of ``path``; with ``dir_fd``, ``path`` is a plain name in that open folder (folder "")."""
    if dir_fd is None:
        return os.path.split(os.path.abspath(os.fspath(path)))
    return "", os.fspath(path)


def temp_dir_beside(path):
    """The path of a new empty hidden folder beside the output ``path`` (mode 0o777 less the umask)."""
    folder, name = _split(path)
    while True:
        tmp = os.path.join(folder, temp_name(name))
        _UNFINISHED[tmp] = "folder"  # before it exists: an interrupt just after mkdir cannot lose it
        try:
            os.mkdir(tmp, 0o777)
            return tmp
        except FileExistsError:
            _UNFINISHED.pop(tmp, None)  # someone else's
            continue
        except BaseException:
            _UNFINISHED.pop(tmp, None)
            with contextlib.suppress(OSError):
                os.rmdir(tmp)  # made just before an interrupt, or not at all
            raise


def aside_name(name):
    """A fresh hidden name for an old file ``name`` set aside: ``.NAME.xxxxxxxx.old``.

    Examples
    --------
    >>> aside_name("out.json")[:10], aside_name("out.json")[-4:]
    ('.out.json.', '.old')
    """
    return temp_name(name)[:-4] + ".old"


def set_aside(path, dir_fd=None):
    """Rename ``path`` to a fresh hidden name beside it (:func:`aside_name`) and return that name; with ``dir_fd``,
    ``path`` is a plain name in that open folder and so is the name returned. Raises ``FileNotFoundError`` if ``path``
    does not exist."""
    folder, name = _split(path, dir_fd)
    while True:
        old = os.path.join(folder, aside_name(name))
        try:
            os.stat(old, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            break
    os.rename(path, old, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return old


def swap_into_place(stage, path):
    """Rename the finished hidden folder ``stage`` (:func:`temp_dir_beside`) to ``path``; return where an old ``path`` was
    set aside, or None if there was none. Raises ``OSError`` if a rename fails (the old output is then back at ``path``)."""
    path = os.fspath(path)
    with interrupts_held():
        old = set_aside(path) if os.path.lexists(path) else None
        try:
            os.rename(stage, path)
        except BaseException:
            if old is not None:
                os.rename(old, path)
            raise
    _sync_folder(os.path.dirname(os.path.abspath(path)))
    return old


def _sync_folder(folder, dir_fd=None):
    if dir_fd is not None:
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _discard(tmp, dir_fd=None):
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _link_no_replace(tmp, path, dir_fd):
    """Give ``tmp`` the name ``path`` unless that exists (FileExistsError); ``tmp`` is gone after."""
    try:
        # A hard link never replaces an existing name (a rename would).
        os.link(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        # A file system without hard links: check, then rename (not atomic against a racing writer).
        try:
            os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
    _discard(tmp, dir_fd)


class NotReplaced(FileExistsError):
    """The old file was not replaced: the ``replace`` function refused it, or a file took the name meanwhile.

    Attributes
    ----------
    kept : str
        Where the old file is now: its own name (put back), or a hidden name beside it when something else took its
        name meanwhile."""

    def __init__(self, path, kept, why):
        super().__init__(errno.EEXIST, why, os.fspath(path))
        self.kept = kept


class AtomicFile:
    """A binary file that appears at ``path`` only when :meth:`commit` succeeds: a context manager that commits on
    success and aborts (the temporary file removed) on any failure.

    Parameters
    ----------
    path : str or os.PathLike
        The final name.
    buffering : int
        Buffer size of :attr:`file`.
    dir_fd : int, optional
        An open folder; ``path`` is then a plain name in it, and nothing is looked up by path (no symbolic link on the
        way is followed).
    replace : bool or callable
        What :meth:`commit` does with an existing ``path``: True replaces it; False never does
        (:class:`FileExistsError`); a function is called with the old file's hidden name once the old file has been
        set aside (a plain name in ``dir_fd`` when given) and returns whether it may go: if so it is removed once the
        new file holds the name, if not it is put back (:class:`NotReplaced`).

    Attributes
    ----------
    file : io.BufferedWriter
        Write the contents here (or close it and write :attr:`tmp` by name).
    tmp : str
        The temporary file's path."""

    def __init__(self, path, buffering=1 << 20, dir_fd=None, replace=True):
        self.path = os.fspath(path)
        self.dir_fd = dir_fd
        self.replace = replace
        self._synced = self._done = False
        self.file = self.tmp = None
        folder, name = _split(self.path, dir_fd)
        # The kernel's descriptor goes straight to the file object (os.open called from C, no Python code in
        # between), its one owner: an interrupt anywhere here can drop the object, never close the number twice.
        opener = functools.partial(os.open, mode=0o666, dir_fd=dir_fd)
        while True:
            tmp = os.path.join(folder, temp_name(name))
            self.tmp = tmp  # known before it exists, so that abort() removes it whenever the interrupt comes
            if dir_fd is None:
                _UNFINISHED[tmp] = "file"
            try:
                # "x": O_CREAT | O_EXCL, which never follows a link at the name, and O_CLOEXEC.
                self.file = open(tmp, "xb", buffering=buffering, opener=opener)
                return
            except FileExistsError:
                self.tmp = None  # someone else's name
                _UNFINISHED.pop(tmp, None)
            except BaseException:
                self.abort()
                raise

    def sync(self):
        """Flush the contents to disk and close the file; :meth:`commit` then only publishes it."""
        if self._synced:
            return
        if not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
        else:  # written by name by another program
            fd = os.open(self.tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=self.dir_fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._synced = True

    def commit(self):
        """Sync and give the file its name as ``replace`` says; removes the temporary file if that fails."""
        if self._done:
            return
        try:
            self.sync()
            # (An interrupt just after the file took its name finds nothing left to remove under self.tmp.)
            if self.replace is True:
                os.replace(self.tmp, self.path, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            elif self.replace is False:
                _link_no_replace(self.tmp, self.path, self.dir_fd)
            else:
                _replace_if(self.tmp, self.path, self.dir_fd, self.replace)
            self._done = True
            _UNFINISHED.pop(self.tmp, None)
        except BaseException:
            self.abort()
            raise
        _sync_folder(os.path.dirname(os.path.abspath(self.path)), self.dir_fd)

    def abort(self):
        """Drop the unfinished file (idempotent, and whole even if interrupted meanwhile)."""
        with interrupts_held():
            if self._done:
                return
            self._done = True
            if self.file is not None:
                try:
                    self.file.close()
                except OSError:
                    pass
            if self.tmp is not None:
                _discard(self.tmp, self.dir_fd)
                _UNFINISHED.pop(self.tmp, None)

    def __enter__(self):
        return self.file

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _replace_if(tmp, path, dir_fd, may_go):
    """Give ``tmp`` the name ``path``; an old ``path`` goes only if ``may_go`` says so once it is set aside."""
    old = None
    try:
        with interrupts_held():
            try:
                old = set_aside(path, dir_fd)
            except FileNotFoundError:
                _link_no_replace(tmp, path, dir_fd)
                return
        if not may_go(old):
            with interrupts_held():
                kept, old = _put_back(old, path, dir_fd), None
            raise NotReplaced(path, kept, "it may not be replaced")
        with interrupts_held():
            try:
                _link_no_replace(tmp, path, dir_fd)
            except FileExistsError:
                kept, old = old, None
                raise NotReplaced(path, kept, "something else took its name meanwhile") from None
            _discard(old, dir_fd)
            old = None
    except BaseException:
        if old is not None:
            with interrupts_held():
                _put_back(old, path, dir_fd)
        raise


def _put_back(old, path, dir_fd):
    """Give the file set aside as ``old`` its name ``path`` again; return where it is (``old`` if the name is taken)."""
    try:
        _link_no_replace(old, path, dir_fd)
    except FileExistsError:
        return old
    return path


def write_bytes(path, data):
    """Write ``data`` to ``path`` atomically, replacing a file there. Raises ``OSError`` if the file cannot be written;
    ``path`` is then untouched.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> write_bytes(os.path.join(folder.name, "a.txt"), b"hi")
    >>> os.listdir(folder.name)
    ['a.txt']
    >>> folder.cleanup()
    """
    with AtomicFile(path) as f:
        f.write(data)
