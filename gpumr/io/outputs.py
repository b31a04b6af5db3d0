"""Every output gpumr writes, under one rule and through this one output transaction.

An output appears complete or not at all (staged under a hidden name, then published), and only what carries
gpumr's proof of authorship is replaced or deleted, so nothing of the user's is lost (:doc:`/concepts/outputs`)."""

import hashlib
import os
import posixpath
import re
import shutil
import stat

from seqfile import SequenceFileError
from seqfile.atomic import AtomicFile, aside_name, interrupts_held, swap_into_place, temp_dir_beside, temp_name

from ..errors import GpumrError, printable
from ..log import logger
from ..sizes import human
from .proofs import Proof, is_proof
from .remote import READ_FLAGS, S3_COPY_LIMIT, locate, shown

#: The SequenceFile header metadata key that proves ``gpumr pack`` wrote a file (its value: gpumr's version).
SEQFILE_MARK = "gpumr.pack"
#: The names of the shards in a folder written by ``gpumr pack``.
PACK_PART = re.compile(r"part-[0-9]{5}\.seq\Z")
#: The proof of the files written one by one into a folder the user named (``gpumr unpack -d DIR``) lies in it.
FOLDER_PROOF = ".gpumr"

_CHUNK = 1 << 20


def warn(message):
    """Say ``message`` as a gpumr warning (an output kept, a proof not recorded)."""
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
    loc = locate(path).stripped()
    return str(loc.beside(_proof_name(loc.name)))


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
    """``(size, SHA-256 hex)`` of regular file ``path`` (a path, URI or location), read without following a link;
    None if it is not one (or nothing is there)."""
    if dir_fd is not None:  # a name in an open folder
        try:
            fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
        with open(fd, "rb") as f:
            return _hash(f) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    try:
        with locate(path).open_input(_CHUNK, follow=False) as f:
            return _hash(f)
    except GpumrError:
        return None


def marked_sequencefile(path):
    """Whether ``path`` (a path or URI) is a SequenceFile whose header says ``gpumr pack`` wrote it
    (:data:`SEQFILE_MARK`); only its first bytes are read."""
    try:
        return SEQFILE_MARK in locate(path).read_header().metadata
    except (OSError, SequenceFileError, GpumrError):
        return False


#: Bytes of one ``bytes`` write from which :class:`HashingWriter` hashes it in its second thread.
HASH_AHEAD = 1 << 20
#: Writes a :class:`HashingWriter` lets wait for their hash at most (the memory they hold is bounded).
HASH_PENDING = 2
_hasher = None  # (pid, the hashing thread's executor) of this process


class HashingWriter:
    """A binary file that hashes what is written to it, in order: :meth:`digest` is the file's ``(size, SHA-256)``
    without reading it back, or None once anything else could have changed it (a seek, a write through its descriptor,
    a write by name after the writer closed it): then it is read back.

    Examples
    --------
    >>> import io
    >>> w = HashingWriter(io.BytesIO())
    >>> _ = w.write(b"x" * HASH_AHEAD); _ = w.write(bytearray(b"y"))
    >>> w.digest() == (HASH_AHEAD + 1, hashlib.sha256(b"x" * HASH_AHEAD + b"y").hexdigest())
    True
    """

    def __init__(self, f):
        self.f, self.h, self.size, self.linear = f, hashlib.sha256(), 0, True
        self._pending = []

    def write(self, data):
        view = memoryview(data).cast("B")
        if len(view) >= HASH_AHEAD and type(data) is not bytes:  # (the caller's buffer: hashed while written)
            self._ahead(view)
            try:
                n = self.f.write(data)
            finally:
                self._wait(0)
            n = len(view) if n is None else n
            self.linear = self.linear and n == len(view)  # (a part written, all hashed: read back)
        else:
            n = self.f.write(data)
            n = len(view) if n is None else n
            if n >= HASH_AHEAD:
                self._ahead(data if n == len(data) else data[:n])
            else:
                self._wait(0)
                self.h.update(view[:n])
        self.size += n
        return n

    def _ahead(self, data):
        """Hash ``data`` in the hashing thread, after what is pending."""
        global _hasher
        if _hasher is None or _hasher[0] != os.getpid():  # (one per process: a forked child has no thread)
            from concurrent.futures import ThreadPoolExecutor
            _hasher = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="gpumr-hash"))
        self._wait(HASH_PENDING - 1)
        self._pending.append(_hasher[1].submit(self.h.update, data))

    def _wait(self, most):
        """Wait until at most ``most`` writes wait their hash."""
        while len(self._pending) > most:
            self._pending.pop(0).result()

    def _moved(self, name):
        self.linear = False
        return getattr(self.f, name)

    def seek(self, *args):
        return self._moved("seek")(*args)

    def truncate(self, *args):
        return self._moved("truncate")(*args)

    def fileno(self):
        return self._moved("fileno")()

    def close(self):
        # Closed by its writer, the file may be written next by name (a compiler's ``-o``): read it back.
        return self._moved("close")()

    def digest(self):
        """``(size, SHA-256 hex)`` of what was written, or None where it was not written straight through."""
        self._wait(0)
        return (self.size, self.h.hexdigest()) if self.linear else None

    def __getattr__(self, name):
        return getattr(self.f, name)


# -- the rule -------------------------------------------------------------------------------------
class Rule:
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
    also : tuple of str
        Other names ``output``'s command had (an output of any of them is one of ``output``'s)."""

    def __init__(self, shown, output, proof, pack_parts, also=()):
        self.shown = shown
        self.output = output
        self.also = tuple(also)
        self.proof = proof
        self.pack_parts = pack_parts
        self.folders = set()

    def know_folders(self, entries):
        """Find which folders among ``entries`` (``(rel, what, size)`` of an output) the proof lists (one pass)."""
        if self.proof is not None:
            self.folders = self.proof.listed_folders(rel for rel, what, _ in entries if what == "folder")

    def check_file(self, size, path, proof_name):
        """Refuse an existing file output (``size`` bytes, at ``path``) unless its proof or its header proves it."""
        if (self.proof is not None and self.proof.has_size("", size)) or marked_sequencefile(path):
            return
        raise GpumrError(f"{self.shown}: exists and gpumr did not make it (no proof beside it, {proof_name}); choose "
                         "another name or remove it yourself")

    def check_entry(self, rel, what, size, path):
        """Refuse unless entry ``rel`` of an existing output folder (at ``path``) is gpumr's by its size or its
        header."""
        proof, output = self.proof, self.output
        if proof is not None and proof.output != output and proof.output not in self.also:
            raise GpumrError(f"{self.shown}: an output of {proof.output}, not of {output}; choose another folder")
        if proof is not None and (rel in self.folders if what == "folder" else
                                  what == "file" and proof.has_size(rel, size)):
            return
        if self.pack_parts and PACK_PART.match(rel) and what == "file":
            if marked_sequencefile(path):
                return
            raise GpumrError(f"{self.shown}: {printable(rel)} was not written by gpumr pack (its header has no "
                             f"{SEQFILE_MARK} entry); gpumr replaces only its own output: remove it yourself or "
                             "choose another folder")
        why = f"which changed since {output} wrote it" if proof is not None and proof.lists(rel) else \
            f"which {output} did not make"
        raise GpumrError(f"{self.shown}: holds {printable(rel)}, {why}; gpumr replaces only its own {output} "
                         "output: remove it yourself or choose another folder")

    def vouched(self, rel, path, dir_fd=None):
        """Whether the file at ``path`` (``rel`` in the output; ``""`` for a file output; a name in open folder
        ``dir_fd`` if given) is still what gpumr wrote."""
        if self.proof is not None and self.proof.vouches(rel, digest(path, dir_fd)):
            return True
        if dir_fd is not None:
            return False
        return (rel == "" or (self.pack_parts and PACK_PART.match(rel) is not None)) and marked_sequencefile(path)

    def sweep(self, old):
        """Remove from an old output folder set aside at ``old`` (a location) what this rule vouches for."""
        if old.is_link() or old.stat()[0] != "folder":
            return str(old)
        entries = old.entries()
        self.know_folders(entries)
        for rel, what, _ in entries:
            if what == "file" and self.vouched(rel, old.child(rel)):
                old.child(rel).delete()
        for rel, what, _ in reversed(entries):  # what a folder holds before the folder
            if what == "folder" and rel in self.folders:
                old.child(rel).remove_empty_folder()
        return None if old.remove_empty_folder() else str(old)


def _kept_warning(shown_as, kept):
    return (f"{shown_as}: the old output was set aside as {shown(kept)}, not removed: it holds files gpumr did not "
            "make, or that changed since gpumr wrote them")


def _changed_meanwhile(path, where=""):
    return GpumrError(f"{shown(path)}: not replaced: it appeared, or changed, while gpumr was writing it, and "
                      f"gpumr did not make what is there now{where}; the new output was dropped")


# -- the checks -------------------------------------------------------------------------------------
def local_output(path, option):
    """The local path an output that is written here only names; one line naming the option for any other URI."""
    local = locate(path).local
    if local is None:
        raise GpumrError(f"{option} {shown(path)}: a URI; this output is written to a local path only")
    return local


def check_local(path, option):
    """Refuse a URI where only a local output can be written (one line naming the option)."""
    local_output(path, option)


def _not_home(loc, inputs):
    """Refuse ``loc`` if it is the current folder or holds it, or is or holds one of ``inputs`` (paths or URIs)."""
    real = loc.place()
    inside = real.rstrip("/") + "/"
    here = os.path.realpath(os.getcwd())
    if here == real or here.startswith(inside):
        raise GpumrError(f"{loc.shown}: is the current folder or holds it; gpumr never replaces it")
    for src in inputs:
        src_real = locate(src).place()
        if src_real == real or src_real.startswith(inside):
            raise GpumrError(f"{loc.shown}: is or holds the input {shown(src)}; gpumr never replaces the inputs")


def _words(what):
    """What ``what`` (a :meth:`~gpumr.io.remote.Location.stat` kind) is, in words."""
    return {"file": "a regular file", "folder": "a folder"}.get(what, what)


def check_output(path, output, *, folder, replace=True, inputs=(), option="-o", pack_parts=False, also=()):
    """Refuse ``path`` (a path or URI) as the destination of a new output unless it is free or an earlier gpumr
    output. Raises ``GpumrError`` naming ``path`` and saying why it is not replaced.

    Parameters
    ----------
    path : str
    output : str
        The command writing it (``"gpumr spark"``); an existing folder is replaced only if that command made it.
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
    also : tuple of str
        Other names of ``output``'s command, whose outputs it replaces too."""
    loc = locate(path).stripped()
    proof = Proof.load(proof_path(loc))
    link = loc.is_link()
    what, size = ("a symbolic link", None) if link else loc.stat()
    if what is None:
        return
    if not replace:
        raise GpumrError(f"{loc.shown}: already exists (use --force to replace it)")
    _not_home(loc, inputs)
    if link:
        raise GpumrError(f"{loc.shown}: is a symbolic link, not a file or folder that gpumr made; gpumr never "
                         "replaces links")
    want = "folder" if folder else "file"
    if what != want:
        raise GpumrError(f"{loc.shown}: is {_words(what)}, not a {want} that gpumr made; it is not replaced")
    rule = Rule(loc.shown, output, proof, pack_parts, also)
    if not folder:
        rule.check_file(size, loc, _proof_name(loc.name))
        return
    entries = loc.entries()
    rule.know_folders(entries)
    for rel, what, size in entries:
        rule.check_entry(rel, what, size, loc.child(rel))


# -- the output transaction -------------------------------------------------------------------------
class _Transaction:
    """The one proof-and-publish sequence; each kind of output is a policy of it.

    Attributes
    ----------
    loc : gpumr.io.remote.Location
        The destination.
    kept : str or None
        After :meth:`commit`: where the rest of the old output was kept."""

    folder = False
    proves_itself = False

    also = ()

    def _setup(self, path, output, proves_itself=False, also=()):
        self.also = tuple(also)
        self.loc = locate(path).stripped()
        self.shown = self.loc.shown
        self.output = output
        self.proves_itself = proves_itself
        self.kept = None

    def commit(self, parts=None):
        """Publish the staged output under the rule; return :attr:`kept`."""
        ppath = locate(proof_path(self.loc))
        proof = old_proof = None
        try:
            listing = self._ready(parts)
            old_proof = Proof.load(str(ppath))
            if not self.proves_itself:
                proof = Proof(str(ppath), self.output, [listing])
                if old_proof is not None:
                    proof.versions += old_proof.versions
                proof.save()  # vouches for the new output and the old one while either may be visible
                proof.versions = proof.versions[:1]
            self.kept = self._publish(parts, Rule(self.shown, self.output, old_proof, self.proves_itself, self.also))
        finally:
            self.abort()
            if self.kept:
                warn(_kept_warning(self.shown, self.kept))
        with interrupts_held():  # the proof trimmed whole: Ctrl-C comes after
            if proof is not None:
                proof.save()  # now for the new output only
            elif old_proof is not None:  # a stale proof beside an output that proves itself: gpumr's, and wrong now
                ppath.delete()
        return self.kept

    def __enter__(self):
        return self.begin()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class FileOutput(_Transaction):
    """One local output file: checked now, written under a hidden name, given its name under the rule. Nothing is made
    until :meth:`begin`; as a context manager it yields :attr:`file` and commits on success.

    Parameters
    ----------
    path : str
        The destination (a local path, or ``file:///PATH``).
    made_by : str
        The command writing it (recorded in the proof).
    inputs, replace, option
        As :func:`check_output`.
    proves_itself : bool
        The content carries its own proof (a SequenceFile with :data:`SEQFILE_MARK`): no proof file.

    Attributes
    ----------
    file : io.BufferedWriter
        Set by :meth:`begin`: write the contents here, or close it and have a program write :attr:`tmp` by name.
    tmp : str"""

    def __init__(self, path, made_by="gpumr", *, inputs=(), replace=True, option="-o", proves_itself=False):
        self._setup(local_output(path, option), made_by, proves_itself=proves_itself)
        self.path = self.loc.local
        self.made_by = made_by
        self.replace = replace
        self._atomic = self.file = self.tmp = None
        check_output(self.path, made_by, folder=False, replace=replace, inputs=inputs, option=option)

    def begin(self):
        """Make the hidden temporary file beside the destination; return ``self``."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        try:
            with interrupts_held():  # made and recorded together (abort() then finds it)
                self._atomic = AtomicFile(self.path, replace=False)
                self.file, self.tmp = HashingWriter(self._atomic.file), self._atomic.tmp
        except BaseException:
            self.abort()  # (``with`` calls no __exit__ when __enter__ fails)
            raise
        return self

    def __enter__(self):
        return self.begin().file

    def _ready(self, parts):
        self._atomic.sync()
        # A file that proves itself gets no proof file, so nothing needs its hash (reading it all back
        # cost ``gpumr pack`` a third of its time on tmpfs).
        if self.proves_itself:
            return None
        hashed = self.file.digest() if isinstance(self.file, HashingWriter) else None
        return {"": hashed or digest(self.tmp)}  # (hashed as written: a large output is not read back)

    def _publish(self, parts, rule):
        self._atomic.replace = (lambda old: rule.vouched("", old)) if self.replace else False
        try:
            self._atomic.commit()
        except FileExistsError as exc:
            kept = getattr(exc, "kept", self.path)
            where = "" if kept == self.path else f"; the old file is kept as {shown(kept)}"
            raise _changed_meanwhile(self.path, where) from None
        self._atomic = None
        return None

    def abort(self):
        """Drop the unfinished file."""
        if self._atomic is not None:
            self._atomic.abort()
            self._atomic = None


def write_file(path, data, made_by="gpumr", **checks):
    """Write ``data`` as the output file ``path`` (:class:`FileOutput`, ``checks`` as there)."""
    with FileOutput(path, made_by, **checks) as f:
        f.write(data)


class FolderOutput(_Transaction):
    """One local output folder of parts: checked now, filled in a hidden folder beside it, swapped in whole (``with
    FolderOutput(...) as stage:``).

    Parameters
    ----------
    path : str
        The destination folder (a local path, or ``file:///PATH``).
    output : str
        The command writing it (``"gpumr spark"``); an existing folder is replaced only if that command made it (and
        its proof vouches for it).
    inputs, replace, option, pack_parts
        As :func:`check_output`. With ``pack_parts`` the parts prove themselves (their headers) and no proof file is
        written.

    Attributes
    ----------
    stage : str
        Where to write the parts (inside a hidden folder beside ``path``), set by :meth:`begin`.
    kept : str or None
        After :meth:`commit`: where the rest of the old folder was kept, if anything was left in it."""

    folder = True

    def __init__(self, path, output, *, inputs=(), replace=True, option="-o", pack_parts=False, also=()):
        self._setup(local_output(path, option), output, proves_itself=pack_parts, also=also)
        self.path = self.loc.local
        self.pack_parts = pack_parts
        self.stage = self._holder = None
        check_output(self.path, output, folder=True, replace=replace, inputs=inputs, option=option,
                     pack_parts=pack_parts, also=also)

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

    def _ready(self, parts):
        stage = locate(self.stage)
        if parts is None:
            return {rel: digest(stage.child(rel)) for rel, what, _ in stage.entries() if what == "file"}
        for rel, (staged, _, _) in parts.items():
            if staged != rel:
                os.rename(os.path.join(self.stage, staged), os.path.join(self.stage, rel))
        entries = stage.entries()
        for rel, what, _ in entries:
            if what != "folder" and rel not in parts:
                stage.child(rel).delete()
        _drop_empty_folders(stage, entries)
        return {rel: [size, sha] for rel, (_, size, sha) in parts.items()}

    def _publish(self, parts, rule):
        with interrupts_held():  # swapped in and the old folder cleaned up whole: Ctrl-C comes after
            old = swap_into_place(self.stage, self.path)
            os.rmdir(self._holder)
            self._holder = None
            return None if old is None else rule.sweep(locate(old))

    def abort(self):
        """Remove the hidden folder and what was written in it (whole, even if interrupted meanwhile)."""
        with interrupts_held():
            if self._holder is not None:
                shutil.rmtree(self._holder, ignore_errors=True)
                self._holder = None


def _drop_empty_folders(stage, entries):
    """Remove the folders of a stage (listed in ``entries``, a folder before what it holds) left empty once the
    files that are not published went: task attempts' folders, an engine's own."""
    for rel, what, _ in reversed(entries):
        if what == "folder":
            stage.child(rel).remove_empty_folder()


def _marker(rel):
    """Whether ``rel`` is a marker (``_SUCCESS``): published last, removed first."""
    return posixpath.basename(rel).startswith("_")


class UriOutput(_Transaction):
    """One output at a URI (``s3://``, ``hdfs://``, ``file://``): checked now, staged, published under the rule. Fill
    its :attr:`stage`, then :meth:`commit` the listing of the parts (or :meth:`abort`).

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
        The parts are SequenceFiles that ``gpumr pack`` wrote, whose headers are their proof (:data:`SEQFILE_MARK`):
        no proof object is written.

    Attributes
    ----------
    stage : str
        The hidden URI beside the destination to write the parts under (``.NAME.<hex>.tmp``), set by :meth:`begin`.
    kept : str or None
        Where objects of the old output that gpumr did not make were kept."""

    def __init__(self, uri, output, *, folder, inputs=(), replace=True, option="-o", proves_itself=False, also=()):
        self._setup(uri, output, proves_itself, also)
        self.uri = str(self.loc)
        self.name = self.loc.name
        self.folder = folder
        self.stage = None
        if self.loc.parent() is None:
            raise GpumrError(f"{option} {self.shown}: names the top of a filesystem (a bucket); give a folder or file "
                             "inside it")
        self.mode = self.loc.publish_mode
        if self.mode == "hadoop":
            if not proves_itself:
                raise GpumrError(f"{option} {self.shown}: {self.loc.unavailable()}; this output is written through "
                                 "pyarrow only")
            if self.loc.exists():
                raise GpumrError(f"{self.shown}: already exists; through hadoop fs gpumr replaces nothing: remove "
                                 "it first")
            return
        if self.mode == "copy" and self.loc.top().stat()[0] is None:
            raise GpumrError(f"{self.shown}: no such bucket ({shown(self.loc.authority)})")
        check_output(self.loc, output, folder=folder, replace=replace, inputs=inputs, option=option,
                     pack_parts=proves_itself, also=also)

    def check_size(self, size, name=""):
        """Refuse a file of ``size`` bytes (``name`` in the output; ``""``: the output itself) too large to publish."""
        if self.mode == "copy" and size > S3_COPY_LIMIT:
            raise GpumrError(f"{self.shown}: {name or self.name} is {human(size)}, over 5 GiB, the most S3 publishes "
                             "in one copy; cut the output into smaller parts (pack --shard-size, spark --reducers)")

    def begin(self):
        """Choose the hidden stage beside the destination (a folder made where folders exist); return it."""
        stage = self.loc.beside(temp_name(self.name))
        self.stage = str(stage)
        if self.folder and self.mode == "rename":
            stage.make_folder()
        elif self.loc.parent().parent() is not None:
            self.loc.parent().make_folder()
        return self.stage

    def put(self, local):
        """Publish the local file, or folder of files, ``local`` as this output: uploaded into the stage, then
        :meth:`commit`\\ ted. Returns :attr:`kept`."""
        found = locate(local)
        if os.path.isfile(local):
            files = {"": found}
        else:
            files = {rel: found.child(rel) for rel, what, _ in found.entries() if what == "file"}
        parts = {rel: (rel, *((os.path.getsize(f.local), None) if self.proves_itself else digest(f)))
                 for rel, f in files.items()}
        for rel, (_, size, _) in parts.items():
            self.check_size(size, rel)
        self.begin()
        try:
            locate(self.stage).upload(local)
        except BaseException:
            self.abort()
            raise
        return self.commit(parts)

    def commit(self, parts):
        """Publish the staged files ``{name: (staged name, size, sha256)}`` under the rule (``""``: a file output)."""
        if self.mode == "hadoop":
            try:
                if self.loc.exists():
                    raise GpumrError(f"{self.shown}: appeared while gpumr was writing it; through hadoop fs gpumr "
                                     "replaces nothing: the new output was dropped")
                locate(self.stage).move(self.loc)
                self.stage = None
            finally:
                self.abort()
            return None
        return super().commit(parts)

    def _ready(self, parts):
        for rel, (_, size, _) in parts.items():
            self.check_size(size, rel)
        return {rel: [size, sha] for rel, (_, size, sha) in parts.items()}

    def _publish(self, parts, rule):
        return (self._swap if self.mode == "rename" else self._copy)(parts, rule)

    def _swap(self, parts, rule):
        """Publish by renames (HDFS, ``file://``): as a local folder (see the module's rule)."""
        stage, dest = locate(self.stage), self.loc
        if self.folder:
            for rel, (staged, _, _) in parts.items():
                if staged != rel:
                    stage.child(staged).move(stage.child(rel))
            for rel, size in stage.tree():
                if size is not None and rel not in parts:
                    stage.child(rel).delete()
            _drop_empty_folders(stage, stage.entries())
        aside = None
        if dest.exists():
            aside = dest.beside(aside_name(self.name))
            dest.move(aside)
            if not self.folder and not rule.vouched("", aside):
                aside.move(dest)
                raise _changed_meanwhile(self.uri)
        try:
            stage.move(dest)
        except BaseException:
            if aside is not None:
                aside.move(dest)
            raise
        self.stage = None
        if aside is None:
            return None
        if not self.folder:
            aside.delete()
            return None
        return rule.sweep(aside)

    def _copy(self, parts, rule):
        """Publish by copies (S3; see the module's rule for the order and the interrupt windows)."""
        stage, dest = locate(self.stage), self.loc
        what, _ = dest.stat()
        if what == ("file" if self.folder else "folder") or (
                not self.folder and what == "file" and not rule.vouched("", dest)):
            raise _changed_meanwhile(self.uri)
        if not self.folder:
            stage.child(parts[""][0]).copy(dest)  # replaces the old object at once
            return None
        ours, theirs = [], []
        for rel, size in dest.tree() if what == "folder" else ():
            if size is not None:
                (ours if rule.vouched(rel, dest.child(rel)) else theirs).append(rel)
        kept = None
        if theirs:
            kept = dest.beside(aside_name(self.name))
            for rel in theirs:  # copied, then deleted: never lost
                dest.child(rel).copy(kept.child(rel))
                dest.child(rel).delete()
        new = sorted(parts)
        steps = ([("delete", rel) for rel in ours if _marker(rel)]
                 + [("copy", rel) for rel in new if not _marker(rel)]
                 + [("delete", rel) for rel in ours if rel not in parts and not _marker(rel)]
                 + [("copy", rel) for rel in new if _marker(rel)])
        done = 0
        try:
            for op, rel in steps:
                if op == "copy":
                    stage.child(parts[rel][0]).copy(dest.child(rel))
                else:
                    dest.child(rel).delete()
                done += 1
        except BaseException as exc:
            if not done:
                raise  # the old output is as it was
            for rel in sorted(set(parts) | set(ours)):
                _quietly(dest.child(rel).delete)
            _quietly(dest.remove_empty_folder)  # pyarrow's folder marker, left by the deletes
            if not self.proves_itself:
                _quietly(locate(proof_path(dest)).delete)  # it vouches for nothing there now
            if isinstance(exc, GpumrError):
                raise GpumrError(f"{exc}; publishing {self.shown} failed after {done} of {len(steps)} steps: the parts "
                                 "published and the old output were removed, nothing of either is left") from None
            raise
        return None if kept is None else str(kept)

    def abort(self):
        """Remove the hidden stage and what was written in it (a warning if it cannot be)."""
        if self.stage is not None:
            stage, self.stage = self.stage, None
            _quietly(locate(stage).delete)


def _quietly(action, *args):
    """Run a clean-up ``action``; a failure is a warning, not an error hiding the one being handled."""
    try:
        action(*args)
    except GpumrError as exc:
        warn(f"clean-up: {exc}")


def open_output(path, output, *, folder, **checks):
    """The output at ``path`` (a path or URI) under the rule: a :class:`FolderOutput` or :class:`FileOutput` where it
    names a local path (``file:///PATH`` too), a :class:`UriOutput` elsewhere (``checks`` as :func:`check_output`;
    ``pack_parts`` is the local policies' name for ``proves_itself``)."""
    loc = locate(path)
    if loc.local is not None:
        return (FolderOutput if folder else FileOutput)(loc.absolute(), output, **checks)
    return UriOutput(path, output, folder=folder, **checks)


__all__ = ["check_output", "check_local", "local_output", "open_output", "FileOutput", "FolderOutput", "UriOutput",
           "Proof", "write_file", "digest", "proof_path", "is_proof", "marked_sequencefile", "SEQFILE_MARK",
           "PACK_PART", "FOLDER_PROOF", "warn"]
