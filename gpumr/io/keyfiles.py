"""Writing records as files named by their keys, inside one folder and nowhere else."""

import errno
import hashlib
import os
import stat

from seqfile.atomic import AtomicFile, NotReplaced

from ..errors import GpumrError, printable
from .outputs import FOLDER_PROOF, Proof, Rule, is_proof, local_output, proof_path, warn
from .remote import kind

#: The most folders a key may name before its file (deeper keys are refused).
MAX_DEPTH = 255

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class KeyRefused(GpumrError):
    """One record's key cannot be written as a file (the message names the key)."""


class KeyFiles:
    """Writes ``(key, bytes)`` records as files under ``directory``.

    Parameters
    ----------
    directory : str
        The folder written into (made if missing). It may itself be a symbolic link (the user named it); nothing
        inside it is followed.
    force : bool
        Replace existing regular files that gpumr wrote (its proof vouches for them), never anything else; without it
        an existing file is a refused key.
    record : bool
        Record the files written in the proof beside ``directory`` (``.NAME.gpumr``) when closing (False inside a
        folder output's stage, whose own proof lists everything in it). A proof that an earlier gpumr kept inside the
        folder (``directory/.gpumr``) still vouches, and moves beside it."""

    def __init__(self, directory, force=False, record=True):
        self.directory = os.fspath(directory)
        self.force = force
        self.record = record
        self._seen = set()
        self._written = {}
        self.directory = local_output(self.directory, "-d")
        os.makedirs(self.directory, exist_ok=True)
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        self._root = os.open(self.directory, flags)
        self._parent, self._legacy = None, None
        beside = proof_path(os.path.abspath(self.directory))
        self._proof_name = os.path.basename(beside)
        try:
            self._proof = None
            if record:
                self._parent = os.open(os.path.dirname(beside), flags)
                self._proof = Proof.load(self._proof_name, self._parent)
                self._legacy = Proof.load(FOLDER_PROOF, self._root)  # (where gpumr 0.1 kept it: inside)
            self._rule = Rule(printable(self.directory), "gpumr unpack", self._proof or self._legacy, False)
        except BaseException:
            self.close()
            raise
        try:
            self._name_max = os.fpathconf(self._root, "PC_NAME_MAX")
        except (OSError, ValueError):
            self._name_max = 255

    def close(self):
        """Record the files written in the proof beside the folder (``.DIR.gpumr``); close the folders' descriptors."""
        if self._root is None:
            return
        try:
            if self.record and (self._written or self._legacy is not None):
                self._record()
        finally:
            for fd in (self._root, self._parent):
                if fd is not None:
                    os.close(fd)
            self._root = self._parent = None

    def _record(self):
        name = self._proof_name
        try:
            proof = Proof.load(name, self._parent)
            if proof is None:  # (an earlier gpumr's proof inside the folder: its listing moves beside it)
                proof = Proof(name, "gpumr unpack", self._legacy.versions if self._legacy else [{}], self._parent)
            proof.record(self._written)
            if self._legacy is not None and is_proof(FOLDER_PROOF, self._root):
                os.unlink(FOLDER_PROOF, dir_fd=self._root)
        except (OSError, GpumrError) as exc:
            warn(f"could not record the files written in {printable(self.directory)} as gpumr's "
                 f"({name}: {getattr(exc, 'strerror', None) or exc}); --force will not replace them")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _refuse(self, key, why):
        return KeyRefused(f"refusing key '{printable(key)}': {why}")

    def check(self, key):
        """The key's names (folders, then the file's), or :class:`KeyRefused` saying what is wrong."""
        if not isinstance(key, str):
            raise self._refuse(key if isinstance(key, bytes) else repr(key), "keys must be Text (UTF-8 file names)")
        if not key:
            raise self._refuse(key, "it is empty")
        if "\0" in key:
            raise self._refuse(key, "it holds a NUL byte, which no file name may hold")
        if key.startswith("/"):
            raise self._refuse(key, f"it is absolute; keys are paths inside {printable(self.directory)}")
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise self._refuse(key, f"it has an empty, '.' or '..' part, or climbs out of {printable(self.directory)}")
        if self.record and key == FOLDER_PROOF:
            raise self._refuse(key, f"{FOLDER_PROOF} in {printable(self.directory)} is gpumr's record of the files "
                                    "it wrote there")
        if len(parts) - 1 > MAX_DEPTH:
            raise self._refuse(key, f"it is {len(parts) - 1} folders deep; the limit is {MAX_DEPTH}")
        for p in parts:
            if len(os.fsencode(p)) > self._name_max:
                raise self._refuse(key, f"the name {printable(p[:40])}... is {len(os.fsencode(p))} bytes long; "
                                        f"the file system allows {self._name_max}")
        return parts

    def write(self, key, data):
        """Write ``data`` to ``directory/key`` atomically; :class:`KeyRefused` if the key is refused."""
        parts = self.check(key)
        if key in self._seen:
            raise self._refuse(key, "a duplicate: an earlier record has this key (the first one was kept)")
        fd = self._root
        try:
            for i, name in enumerate(parts[:-1]):
                child = self._enter(fd, name, key, parts[:i + 1])
                if fd != self._root:
                    os.close(fd)
                fd = child
            self._write_file(fd, parts[-1], data, key)
        finally:
            if fd != self._root:
                os.close(fd)
        self._seen.add(key)

    def _enter(self, parent, name, key, where):
        """Open folder ``name`` in ``parent`` (made if missing), never through a link."""
        try:
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                pass
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    try:
                        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                    except OSError:
                        mode = 0
                    what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
                    raise self._refuse(key, f"'{printable('/'.join(where))}' in {printable(self.directory)} is {what} "
                                            "(unpack never writes through links, nor makes a file and a folder "
                                            "of one name)") from None
                raise self._refuse(key, f"cannot open folder '{printable('/'.join(where))}': {exc.strerror}") from None
        except OSError as exc:
            raise self._refuse(key, f"cannot make folder '{printable('/'.join(where))}': {exc.strerror}") from None

    def _write_file(self, folder, name, data, key):
        try:
            existing = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            existing = None
        except OSError as exc:
            raise self._refuse(key, f"cannot look at the existing file: {exc.strerror}") from None
        if existing is not None:
            if not stat.S_ISREG(existing):
                raise self._refuse(key, f"it exists in {printable(self.directory)} as "
                                        f"{kind(existing)}; unpack replaces only regular files")
            if not self.force:
                raise self._refuse(key, f"it exists in {printable(self.directory)} "
                                        "(use --force to replace files that gpumr wrote)")
            if not self._ours(key, name, folder):
                raise self._refuse(key, f"it exists in {printable(self.directory)} and gpumr did not write it "
                                        f"(or it changed since: {FOLDER_PROOF} does not vouch for it); not replaced")
        try:
            replace = (lambda old: self._ours(key, old, folder)) if self.force else False
            with AtomicFile(name, dir_fd=folder, replace=replace) as f:
                f.write(data)
        except NotReplaced:
            raise self._refuse(key, f"it changed in {printable(self.directory)} meanwhile; not replaced") from None
        except FileExistsError:
            raise self._refuse(key, f"it appeared in {printable(self.directory)} meanwhile; "
                                    "not replaced") from None
        except IsADirectoryError:
            raise self._refuse(key, f"it is a folder in {printable(self.directory)}") from None
        except OSError as exc:
            raise self._refuse(key, f"cannot write it: {exc.strerror}") from None
        self._written[key] = [len(data), hashlib.sha256(data).hexdigest()]

    def _ours(self, key, name, folder):
        """Whether file ``name`` in open folder ``folder`` holds what the proof says gpumr wrote at ``key``
        (the output rule's test, :meth:`gpumr.io.outputs.Rule.vouched`)."""
        return self._rule.vouched(key, name, dir_fd=folder)


__all__ = ["KeyFiles", "KeyRefused", "MAX_DEPTH"]
