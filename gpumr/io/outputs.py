"""Every output gpumr writes, under one rule and through this one helper.

The rule:

1. An output appears complete or not at all. A file is written under a
   hidden name beside its destination (``.NAME.xxxxxxxx.tmp``), a folder of
   parts in a hidden folder there, and then renamed into place
   (:mod:`seqfile.atomic`); on an error or Ctrl-C the hidden work is removed.
2. gpumr replaces or deletes only what carries proof that gpumr made it;
   never the current folder or a folder holding it, never an input or a
   folder holding one, never a symbolic link.
3. An old output is set aside under a hidden name before the new one takes
   its name and is checked against its proof there, so that nothing written
   meanwhile is lost: a file goes only if its content is still what gpumr
   wrote (else it is put back, and the new output is not written); a folder
   loses only the files its proof vouches for, and whatever else is in it
   (a user's file dropped in, or a part changed, while gpumr worked) is kept
   where it was set aside and named in a warning.

Proof of authorship. Beside an output ``NAME`` lies ``.NAME.gpumr``, a small
JSON file: the command that made the output and the size and SHA-256 of
each file in it (for a file output, of the file itself); files written one
by one into a folder the user named (``gpumr unpack -d DIR``) are listed in
``DIR/.gpumr``, beside them. An output is
gpumr's while its proof vouches for everything it holds: a folder holding a
file that is not listed, or a listed file whose content changed, is not.
A SequenceFile that ``gpumr pack`` wrote carries its proof in its own header
instead (metadata ``gpumr.pack``), and a folder of such ``part-NNNNN.seq``
files needs no proof file. The proof lives beside the output, not inside it,
so an output holds exactly its parts (a script that lists a folder of frames
or parts sees only those) and Hadoop, Spark and shell globs pass it over
(a hidden name). Before a replacement the proof vouches for both the old and
the new content, so that an interrupt at any moment leaves an output its
proof vouches for; a proof that is lost or stale only ever makes gpumr refuse.

Only local paths are handled here: a URI is refused with one line (commands
that take URIs stage them through :mod:`gpumr.io.remote`). The public
surface (:func:`check_output`, :class:`FileOutput`, :class:`FolderOutput`)
takes paths as strings, so a URI backend can later serve the same calls.
"""

import hashlib
import json
import os
import re
import shutil
import stat
import sys

from seqfile import Reader, SequenceFileError
from seqfile.atomic import AtomicFile, NotReplaced, swap_into_place, temp_dir_beside

from .. import __version__
from ..errors import GpumrError, printable
from .inputs import READ_FLAGS, kind

#: The SequenceFile header metadata key that proves ``gpumr pack`` wrote a file (its value: gpumr's version).
SEQFILE_MARK = "gpumr.pack"
#: The names of the shards in a folder written by ``gpumr pack``.
PACK_PART = re.compile(r"part-[0-9]{5}\.seq\Z")
#: The proof of the files written one by one into a folder the user named (``gpumr unpack -d DIR``) lies in it.
FOLDER_PROOF = ".gpumr"
#: The largest proof file read (about two million files listed); a larger one is not gpumr's.
MAX_PROOF = 256 * 1024 * 1024

_CHUNK = 1 << 20


def warn(message):
    """Say ``message`` on stderr as a gpumr warning (an output kept, a proof not recorded)."""
    print(f"gpumr: warning: {message}", file=sys.stderr, flush=True)


# -- proof ------------------------------------------------------------------------------------------
def proof_path(path):
    """Where the proof of output ``path`` lies: ``.NAME.gpumr`` beside it (a shortened, hashed name for long names)."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    raw = os.fsencode(name)
    if len(raw) > 200:
        name = os.fsdecode(raw[:40]) + "." + hashlib.sha256(raw).hexdigest()[:16]
    return os.path.join(folder, f".{name}.gpumr")


def digest(path, dir_fd=None):
    """``(size, SHA-256 hex)`` of regular file ``path``, read without following a link; None if it is not one."""
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        h = hashlib.sha256()
        size = 0
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
        return size, h.hexdigest()


def marked_sequencefile(path):
    """Whether ``path`` is a SequenceFile whose header says ``gpumr pack`` wrote it (:data:`SEQFILE_MARK`)."""
    try:
        with Reader(path) as reader:
            return SEQFILE_MARK in reader.header.metadata
    except (OSError, SequenceFileError):
        return False


class Proof:
    """The proof beside an output: the command that made it and what it held.

    Parameters
    ----------
    path : str
        The proof file's own path (:func:`proof_path` of the output).
    output : str
        The command that made the output, e.g. ``"gpumr spark"``.
    versions : list of dict
        Listings ``{relative path: [size, sha256]}`` (``""`` for a file
        output itself), newest first: during a replacement, the new one and
        the old one.
    """

    def __init__(self, path, output, versions=(), dir_fd=None):
        self.path = path
        self.output = output
        self.versions = [dict(v) for v in versions]
        self.dir_fd = dir_fd

    @classmethod
    def load(cls, path, dir_fd=None):
        """The proof at ``path`` (in open folder ``dir_fd``), None if there is none; GpumrError if not a proof."""
        try:
            fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            try:
                link = stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                link = False
            raise _not_a_proof(path, "a symbolic link" if link else exc.strerror) from None
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_a_proof(path, kind(st.st_mode))
            if st.st_size > MAX_PROOF:
                raise _not_a_proof(path, f"{st.st_size} bytes, more than a proof's {MAX_PROOF}")
            data = f.read(MAX_PROOF + 1)
        try:
            doc = json.loads(data)
            output, versions = doc["output"], doc["versions"]
            ok = (isinstance(doc.get("gpumr"), str) and isinstance(output, str) and isinstance(versions, list)
                  and all(isinstance(v, dict) and all(isinstance(k, str) and isinstance(e, list) and len(e) == 2
                                                      and isinstance(e[0], int) and isinstance(e[1], str)
                                                      for k, e in v.items()) for v in versions))
        except (ValueError, TypeError, KeyError):
            ok = False
        if not ok:
            raise _not_a_proof(path, "not the JSON gpumr writes")
        return cls(path, output, versions, dir_fd)

    def save(self):
        """Write the proof atomically (replacing only an earlier gpumr proof)."""
        doc = {"gpumr": __version__, "output": self.output,
               "versions": [{k: list(e) for k, e in v.items()} for v in self.versions]}
        data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        if len(data) > MAX_PROOF:
            raise GpumrError(f"{printable(self.path)}: the proof would take {len(data)} bytes, more than a proof's "
                             f"{MAX_PROOF}: too many files in one output")
        try:
            with AtomicFile(self.path, dir_fd=self.dir_fd, replace=lambda old: is_proof(old, self.dir_fd)) as f:
                f.write(data)
        except NotReplaced:
            raise _not_a_proof(self.path, "a file that appeared meanwhile") from None

    def folders(self):
        """The folders that the listed files lie in (relative paths)."""
        return {rel.rsplit("/", i)[0] for v in self.versions for rel in v for i in range(1, rel.count("/") + 1)}

    def sizes(self, rel):
        """The sizes a file at ``rel`` had in the listed versions."""
        return {v[rel][0] for v in self.versions if rel in v}

    def vouches(self, rel, found):
        """Whether ``found`` (a :func:`digest`, or None) is what gpumr wrote at ``rel``."""
        return found is not None and any(tuple(v.get(rel, ())) == tuple(found) for v in self.versions)


def is_proof(path, dir_fd=None):
    """Whether ``path`` (in open folder ``dir_fd``) is a gpumr proof file, which gpumr may replace."""
    try:
        return Proof.load(path, dir_fd) is not None
    except GpumrError:
        return False


def _not_a_proof(path, why):
    return GpumrError(f"{printable(path)}: {why}, not a gpumr proof file; gpumr writes an output beside its proof "
                      "and leaves this alone: move it away, or choose another output name")


# -- the checks -------------------------------------------------------------------------------------
def check_local(path, option):
    """Refuse a URI where only a local output can be written (one line naming the option)."""
    from .remote import is_remote
    if is_remote(os.fspath(path)):
        raise GpumrError(f"{option} {path}: a URI; this output is written to a local path only")


def _not_home(path, inputs):
    """Refuse ``path`` if it is the current folder or holds it, or is or holds one of ``inputs``."""
    shown = printable(path)
    real = os.path.realpath(path)
    inside = real.rstrip(os.sep) + os.sep
    here = os.path.realpath(os.getcwd())
    if here == real or here.startswith(inside):
        raise GpumrError(f"{shown}: is the current folder or holds it; gpumr never replaces it")
    for src in inputs:
        src_real = os.path.realpath(src)
        if src_real == real or src_real.startswith(inside):
            raise GpumrError(f"{shown}: is or holds the input {printable(src)}; gpumr never replaces the inputs")


def _walk(top):
    """``(relative path, stat)`` of every entry below folder ``top``, a folder before its contents; no link followed."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(top, rel) if rel else top) as it:
            entries = sorted(it, key=lambda e: e.name)
        folders = []
        for e in entries:
            sub = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            yield sub, st
            if stat.S_ISDIR(st.st_mode):
                folders.append(sub)
        stack.extend(reversed(folders))


def check_output(path, output, *, folder, replace=True, inputs=(), option="-o", pack_parts=False):
    """Refuse ``path`` as the destination of a new output unless it is free or an earlier gpumr output.

    A cheap check, made before any work starts: sizes, not contents, are
    compared with the proof (the contents are checked when the old output
    is set aside, see the module's rule).

    Parameters
    ----------
    path : str
    output : str
        The command writing it (``"gpumr spark"``); an existing folder is
        replaced only if that command made it.
    folder : bool
        Whether the output is a folder (else a file).
    replace : bool
        False: any existing ``path`` is refused (a command whose ``--force`` was not given).
    inputs : list of str
        The command's inputs: never replaced, nor a folder holding one.
    option : str
        The option naming ``path``, for messages.
    pack_parts : bool
        Also accept a folder of ``part-NNNNN.seq`` files whose headers say ``gpumr pack`` wrote them.

    Raises
    ------
    GpumrError
        One line naming ``path`` and saying why it is not replaced.
    """
    check_local(path, option)
    shown = printable(path)
    proof = Proof.load(proof_path(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not replace:
        raise GpumrError(f"{shown}: already exists (use --force to replace it)")
    _not_home(path, inputs)
    if stat.S_ISLNK(st.st_mode):
        raise GpumrError(f"{shown}: is a symbolic link, not a file or folder that gpumr made; gpumr never "
                         "replaces links")
    if not folder:
        if not stat.S_ISREG(st.st_mode):
            raise GpumrError(f"{shown}: is {kind(st.st_mode)}, not a file that gpumr made; it is not replaced")
        if (proof is not None and st.st_size in proof.sizes("")) or marked_sequencefile(path):
            return
        raise GpumrError(f"{shown}: exists and gpumr did not make it (no proof beside it, "
                         f"{os.path.basename(proof_path(path))}); choose another name or remove it yourself")
    if not stat.S_ISDIR(st.st_mode):
        raise GpumrError(f"{shown}: is {kind(st.st_mode)}, not a folder that gpumr made; it is not replaced")
    folders = proof.folders() if proof is not None else set()
    for rel, est in _walk(path):
        if proof is not None and proof.output != output:
            raise GpumrError(f"{shown}: an output of {proof.output}, not of {output}; choose another folder")
        if proof is not None and (rel in folders if stat.S_ISDIR(est.st_mode) else
                                  stat.S_ISREG(est.st_mode) and est.st_size in proof.sizes(rel)):
            continue
        if pack_parts and PACK_PART.match(rel) and stat.S_ISREG(est.st_mode):
            if marked_sequencefile(os.path.join(path, rel)):
                continue
            raise GpumrError(f"{shown}: {printable(rel)} was not written by gpumr pack (its header has no "
                             f"{SEQFILE_MARK} entry); gpumr replaces only its own output: remove it yourself or "
                             "choose another folder")
        why = f"which changed since {output} wrote it" if proof is not None and proof.sizes(rel) else \
            f"which {output} did not make"
        raise GpumrError(f"{shown}: holds {printable(rel)}, {why}; gpumr replaces only its own {output} "
                         "output: remove it yourself or choose another folder")


# -- writing ----------------------------------------------------------------------------------------
class FileOutput:
    """One output file: checked now, written under a hidden name, given its name under the rule.

    Parameters
    ----------
    path : str
        The destination.
    made_by : str
        The command writing it (recorded in the proof).
    inputs, replace, option
        As :func:`check_output`.
    proves_itself : bool
        The content carries its own proof (a SequenceFile with :data:`SEQFILE_MARK`): no proof file.

    Attributes
    ----------
    file : io.BufferedWriter
        Set by :meth:`begin`: write the contents here, or close it and have a
        program write :attr:`tmp` by name.
    tmp : str

    Nothing is made until :meth:`begin`, so the check comes first and costs
    nothing to drop. Use it as a context manager (yields :attr:`file`;
    commits on success), or pass ``begin()``'s result to
    :class:`seqfile.Writer` (``out=``), which commits or aborts it.
    """

    def __init__(self, path, made_by="gpumr", *, inputs=(), replace=True, option="-o", proves_itself=False):
        self.path = os.fspath(path)
        self.made_by = made_by
        self.proves_itself = proves_itself
        self.replace = replace
        self._old_proof = self._atomic = self.file = self.tmp = None
        check_output(self.path, made_by, folder=False, replace=replace, inputs=inputs, option=option)

    def begin(self):
        """Make the hidden temporary file beside the destination; return ``self``."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._atomic = AtomicFile(self.path, replace=self._may_go if self.replace else False)
        self.file, self.tmp = self._atomic.file, self._atomic.tmp
        return self

    def _may_go(self, old):
        """Whether the old file, set aside as ``old``, is still what gpumr wrote."""
        proof = self._old_proof
        return (proof is not None and proof.vouches("", digest(old))) or marked_sequencefile(old)

    def commit(self):
        """Give the finished file its name (see the module's rule); GpumrError if the old one may not go."""
        proof = None
        try:
            self._atomic.sync()
            self._old_proof = Proof.load(proof_path(self.path))
            if not self.proves_itself:
                proof = Proof(proof_path(self.path), self.made_by, [{"": digest(self.tmp)}])
                if self._old_proof is not None:
                    proof.versions += self._old_proof.versions
                proof.save()  # vouches for the old and the new content until the new one holds the name
                proof.versions = proof.versions[:1]
            self._atomic.commit()
        except FileExistsError as exc:
            kept = getattr(exc, "kept", self.path)
            where = "" if kept == self.path else f"; the old file is kept as {printable(kept)}"
            raise GpumrError(f"{printable(self.path)}: not replaced: it appeared, or changed, while gpumr was "
                             f"writing it, and gpumr did not make what is there now{where}; the new output was "
                             "dropped") from None
        except BaseException:
            self._atomic.abort()
            raise
        if proof is not None:
            proof.save()

    def abort(self):
        """Drop the unfinished file."""
        if self._atomic is not None:
            self._atomic.abort()

    def __enter__(self):
        return self.begin().file

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def write_file(path, data, made_by="gpumr", **checks):
    """Write ``data`` as the output file ``path`` (:class:`FileOutput`, ``checks`` as there)."""
    with FileOutput(path, made_by, **checks) as f:
        f.write(data)


class FolderOutput:
    """One output folder of parts: checked now, filled in a hidden folder beside it, swapped in whole.

    Parameters
    ----------
    path : str
        The destination folder.
    output : str
        The command writing it (``"gpumr spark"``); an existing folder is
        replaced only if that command made it (and its proof vouches for it).
    inputs, replace, option, pack_parts
        As :func:`check_output`. With ``pack_parts`` the parts prove
        themselves (their headers) and no proof file is written.
    make_stage : bool
        Make :attr:`stage` (False for a writer that insists on making it, like Spark's).
    log : callable
        Receives the warning when something of the old folder is kept.

    Attributes
    ----------
    stage : str
        Where to write the parts (inside a hidden folder beside ``path``), set by :meth:`begin`.
    kept : str or None
        After :meth:`commit`: where the rest of the old folder was kept, if anything was left in it.

    Use it as a context manager: ``with FolderOutput(...) as stage:``.
    """

    def __init__(self, path, output, *, inputs=(), replace=True, option="-o", pack_parts=False, make_stage=True,
                 log=warn):
        self.path = os.fspath(path)
        self.output = output
        self.pack_parts = pack_parts
        self.make_stage = make_stage
        self.log = log
        self.stage = self._holder = self.kept = None
        check_output(self.path, output, folder=True, replace=replace, inputs=inputs, option=option,
                     pack_parts=pack_parts)

    def begin(self):
        """Make the hidden folder beside the destination; return :attr:`stage`."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._holder = temp_dir_beside(self.path)
        self.stage = os.path.join(self._holder, os.path.basename(os.path.abspath(self.path)))
        if self.make_stage:
            os.mkdir(self.stage)
        return self.stage

    def commit(self):
        """Swap the finished stage in; remove of the old folder only what its proof vouches for."""
        ppath = proof_path(self.path)
        old_proof = Proof.load(ppath)
        proof = None
        if not self.pack_parts:
            listing = {rel: digest(os.path.join(self.stage, rel)) for rel, st in _walk(self.stage)
                       if stat.S_ISREG(st.st_mode)}
            proof = Proof(ppath, self.output, [listing])
            if old_proof is not None and old_proof.output == self.output:
                proof.versions += old_proof.versions
            proof.save()  # vouches for the old and the new folder until the new one holds the name
            proof.versions = proof.versions[:1]
        old = swap_into_place(self.stage, self.path)
        os.rmdir(self._holder)
        self._holder = None
        if old is not None:
            self.kept = _remove_old(old, old_proof, self.pack_parts)
        if proof is not None:
            proof.save()
        elif old_proof is not None:  # a stale proof beside parts that prove themselves: gpumr's, and wrong now
            os.unlink(ppath)
        if self.kept:
            self.log(f"{printable(self.path)}: the old output was set aside as {printable(self.kept)}, not "
                     "removed: it holds files gpumr did not make, or that changed since gpumr wrote them")
        return self.kept

    def abort(self):
        """Remove the hidden folder and what was written in it."""
        if self._holder is not None:
            shutil.rmtree(self._holder, ignore_errors=True)
            self._holder = None

    def __enter__(self):
        return self.begin()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self.commit()
            finally:
                self.abort()
        else:
            self.abort()


def _remove_old(old, proof, pack_parts):
    """Remove, from an old output folder set aside as ``old``, what its proof vouches for.

    Returns ``old`` if anything else is left in it (it is then kept), else None.
    """
    if os.path.islink(old) or not os.path.isdir(old):
        return old  # not the folder that was checked: nothing in it is touched
    folders = proof.folders() if proof is not None else set()
    entries = list(_walk(old))
    for rel, st in entries:
        path = os.path.join(old, rel)
        if stat.S_ISREG(st.st_mode) and ((proof is not None and proof.vouches(rel, digest(path)))
                                         or (pack_parts and PACK_PART.match(rel) and marked_sequencefile(path))):
            os.unlink(path)
    for rel, st in reversed(entries):  # what a folder holds before the folder
        if stat.S_ISDIR(st.st_mode) and rel in folders:
            try:
                os.rmdir(os.path.join(old, rel))
            except OSError:
                pass  # something else is left in it
    try:
        os.rmdir(old)
    except OSError:
        return old
    return None


__all__ = ["check_output", "check_local", "FileOutput", "FolderOutput", "Proof", "write_file", "digest",
           "proof_path", "is_proof", "marked_sequencefile", "SEQFILE_MARK", "PACK_PART", "FOLDER_PROOF", "warn"]
