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

Outputs at URIs (:class:`UriOutput`: ``s3://``, ``hdfs://``, ``file://``)
keep the same rule through the filesystem layer (:mod:`gpumr.io.remote`;
the layer does the filesystem operations, this module decides). The proof
of a URI output ``.../NAME`` is the object ``.../.NAME.gpumr`` beside it;
the parts are written under the hidden prefix ``.NAME.<hex>.tmp/`` beside
it (Hadoop's and Spark's readers pass it over), then published:

* where the filesystem renames (HDFS, ``file://``): exactly as for a local
  folder: the old output set aside as ``.NAME.<hex>.old``, the stage renamed
  in, the old one's vouched files removed, anything else kept there.
* on S3, which has no rename: each part copied to its name (a copy makes an
  object appear whole, replacing an old one at once). Before the first copy,
  objects of the old output that the proof does not vouch for (put there,
  or changed, while gpumr worked) are moved under ``.NAME.<hex>.old/`` and
  named in a warning; markers (``_SUCCESS``) of the old output are removed
  first and the new ones published last, after the old output's other
  parts are gone, so a reader that waits for ``_SUCCESS`` never takes a
  mixture. The proof is written last when the output is new, and updated
  first (vouching for both versions) when it replaces one.

The interrupt windows on S3 (an error or Ctrl-C): before the first copy or delete at
``NAME``, the old output stays whole (less what was moved aside, which is
kept); once one was made, the clean-up removes every part published so far
and every part of the old output, so that nothing of either is visible
(S3 cannot put the old one back without a second copy of it); after the
last copy, the output is complete. A ``kill -9`` can leave the hidden
stage; mid-publish, over an earlier output, a mixture that the proof
vouches for (a later run may replace it), and as a new output, parts
without a proof (refused). Where
pyarrow cannot serve a URI (the ``hadoop fs`` fallback) only a new
destination is written, and only outputs that prove themselves (gpumr
pack's), uploaded under the hidden name and renamed by ``hadoop fs -mv``.
"""

import hashlib
import json
import os
import posixpath
import re
import shutil
import stat

from seqfile import Reader, SequenceFileError
from seqfile.atomic import (AtomicFile, NotReplaced, aside_name, interrupts_held, swap_into_place, temp_dir_beside,
                            temp_name)

from .. import __version__
from ..boundary import logger
from ..errors import GpumrError, printable
from ..sizes import human
from . import remote
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
    """Say ``message`` as a gpumr warning (an output kept, a proof not recorded): :mod:`gpumr.boundary`'s logger."""
    logger(__name__).warning("%s", message)


# -- proof ------------------------------------------------------------------------------------------
def _proof_name(name):
    """The proof's name beside an output named ``name``: ``.NAME.gpumr`` (a shortened, hashed name for long names)."""
    raw = os.fsencode(name)
    if len(raw) > 200:
        name = os.fsdecode(raw[:40]) + "." + hashlib.sha256(raw).hexdigest()[:16]
    return f".{name}.gpumr"


def proof_path(path):
    """Where the proof of output ``path`` (a path or URI) lies: ``.NAME.gpumr`` beside it."""
    if remote.is_remote(path):
        head, _, name = path.rstrip("/").rpartition("/")
        return f"{head}/{_proof_name(name)}"
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(folder, _proof_name(name))


def _hash(f):
    """``(size, SHA-256 hex)`` of what is left to read in binary file ``f``."""
    h = hashlib.sha256()
    size = 0
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return size, h.hexdigest()
        h.update(chunk)
        size += len(chunk)


def digest(path, dir_fd=None):
    """``(size, SHA-256 hex)`` of regular file ``path``, read without following a link; None if it is not one.

    ``path`` may be a URI (read through :mod:`gpumr.io.remote`; None if no file is there).
    """
    if remote.is_remote(path):
        try:
            with remote.open_input(path) as f:
                return _hash(f)
        except GpumrError:
            return None
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _hash(f)


def marked_sequencefile(path):
    """Whether ``path`` is a SequenceFile whose header says ``gpumr pack`` wrote it (:data:`SEQFILE_MARK`).

    ``path`` may be a URI: its header is read through :mod:`gpumr.io.remote` (the first bytes only).
    """
    try:
        if remote.is_remote(path):
            return SEQFILE_MARK in remote.read_header(path).metadata
        with Reader(path) as reader:
            return SEQFILE_MARK in reader.header.metadata
    except (OSError, SequenceFileError, GpumrError):
        return False


class Proof:
    """The proof beside an output: the command that made it and what it held.

    Parameters
    ----------
    path : str
        The proof file's own path or URI (:func:`proof_path` of the output).
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
        data = _read_proof(path, dir_fd)
        if data is None:
            return None
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
        if remote.is_remote(self.path):
            if remote.exists(self.path) and not is_proof(self.path):
                raise _not_a_proof(self.path, "a file that appeared meanwhile")
            remote.write_bytes(self.path, data)
            return
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


def _read_proof(path, dir_fd=None):
    """The bytes of the proof file at ``path`` (a path in ``dir_fd``, or a URI), None if nothing is there."""
    if remote.is_remote(path):
        what, size = remote.stat(path)
        if what is None:
            return None
        if what != "file":
            raise _not_a_proof(path, "a folder")
        if size > MAX_PROOF:
            raise _not_a_proof(path, f"{size} bytes, more than a proof's {MAX_PROOF}")
        with remote.open_input(path) as f:
            return f.read(size)  # (a read of n bytes sets n aside first: never the cap)
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
        return f.read(st.st_size)  # (a read of n bytes sets n aside first: never the cap)


def is_proof(path, dir_fd=None):
    """Whether ``path`` (in open folder ``dir_fd``) is a gpumr proof file, which gpumr may replace."""
    try:
        return Proof.load(path, dir_fd) is not None
    except GpumrError:
        return False


def _not_a_proof(path, why):
    return GpumrError(f"{printable(path)}: {why}, not a gpumr proof file; gpumr writes an output beside its proof "
                      "and leaves this alone: move it away, or choose another output name")


# -- the rule -------------------------------------------------------------------------------------
class _Rule:
    """The rule's decisions about an existing output, the same for local paths and URIs.

    Parameters
    ----------
    shown : str
        The output, for messages.
    output : str
        The command writing the new output.
    proof : Proof or None
        The proof beside the existing output.
    pack_parts : bool
        ``part-NNNNN.seq`` files whose headers say ``gpumr pack`` wrote them are gpumr's without a proof.
    """

    def __init__(self, shown, output, proof, pack_parts):
        self.shown = shown
        self.output = output
        self.proof = proof
        self.pack_parts = pack_parts
        self.folders = proof.folders() if proof is not None else set()

    def check_file(self, size, path, proof_name):
        """Refuse an existing file output (``size`` bytes, at ``path``) unless its proof or its header proves it."""
        if (self.proof is not None and size in self.proof.sizes("")) or marked_sequencefile(path):
            return
        raise GpumrError(f"{self.shown}: exists and gpumr did not make it (no proof beside it, {proof_name}); choose "
                         "another name or remove it yourself")

    def check_entry(self, rel, what, size, path):
        """Refuse unless entry ``rel`` of an existing output folder (at ``path``) is gpumr's by its size or its header.

        ``what`` is "file", "folder", or what else the entry is, in words.
        """
        proof, output = self.proof, self.output
        if proof is not None and proof.output != output:
            raise GpumrError(f"{self.shown}: an output of {proof.output}, not of {output}; choose another folder")
        if proof is not None and (rel in self.folders if what == "folder" else
                                  what == "file" and size in proof.sizes(rel)):
            return
        if self.pack_parts and PACK_PART.match(rel) and what == "file":
            if marked_sequencefile(path):
                return
            raise GpumrError(f"{self.shown}: {printable(rel)} was not written by gpumr pack (its header has no "
                             f"{SEQFILE_MARK} entry); gpumr replaces only its own output: remove it yourself or "
                             "choose another folder")
        why = f"which changed since {output} wrote it" if proof is not None and proof.sizes(rel) else \
            f"which {output} did not make"
        raise GpumrError(f"{self.shown}: holds {printable(rel)}, {why}; gpumr replaces only its own {output} "
                         "output: remove it yourself or choose another folder")

    def vouched(self, rel, path):
        """Whether the file at ``path`` (``rel`` in the output; ``""`` for a file output) is still what gpumr wrote."""
        if self.proof is not None and self.proof.vouches(rel, digest(path)):
            return True
        return (rel == "" or (self.pack_parts and PACK_PART.match(rel) is not None)) and marked_sequencefile(path)

    def sweep(self, old, entries, join, remove_file, remove_folder):
        """Remove from an old output folder set aside as ``old`` what this rule vouches for.

        ``entries`` are ``(relative path, what, size)`` below ``old``, a folder
        before what it holds; ``remove_folder(path)`` removes an empty folder
        and returns False where the folder is not empty. Returns ``old`` if
        anything else is left in it (it is then kept), else None.
        """
        for rel, what, _ in entries:
            if what == "file" and self.vouched(rel, join(old, rel)):
                remove_file(join(old, rel))
        for rel, what, _ in reversed(entries):  # what a folder holds before the folder
            if what == "folder" and rel in self.folders:
                remove_folder(join(old, rel))
        return None if remove_folder(old) else old


def _kept_warning(shown, kept):
    return (f"{shown}: the old output was set aside as {printable(kept)}, not removed: it holds files gpumr did not "
            "make, or that changed since gpumr wrote them")


# -- the checks -------------------------------------------------------------------------------------
def check_local(path, option):
    """Refuse a URI where only a local output can be written (one line naming the option)."""
    if remote.is_remote(os.fspath(path)):
        raise GpumrError(f"{option} {path}: a URI; this output is written to a local path only")


def _place(path):
    """Where ``path`` (a path or URI) points, comparably: a real local path (for ``file://`` too), else the URI."""
    local = remote.local_path(path) if remote.is_remote(path) else path
    if local is not None:
        return os.path.realpath(local)
    scheme, rest = path.split("://", 1)
    scheme = "s3" if scheme.lower() in remote.S3_SCHEMES else scheme.lower()
    return f"{scheme}://{rest.rstrip('/')}"


def _not_home(path, inputs):
    """Refuse ``path`` if it is the current folder or holds it, or is or holds one of ``inputs`` (paths or URIs)."""
    shown = printable(path)
    real = _place(path)
    inside = real.rstrip("/") + "/"
    here = os.path.realpath(os.getcwd())
    if here == real or here.startswith(inside):
        raise GpumrError(f"{shown}: is the current folder or holds it; gpumr never replaces it")
    for src in inputs:
        src_real = _place(src)
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


def _entries(top):
    """``(relative path, what, size)`` below local folder ``top`` (see :meth:`_Rule.sweep`)."""
    return [(rel, "file" if stat.S_ISREG(st.st_mode) else "folder" if stat.S_ISDIR(st.st_mode) else kind(st.st_mode),
             st.st_size) for rel, st in _walk(top)]


def _bare(path):
    """``path`` without trailing separators: the entry itself (``out/`` names what a link ``out`` points to)."""
    path = os.fspath(path)
    return path.rstrip(os.sep) or path


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
    path = _bare(path)
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
    rule = _Rule(shown, output, proof, pack_parts)
    if not folder:
        if not stat.S_ISREG(st.st_mode):
            raise GpumrError(f"{shown}: is {kind(st.st_mode)}, not a file that gpumr made; it is not replaced")
        rule.check_file(st.st_size, path, os.path.basename(proof_path(path)))
        return
    if not stat.S_ISDIR(st.st_mode):
        raise GpumrError(f"{shown}: is {kind(st.st_mode)}, not a folder that gpumr made; it is not replaced")
    for rel, what, size in _entries(path):
        rule.check_entry(rel, what, size, os.path.join(path, rel))


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
        self.path = _bare(path)
        self.made_by = made_by
        self.proves_itself = proves_itself
        self.replace = replace
        self._old_proof = self._atomic = self.file = self.tmp = None
        check_output(self.path, made_by, folder=False, replace=replace, inputs=inputs, option=option)

    def begin(self):
        """Make the hidden temporary file beside the destination; return ``self``."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        try:
            with interrupts_held():  # made and recorded together (abort() then finds it)
                self._atomic = AtomicFile(self.path, replace=self._may_go if self.replace else False)
                self.file, self.tmp = self._atomic.file, self._atomic.tmp
        except BaseException:
            self.abort()  # (``with`` calls no __exit__ when __enter__ fails)
            raise
        return self

    def _may_go(self, old):
        """Whether the old file, set aside as ``old``, is still what gpumr wrote."""
        return _Rule(printable(self.path), self.made_by, self._old_proof, False).vouched("", old)

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
            raise _changed_meanwhile(self.path, where) from None
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


def _changed_meanwhile(path, where=""):
    return GpumrError(f"{printable(path)}: not replaced: it appeared, or changed, while gpumr was writing it, and "
                      f"gpumr did not make what is there now{where}; the new output was dropped")


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

    def __init__(self, path, output, *, inputs=(), replace=True, option="-o", pack_parts=False, log=warn):
        self.path = _bare(path)
        self.output = output
        self.pack_parts = pack_parts
        self.log = log
        self.stage = self._holder = self.kept = None
        check_output(self.path, output, folder=True, replace=replace, inputs=inputs, option=option,
                     pack_parts=pack_parts)

    def begin(self):
        """Make the hidden folder beside the destination; return :attr:`stage`."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        try:
            with interrupts_held():  # made and recorded together (abort() then finds it)
                self._holder = temp_dir_beside(self.path)
            self.stage = os.path.join(self._holder, os.path.basename(os.path.abspath(self.path)))
            os.mkdir(self.stage)
        except BaseException:
            self.abort()  # (``with`` calls no __exit__ when __enter__ fails)
            raise
        return self.stage

    def commit(self, parts=None):
        """Swap the finished stage in; remove of the old folder only what its proof vouches for.

        The hidden folder is gone after, whatever happened (an error or
        Ctrl-C before the swap removes it with what was written in it).

        Parameters
        ----------
        parts : dict, optional
            ``{name: (staged name, size, sha256)}``: publish only these files
            of the stage, under these names (a Spark job's parts, one task
            attempt each); the rest of the stage goes. The proof lists the
            sizes and hashes the tasks took as they wrote (as
            :meth:`UriOutput.commit` does); without ``parts`` it is made from
            the files themselves.
        """
        try:
            if parts is not None:
                _pick(self.stage, parts)
            ppath = proof_path(self.path)
            old_proof = Proof.load(ppath)
            proof = None
            if not self.pack_parts:
                if parts is not None:
                    listing = {rel: [size, sha] for rel, (_, size, sha) in parts.items()}
                else:
                    listing = {rel: digest(os.path.join(self.stage, rel)) for rel, st in _walk(self.stage)
                               if stat.S_ISREG(st.st_mode)}
                proof = Proof(ppath, self.output, [listing])
                if old_proof is not None and old_proof.output == self.output:
                    proof.versions += old_proof.versions
                proof.save()  # vouches for the old and the new folder until the new one holds the name
                proof.versions = proof.versions[:1]
            with interrupts_held():  # swapped in and the old folder cleaned up whole: Ctrl-C comes after
                old = swap_into_place(self.stage, self.path)
                os.rmdir(self._holder)
                self._holder = None
                if old is not None:
                    self.kept = _remove_old(old, _Rule(printable(self.path), self.output, old_proof, self.pack_parts))
                if proof is not None:
                    proof.save()
                elif old_proof is not None:  # a stale proof beside parts that prove themselves: gpumr's, wrong now
                    os.unlink(ppath)
        finally:
            self.abort()
        if self.kept:
            self.log(_kept_warning(printable(self.path), self.kept))
        return self.kept

    def abort(self):
        """Remove the hidden folder and what was written in it (whole, even if interrupted meanwhile)."""
        with interrupts_held():
            if self._holder is not None:
                shutil.rmtree(self._holder, ignore_errors=True)
                self._holder = None

    def __enter__(self):
        return self.begin()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _pick(stage, parts):
    """Give the chosen files of local folder ``stage`` their names (``parts``: see :meth:`FolderOutput.commit`)."""
    for rel, (staged, _, _) in parts.items():
        if staged != rel:
            os.rename(os.path.join(stage, staged), os.path.join(stage, rel))
    for rel, st in list(_walk(stage)):
        if not stat.S_ISDIR(st.st_mode) and rel not in parts:
            os.unlink(os.path.join(stage, rel))


def _remove_old(old, rule):
    """Remove, from an old output folder set aside as ``old``, what ``rule`` vouches for (:meth:`_Rule.sweep`)."""
    if os.path.islink(old) or not os.path.isdir(old):
        return old  # not the folder that was checked: nothing in it is touched

    def remove_folder(path):
        try:
            os.rmdir(path)
        except OSError:
            return False  # something else is left in it
        return True
    return rule.sweep(old, _entries(old), os.path.join, os.unlink, remove_folder)


# -- outputs at URIs --------------------------------------------------------------------------------
def _under(uri, rel):
    """``rel`` under ``uri``; ``uri`` itself for ``""`` (a file output)."""
    return f"{uri}/{rel}" if rel else uri


def _beside(uri, name):
    """The URI of ``name`` in the folder holding ``uri``."""
    return f"{uri.rpartition('/')[0]}/{name}"


def _parent(uri):
    """The folder holding ``uri``, or None for the top of its filesystem (a bucket, ``/``)."""
    scheme, _, rest = uri.partition("://")
    authority, _, path = rest.partition("/")
    parent = posixpath.dirname("/" + path)
    return None if parent == "/" else f"{scheme}://{authority}{parent}"


def _marker(rel):
    """Whether ``rel`` is a marker (``_SUCCESS``): published last, removed first."""
    return posixpath.basename(rel).startswith("_")


class UriOutput:
    """One output at a URI (``s3://``, ``hdfs://``, ``file://``): checked now, staged, published under the rule.

    Parameters
    ----------
    uri : str
        The destination.
    output : str
        The command writing it (recorded in the proof).
    folder : bool
        A folder of parts (else one file).
    inputs, replace, option
        As :func:`check_output` (inputs may be URIs).
    proves_itself : bool
        The parts are SequenceFiles that ``gpumr pack`` wrote, whose headers
        are their proof (:data:`SEQFILE_MARK`): no proof object is written.
    log : callable
        Receives the warning when something of the old output is kept.

    Attributes
    ----------
    stage : str
        The hidden URI beside the destination to write the parts under
        (``.NAME.<hex>.tmp``), set by :meth:`begin`.
    kept : str or None
        Where objects of the old output that gpumr did not make were kept.

    Fill the stage (Spark's tasks write into it, :meth:`put` uploads a local
    copy), then :meth:`commit` with the listing of the parts; :meth:`abort`
    drops the stage. See the module's rule for how each filesystem publishes.
    """

    def __init__(self, uri, output, *, folder, inputs=(), replace=True, option="-o", proves_itself=False, log=warn):
        self.uri = uri.rstrip("/")
        self.name = self.uri.rpartition("/")[2]
        self.output = output
        self.folder = folder
        self.proves_itself = proves_itself
        self.log = log
        self.stage = self.kept = None
        self.shown = printable(self.uri)
        if _parent(self.uri + "/x") is None:
            raise GpumrError(f"{option} {self.shown}: names the top of a filesystem (a bucket); give a folder or file "
                             "inside it")
        self.mode = remote.publish_mode(self.uri)
        if self.mode == "hadoop" and not proves_itself:
            raise GpumrError(f"{option} {self.shown}: {remote.unavailable(self.uri)}; this output is written through "
                             "pyarrow only")
        self._check(replace, inputs)

    def _check(self, replace, inputs):
        """As :func:`check_output`, at the URI; through ``hadoop fs`` only a new destination is taken."""
        shown = self.shown
        if self.mode == "hadoop":
            if remote.exists(self.uri):
                raise GpumrError(f"{shown}: already exists; through hadoop fs gpumr replaces nothing: remove it first")
            return
        if self.mode == "copy":
            scheme, _, rest = self.uri.partition("://")
            bucket = rest.partition("/")[0]
            if remote.stat(f"{scheme}://{bucket}")[0] is None:
                raise GpumrError(f"{shown}: no such bucket ({printable(bucket)})")
        proof = Proof.load(proof_path(self.uri))
        what, size = remote.stat(self.uri)
        if what is None:
            return
        if not replace:
            raise GpumrError(f"{shown}: already exists (use --force to replace it)")
        _not_home(self.uri, inputs)
        local = remote.local_path(self.uri)
        if local is not None and os.path.islink(local):
            raise GpumrError(f"{shown}: is a symbolic link, not a file or folder that gpumr made; gpumr never "
                             "replaces links")
        rule = _Rule(shown, self.output, proof, self.proves_itself)
        if what != ("folder" if self.folder else "file"):
            raise GpumrError(f"{shown}: is a {what}, not a {'folder' if self.folder else 'file'} that gpumr made; "
                             "it is not replaced")
        if not self.folder:
            rule.check_file(size, self.uri, _proof_name(self.name))
            return
        for rel, size in remote.tree(self.uri):
            rule.check_entry(rel, "file" if size is not None else "folder", size, _under(self.uri, rel))

    def check_size(self, size, name=""):
        """Refuse a file of ``size`` bytes (``name`` in the output; ``""``: the output itself) too large to publish.

        S3 copies :data:`gpumr.io.remote.S3_COPY_LIMIT` bytes at most. A
        writer that knows its sizes before writing (``gpumr pack``) asks
        here first, so that the refusal comes before the work.
        """
        if self.mode == "copy" and size > remote.S3_COPY_LIMIT:
            raise GpumrError(f"{self.shown}: {name or self.name} is {human(size)}, over 5 GiB, the most S3 publishes "
                             "in one copy; cut the output into smaller parts (pack --shard-size, spark --reducers)")

    def _fits(self, parts):
        """Refuse a part too large to publish (:meth:`check_size`)."""
        for rel, (_, size, _) in parts.items():
            self.check_size(size, rel)

    def begin(self):
        """Choose the hidden stage beside the destination (a folder made where folders exist); return it."""
        self.stage = _beside(self.uri, temp_name(self.name))
        if self.folder and self.mode == "rename":
            remote.make_folder(self.stage)
        elif _parent(self.uri) is not None:
            remote.make_folder(_parent(self.uri))
        return self.stage

    def put(self, local):
        """Publish the local file, or folder of files, ``local`` as this output: uploaded into the stage, then
        :meth:`commit`\\ ted. Returns :attr:`kept`."""
        if os.path.isfile(local):
            files = {"": local}
        else:
            files = {rel: os.path.join(local, rel) for rel, st in _walk(local) if stat.S_ISREG(st.st_mode)}
        parts = {rel: (rel, *((os.path.getsize(path), None) if self.proves_itself else digest(path)))
                 for rel, path in files.items()}
        self._fits(parts)
        self.begin()
        try:
            remote.upload(local, self.stage)
        except BaseException:
            self.abort()
            raise
        return self.commit(parts)

    def commit(self, parts):
        """Publish the staged files ``{name: (staged name, size, sha256)}`` under the rule (``""``: a file output).

        Staged files not named (task attempts that were not chosen) go with
        the stage. Returns :attr:`kept`; the stage is gone after, whatever happened.
        """
        try:
            if self.mode == "hadoop":
                if remote.exists(self.uri):
                    raise GpumrError(f"{self.shown}: appeared while gpumr was writing it; through hadoop fs gpumr "
                                     "replaces nothing: the new output was dropped")
                remote.move(self.stage, self.uri)
                self.stage = None
                return None
            self._fits(parts)
            ppath = proof_path(self.uri)
            old_proof = Proof.load(ppath)
            proof = None
            if not self.proves_itself:
                proof = Proof(ppath, self.output, [{rel: [size, sha] for rel, (_, size, sha) in parts.items()}])
                if old_proof is not None and old_proof.output == self.output:
                    proof.versions += old_proof.versions
                if remote.exists(self.uri):
                    proof.save()  # replacing: vouches for the old and the new output while both may be visible
                proof.versions = proof.versions[:1]
            rule = _Rule(self.shown, self.output, old_proof, self.proves_itself)
            (self._swap if self.mode == "rename" else self._copy)(parts, rule)
            if proof is not None:
                proof.save()  # adding: written once the output is complete
            elif old_proof is not None:  # a stale proof beside parts that prove themselves
                remote.delete(ppath)
        finally:
            self.abort()
            if self.kept:
                self.log(_kept_warning(self.shown, self.kept))
        return self.kept

    def _swap(self, parts, rule):
        """Publish by renames (HDFS, ``file://``): as a local folder (see the module's rule)."""
        if self.folder:
            for rel, (staged, _, _) in parts.items():
                if staged != rel:
                    remote.move(_under(self.stage, staged), _under(self.stage, rel))
            for rel, size in remote.tree(self.stage):
                if size is not None and rel not in parts:
                    remote.delete(_under(self.stage, rel))
        aside = None
        if remote.exists(self.uri):
            aside = _beside(self.uri, aside_name(self.name))
            remote.move(self.uri, aside)
            if not self.folder and not rule.vouched("", aside):
                remote.move(aside, self.uri)
                raise _changed_meanwhile(self.uri)
        try:
            remote.move(self.stage, self.uri)
        except BaseException:
            if aside is not None:
                remote.move(aside, self.uri)
            raise
        self.stage = None
        if aside is None:
            return
        if not self.folder:
            remote.delete(aside)
            return
        local = remote.local_path(aside)
        if local is not None and os.path.islink(local):  # not the folder that was checked: nothing in it is touched
            self.kept = aside
            return
        entries = [(rel, "file" if size is not None else "folder", size) for rel, size in remote.tree(aside)]
        self.kept = rule.sweep(aside, entries, _under, remote.delete, _remove_if_empty)

    def _copy(self, parts, rule):
        """Publish by copies (S3; see the module's rule for the order and the interrupt windows)."""
        what, _ = remote.stat(self.uri)
        if what == ("file" if self.folder else "folder") or (
                not self.folder and what == "file" and not rule.vouched("", self.uri)):
            raise _changed_meanwhile(self.uri)
        if not self.folder:
            remote.copy(_under(self.stage, parts[""][0]), self.uri)  # replaces the old object at once
            return
        ours, theirs = [], []
        for rel, size in remote.tree(self.uri) if what == "folder" else ():
            if size is not None:
                (ours if rule.vouched(rel, _under(self.uri, rel)) else theirs).append(rel)
        if theirs:
            self.kept = _beside(self.uri, aside_name(self.name))
            for rel in theirs:  # copied, then deleted: never lost
                remote.copy(_under(self.uri, rel), _under(self.kept, rel))
                remote.delete(_under(self.uri, rel))
        new = sorted(parts)
        steps = ([("delete", rel) for rel in ours if _marker(rel)]
                 + [("copy", rel) for rel in new if not _marker(rel)]
                 + [("delete", rel) for rel in ours if rel not in parts and not _marker(rel)]
                 + [("copy", rel) for rel in new if _marker(rel)])
        done = 0
        try:
            for op, rel in steps:
                if op == "copy":
                    remote.copy(_under(self.stage, parts[rel][0]), _under(self.uri, rel))
                else:
                    remote.delete(_under(self.uri, rel))
                done += 1
        except BaseException as exc:
            if not done:
                raise  # the old output is as it was
            for rel in sorted(set(parts) | set(ours)):
                _quietly(remote.delete, _under(self.uri, rel))
            _quietly(_remove_if_empty, self.uri)  # pyarrow's folder marker, left by the deletes
            if not self.proves_itself:
                _quietly(remote.delete, proof_path(self.uri))  # it vouches for nothing there now
            if isinstance(exc, GpumrError):
                raise GpumrError(f"{exc}; publishing {self.shown} failed after {done} of {len(steps)} steps: the parts "
                                 "published and the old output were removed, nothing of either is left") from None
            raise

    def abort(self):
        """Remove the hidden stage and what was written in it (a warning if it cannot be)."""
        if self.stage is not None:
            stage, self.stage = self.stage, None
            _quietly(remote.delete, stage)


def _remove_if_empty(uri):
    """Remove folder ``uri`` if nothing is under it (on S3: pyarrow's folder marker); return whether it is gone."""
    if remote.stat(uri)[0] is None:
        return True
    if remote.tree(uri):
        return False
    remote.delete(uri)
    return True


def _quietly(action, *args):
    """Run a clean-up ``action``; a failure is a warning, not an error hiding the one being handled."""
    try:
        action(*args)
    except GpumrError as exc:
        warn(f"clean-up: {exc}")


__all__ = ["check_output", "check_local", "FileOutput", "FolderOutput", "UriOutput", "Proof", "write_file", "digest",
           "proof_path", "is_proof", "marked_sequencefile", "SEQFILE_MARK", "PACK_PART", "FOLDER_PROOF", "warn"]
