"""Proofs of authorship, read and written as streams, in memory bounded whatever their size."""

import array
import codecs
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile

import numpy as np

from seqfile.atomic import AtomicFile

from .. import __version__
from ..errors import GpumrError
from .remote import READ_FLAGS, kind, locate, shown

#: The largest proof file read or written (about two million files listed); a larger one is not gpumr's.
MAX_PROOF = 256 * 1024 * 1024
#: The fewest bytes one listed file takes in a proof (``"a":[0,"<64 hex>"],``): bounds the index's size.
_MIN_ENTRY = 76
#: The longest single token (a file's relative path, the command) a proof may hold.
_MAX_TOKEN = 1 << 20
_CHUNK = 1 << 20
_SHA = re.compile(r"[0-9a-f]{64}\Z")
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_WS = re.compile(r"[ \t\n\r]*")
_ENTRY = re.compile(r'"([^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*)":\[(0|[1-9][0-9]{0,19}),"([0-9a-f]{64})"\]([,}])')
# The hashes' key: fresh per process, so that no one can make a file whose hash matches a listed one.
_KEY = secrets.token_bytes(16)


class _NotAProof(Exception):
    """The text is not the JSON gpumr writes (turned into the refusal naming the file)."""


def _not_a_proof(path, why):
    return GpumrError(f"{shown(path)}: {why}, not a gpumr proof file; gpumr writes an output beside its proof "
                      "and leaves this alone: move it away, or choose another output name")


def _open(path, dir_fd):
    """The proof file at ``path`` (a path, URI, or a name in open folder ``dir_fd``), opened for reading; None if
    nothing is there. Only a regular file, never through a link, at most :data:`MAX_PROOF` bytes."""
    if dir_fd is not None:
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
        f = open(fd, "rb")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PROOF:
            f.close()
            raise _not_a_proof(path, kind(st.st_mode) if not stat.S_ISREG(st.st_mode)
                               else f"{st.st_size} bytes, more than a proof's {MAX_PROOF}")
        return _Sized(f, st.st_size)
    loc = locate(path)
    if loc.is_link():
        raise _not_a_proof(path, "a symbolic link")
    what, size = loc.stat()
    if what is None:
        return None
    if what != "file":
        raise _not_a_proof(path, what if what != "folder" else "a folder")
    if size > MAX_PROOF:
        raise _not_a_proof(path, f"{size} bytes, more than a proof's {MAX_PROOF}")
    try:
        cm = loc.open_input(64 << 10, follow=False)
        return _Sized(cm.__enter__(), size, cm)
    except GpumrError as exc:
        raise _not_a_proof(path, str(exc).rpartition(": ")[2]) from None


class _Sized:
    """An open proof file and its size (and the context that opened it, to close)."""

    def __init__(self, f, size, cm=None):
        self.f, self.size, self._cm = f, size, cm

    def close(self):
        if self._cm is not None:
            self._cm.__exit__(None, None, None)
        else:
            self.f.close()


class _Scanner:
    """A streaming parser of a proof's JSON: :meth:`events` yields what it holds, a chunk of the file at a time."""

    def __init__(self, f, size, limit):
        self.f, self.size, self.limit, self.read = f, size, limit, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False

    def _fill(self, ahead):
        """Make at least ``ahead`` characters available after :attr:`pos` (fewer at the end of the file)."""
        while len(self.buf) - self.pos < ahead and not self.eof:
            chunk = self.f.read(min(_CHUNK, max(self.size - self.read, 0) + 1))  # (a tiny proof: a tiny read)
            self.read += len(chunk)
            if self.read > self.limit:
                raise _NotAProof(f"more than a proof's {self.limit} bytes")
            try:
                text = self.decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError:
                raise _NotAProof("not UTF-8 text") from None
            self.eof = not chunk
            self.buf = self.buf[self.pos:] + text
            self.pos = 0

    def _peek(self):
        """The next character after white space ("" at the end)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos:self.pos + 1]
            self._fill(1)

    def _take(self, ch):
        if self._peek() != ch:
            raise _NotAProof("not the JSON gpumr writes")
        self.pos += 1

    def _string(self):
        self._take('"')
        ahead = 4096
        while True:
            self._fill(ahead)
            try:
                text, end = json.decoder.scanstring(self.buf, self.pos, True)
            except ValueError:
                if self.eof or ahead >= _MAX_TOKEN:
                    raise _NotAProof("not the JSON gpumr writes") from None
                ahead *= 4
                continue
            self.pos = end
            return text

    def _int(self):
        self._peek()
        self._fill(32)
        m = _INT.match(self.buf, self.pos)
        if m is None or (m.end() == len(self.buf) and not self.eof) or m.end() - self.pos > 24:
            raise _NotAProof("not the JSON gpumr writes")
        self.pos = m.end()
        return int(m.group())

    def _next(self, close):
        """After an item: True if another follows (``,``), False at ``close``."""
        c = self._peek()
        self.pos += 1
        if c == ",":
            return True
        if c == close:
            return False
        raise _NotAProof("not the JSON gpumr writes")

    def events(self):
        """Yield ``("field", name, text)`` for ``gpumr`` and ``output``, ``(index, rel, size, sha256)`` per listed
        file, and ``("versions", count)``; :class:`_NotAProof` for anything else."""
        self._fill(_CHUNK)
        self._take("{")
        seen = set()
        more = self._peek() != "}"
        if not more:
            self.pos += 1
        while more:
            name = self._string()
            self._take(":")
            if name in seen or name not in ("gpumr", "output", "versions"):
                raise _NotAProof("not the JSON gpumr writes")
            seen.add(name)
            if name == "versions":
                yield from self._versions()
            else:
                yield ("field", name, self._string())
            more = self._next("}")
        if self._peek() != "" or seen != {"gpumr", "output", "versions"}:
            raise _NotAProof("not the JSON gpumr writes")

    def _versions(self):
        self._take("[")
        count = 0
        more = self._peek() != "]"
        if not more:
            self.pos += 1
        while more:
            self._take("{")
            entries = self._peek() != "}"
            if not entries:
                self.pos += 1
            while entries:
                m = _ENTRY.match(self.buf, self.pos)  # the way gpumr writes an entry: one match
                if m is not None and m.end() < len(self.buf):
                    rel = m.group(1)
                    if "\\" in rel:
                        try:
                            rel = json.loads(f'"{rel}"')
                        except ValueError:
                            raise _NotAProof("not the JSON gpumr writes") from None
                    self.pos = m.end()
                    yield (count, rel, int(m.group(2)), m.group(3))
                    entries = m.group(4) == ","
                    if not entries:
                        self.pos -= 1
                        entries = self._next("}")
                    elif len(self.buf) - self.pos < 8192:
                        self._fill(_CHUNK)
                    continue
                rel = self._string()
                self._take(":")
                self._take("[")
                size = self._int()
                self._take(",")
                sha = self._string()
                self._take("]")
                if not _SHA.match(sha):
                    raise _NotAProof("not the JSON gpumr writes")
                yield (count, rel, size, sha)
                entries = self._next("}")
            count += 1
            more = self._next("]")
        yield ("versions", count)


def _scan(path, dir_fd):
    """The events of the proof at ``path`` (:meth:`_Scanner.events`), or None if nothing is there."""
    opened = _open(path, dir_fd)
    if opened is None:
        return None

    def events():
        try:
            yield from _Scanner(opened.f, opened.size, MAX_PROOF).events()
        except _NotAProof as exc:
            raise _not_a_proof(path, str(exc)) from None
        finally:
            opened.close()
    return events()


def _h8(rel, size, sha):
    data = f"{size}\0{sha}\0{rel}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=_KEY).digest(), "little")


def _h4(*parts):
    return hash(parts) & 0xFFFFFFFF


def _sorted(values, dtype):
    """``values`` (an :class:`array.array`) as a sorted numpy array, sorted in place: no second copy."""
    out = np.frombuffer(values, dtype) if len(values) else np.empty(0, dtype)
    out.sort()
    return out


class _Stored:
    """A version of a proof file, to be copied from it when a proof is saved (less ``drop``, plus ``extra``)."""

    def __init__(self, path, dir_fd, index, drop=(), extra=None):
        self.path, self.dir_fd, self.index = path, dir_fd, index
        self.drop = drop
        self.extra = extra or {}


class Proof:
    """The proof beside an output: the command that made it and what it held.

    Parameters
    ----------
    path : str
        The proof file's own path or URI (:func:`gpumr.io.outputs.proof_path` of the output).
    output : str
        The command that made the output, e.g. ``"gpumr spark"``.
    versions : list
        Listings ``{relative path: [size, sha256]}`` (``""`` for a file output itself), newest first: during a
        replacement, the new one and the old one. A loaded proof's versions stay in its file (they are copied from it
        when a proof holding them is saved)."""

    def __init__(self, path, output, versions=(), dir_fd=None):
        self.path = path
        self.output = output
        self.versions = [v if isinstance(v, _Stored) else dict(v) for v in versions]
        self.dir_fd = dir_fd
        empty = np.empty(0, np.uint64)
        self._vouch, self._sized, self._listed = empty, empty.astype(np.uint32), empty.astype(np.uint32)

    @classmethod
    def load(cls, path, dir_fd=None):
        """The proof at ``path`` (in open folder ``dir_fd``), None if there is none; GpumrError if not a proof."""
        events = _scan(path, dir_fd)
        if events is None:
            return None
        vouch, sized, listed = array.array("Q"), array.array("I"), array.array("I")
        fields, count = {}, 0
        blake, key = hashlib.blake2b, _KEY
        for event in events:
            if event[0] == "field":
                fields[event[1]] = event[2]
            elif event[0] == "versions":
                count = event[1]
            else:
                _, rel, size, sha = event
                vouch.append(int.from_bytes(blake(f"{size}\0{sha}\0{rel}".encode("utf-8", "surrogatepass"),
                                                  digest_size=8, key=key).digest(), "little"))
                sized.append(hash((rel, size)) & 0xFFFFFFFF)
                listed.append(hash((rel,)) & 0xFFFFFFFF)
        proof = cls(path, fields["output"], [_Stored(path, dir_fd, i) for i in range(count)], dir_fd)
        proof._vouch, proof._sized, proof._listed = (_sorted(a, t) for a, t in
                                                     ((vouch, np.uint64), (sized, np.uint32), (listed, np.uint32)))
        return proof

    @staticmethod
    def check(path, dir_fd=None):
        """Whether ``path`` is a gpumr proof file (read as a stream, nothing kept)."""
        try:
            events = _scan(path, dir_fd)
            return events is not None and all(True for _ in events)
        except GpumrError:
            return False

    # -- questions ------------------------------------------------------------------------------
    def _dicts(self):
        return [v for v in self.versions if isinstance(v, dict)]

    @staticmethod
    def _found(array, value):
        i = np.searchsorted(array, value)
        return bool(i < len(array) and array[i] == value)

    def has_size(self, rel, size):
        """Whether a listed version had a file of ``size`` bytes at ``rel`` (a cheap check, before the work)."""
        return (any(rel in v and v[rel][0] == size for v in self._dicts())
                or self._found(self._sized, np.uint32(_h4(rel, size))))

    def lists(self, rel):
        """Whether a listed version had a file at ``rel``."""
        return any(rel in v for v in self._dicts()) or self._found(self._listed, np.uint32(_h4(rel)))

    def vouches(self, rel, found):
        """Whether ``found`` (a ``(size, sha256)`` digest, or None) is what gpumr wrote at ``rel``."""
        if found is None:
            return False
        size, sha = found
        return (any(tuple(v.get(rel, ())) == (size, sha) for v in self._dicts())
                or self._found(self._vouch, np.uint64(_h8(rel, size, sha))))

    def listed_folders(self, candidates):
        """Those of the folders ``candidates`` (relative paths) that listed files lie in: one pass over the proof."""
        wanted, found = set(candidates), set()
        if not wanted:
            return found
        for rel in self._rels():
            while "/" in rel and wanted:
                rel = rel.rpartition("/")[0]
                if rel in wanted:
                    wanted.discard(rel)
                    found.add(rel)
            if not wanted:
                break
        return found

    def _rels(self):
        for v in self._dicts():
            yield from v
        for src in {(s.path, s.dir_fd) for s in self.versions if isinstance(s, _Stored)}:
            events = _scan(*src)
            for event in events or ():
                if event[0] not in ("field", "versions"):
                    yield event[1]

    # -- writing --------------------------------------------------------------------------------
    def record(self, written):
        """Add files written one by one into the output (``{rel: [size, sha256]}``) to the newest version, and
        drop them from the older ones (what they held there is gone); then :meth:`save`."""
        if not self.versions:
            self.versions.append({})
        for i, v in enumerate(self.versions):
            if isinstance(v, dict):
                for rel in written:
                    v.pop(rel, None)
                if i == 0:
                    v.update(written)
            else:
                self.versions[i] = _Stored(v.path, v.dir_fd, v.index, written, written if i == 0 else None)
        self.save()

    def _chunks(self):
        """The proof's JSON, a piece at a time (earlier versions copied from the files they were read from)."""
        yield ('{"gpumr":' + json.dumps(__version__) + ',"output":' + json.dumps(self.output)
               + ',"versions":[').encode()
        stored = {}
        for i, v in enumerate(self.versions):
            if isinstance(v, _Stored):
                stored.setdefault((v.path, v.dir_fd), {})[v.index] = v
        copies = {src: self._copy(src, wanted) for src, wanted in stored.items()}
        for i, v in enumerate(self.versions):
            yield b"," if i else b""
            if isinstance(v, dict):
                yield self._version(v.items())
            else:
                with copies[(v.path, v.dir_fd)].pop(v.index) as f:
                    f.seek(0)
                    yield from iter(lambda: f.read(_CHUNK), b"")
        yield b"]}"

    @staticmethod
    def _version(items):
        return ("{" + ",".join(f"{json.dumps(k)}:[{int(e[0])},{json.dumps(e[1])}]" for k, e in items) + "}").encode()

    def _copy(self, src, wanted):
        """Each wanted version of the proof file ``src``, written out (less its drops, plus its extras) into a
        temporary file: one pass over ``src``; ``{index: open temporary file}``. The files have no name (nothing stays
        behind, whatever ends the process); closed by the reader."""
        files = {}
        events = _scan(*src)
        if events is None:
            raise _not_a_proof(src[0], "gone while gpumr was writing the output beside it")
        for event in events:
            if event[0] in ("field", "versions"):
                continue
            i, rel, size, sha = event
            v = wanted.get(i)
            if v is None or rel in v.drop:
                continue
            if i not in files:
                files[i] = tempfile.TemporaryFile()
                files[i].write(b"{")
            else:
                files[i].write(b",")
            files[i].write(f"{json.dumps(rel)}:[{size},{json.dumps(sha)}]".encode())
        for i, v in wanted.items():
            f = files.get(i) or tempfile.TemporaryFile()
            if i not in files:
                f.write(b"{")
                files[i] = f
            if v.extra:
                f.write(b"," * (f.tell() > 1) + self._version(v.extra.items())[1:-1])
            f.write(b"}")
        return files

    def save(self):
        """Write the proof atomically (replacing only an earlier gpumr proof), streamed through a temporary file."""
        with tempfile.TemporaryFile() as f:  # (no name: nothing stays behind, whatever ends the process)
            size = 0
            for chunk in self._chunks():
                size += len(chunk)
                if size > MAX_PROOF:
                    raise GpumrError(f"{shown(self.path)}: the proof would take more than a proof's {MAX_PROOF} "
                                     "bytes: too many files in one output")
                f.write(chunk)
            f.seek(0)
            try:
                if self.dir_fd is not None:  # a name in an open folder (gpumr unpack's DIR/.gpumr)
                    with AtomicFile(self.path, dir_fd=self.dir_fd,
                                    replace=lambda old: Proof.check(old, self.dir_fd)) as out:
                        shutil.copyfileobj(f, out, _CHUNK)
                else:
                    locate(self.path).publish_from(f, Proof.check)
            except FileExistsError:
                raise _not_a_proof(self.path, "a file that appeared meanwhile") from None


def is_proof(path, dir_fd=None):
    """Whether ``path`` (in open folder ``dir_fd``) is a gpumr proof file, which gpumr may replace."""
    return Proof.check(path, dir_fd)
