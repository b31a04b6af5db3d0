"""URIs served by pyarrow's filesystems: S3, HDFS through libhdfs, ``file://``."""

import contextlib
import io
import os
import posixpath
import shutil

from ...errors import GpumrError, redact
from .base import HDFS_SCHEMES, READ_BUFFER, Checked, Unavailable, errors, first_line, hidden, shown


def connect(kind, authority):
    try:
        from pyarrow import fs
    except ImportError:
        raise Unavailable("pyarrow is not installed (pip install pyarrow)") from None
    try:
        if kind == "s3":
            # from_uri asks the bucket for its region and honours AWS_ENDPOINT_URL(_S3).
            return fs.FileSystem.from_uri(f"s3://{authority}")[0]
        if kind == "file":
            return fs.LocalFileSystem()
        if kind in HDFS_SCHEMES:
            host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
            if kind == "viewfs":
                return fs.HadoopFileSystem(f"viewfs://{host}", int(port or 0))
            return fs.HadoopFileSystem(f"hdfs://{host}" if host else "default", int(port or 0))
    except (OSError, ValueError) as exc:
        raise Unavailable(f"pyarrow cannot reach {kind}://{redact(authority)}: {first_line(exc)}") from None
    raise Unavailable(f"pyarrow has no filesystem for {kind}://")



class Arrow:
    """A pyarrow filesystem (S3, HDFS, viewfs)."""

    def __init__(self, fs):
        self.fs = fs
        self.publish_mode = "copy" if fs.type_name == "s3" else "rename"

    def inner(self, loc):
        if self.fs.type_name == "s3":
            return posixpath.join(loc.authority, loc.path).rstrip("/")
        return "/" + loc.path

    def stat(self, loc):
        from pyarrow.fs import FileType
        info = self.fs.get_file_info(self.inner(loc))
        if info.type == FileType.File:
            return "file", info.size
        if info.type == FileType.Directory:
            return "folder", None
        return None, None

    def exists(self, loc):
        return self.stat(loc)[0] is not None

    def list_files(self, loc):
        from pyarrow.fs import FileSelector, FileType
        inner = self.inner(loc)
        info = self.fs.get_file_info(inner)
        if info.type == FileType.File:
            return [(loc, info.size)]
        if info.type != FileType.Directory:
            raise GpumrError(f"{shown(loc)}: no such file or directory")
        found = self.fs.get_file_info(FileSelector(inner))
        return sorted(((loc.child(i.base_name), i.size) for i in found
                       if i.type == FileType.File and not hidden(i.base_name)), key=lambda e: e[0].text)

    def entries(self, loc):
        from pyarrow.fs import FileSelector, FileType
        inner = self.inner(loc)
        found = self.fs.get_file_info(FileSelector(inner, recursive=True))
        return sorted((i.path[len(inner) + 1:], "file" if i.type == FileType.File else "folder",
                       i.size if i.type == FileType.File else None) for i in found
                      if i.type in (FileType.File, FileType.Directory))

    def remove_empty_folder(self, loc):
        if self.stat(loc)[0] is None:
            return True
        if self.entries(loc):
            return False
        self.delete(loc)
        return True

    @contextlib.contextmanager
    def open_input(self, loc, buffer_size, follow):
        with errors(loc):
            raw = self.fs.open_input_file(self.inner(loc))
            size = raw.size()
        with io.BufferedReader(Checked(raw, loc, size), buffer_size) as f:  # each refill is one ranged read
            yield f

    def create(self, loc):
        # Byte for byte: pyarrow's default compresses by the name's suffix (.gz, .bz2, .zst).
        return self.fs.open_output_stream(self.inner(loc), compression=None)

    def make_folder(self, loc):
        if self.fs.type_name != "s3":
            self.fs.create_dir(self.inner(loc), recursive=True)

    def upload(self, local, loc):
        folders = self.fs.type_name != "s3"  # S3 has none to make
        made = set()
        if os.path.isfile(local):
            files = [("", local)]
        else:
            files = [("/".join(os.path.relpath(os.path.join(d, f), local).split(os.sep)), os.path.join(d, f))
                     for d, _, names in os.walk(local) for f in names]
            if folders:
                self.make_folder(loc)
                made.add(loc.text)
        for rel, path in sorted(files):
            target = loc.child(rel)
            up = target.parent()
            if rel and folders and up.text not in made:
                self.make_folder(up)
                made.add(up.text)
            with open(path, "rb") as src, self.create(target) as dst:
                shutil.copyfileobj(src, dst, READ_BUFFER)

    def copy(self, src, dst):
        self.fs.copy_file(self.inner(src), dst.impl.inner(dst))

    def move(self, src, dst):
        self.fs.move(self.inner(src), dst.impl.inner(dst))

    def delete(self, loc):
        kind, _ = self.stat(loc)
        if kind == "file":
            self.fs.delete_file(self.inner(loc))
        elif kind == "folder":
            self.fs.delete_dir(self.inner(loc))


