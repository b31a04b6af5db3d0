"""Local paths, served by the operating system (never through a link where the rule says so)."""

import contextlib
import os
import shutil
import stat as _stat

from ...errors import GpumrError
from .base import READ_FLAGS, hidden, kind, shown


class Local:
    """Local paths, through the operating system."""

    publish_mode = "rename"

    def inner(self, loc):
        return loc.local

    def stat(self, loc):
        try:
            st = os.stat(loc.local)
        except FileNotFoundError:
            return None, None
        if _stat.S_ISREG(st.st_mode):
            return "file", st.st_size
        if _stat.S_ISDIR(st.st_mode):
            return "folder", None
        return kind(st.st_mode), None

    def exists(self, loc):
        return os.path.lexists(loc.local)

    def list_files(self, loc):
        p = loc.local
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if not hidden(n))
            found = [loc.child(n) for n in names if not os.path.isdir(os.path.join(p, n))]
        elif os.path.lexists(p):
            found = [loc]
        else:
            raise GpumrError(f"{shown(loc)}: no such file or directory")
        out = []
        for f in found:
            try:
                st = os.stat(f.local)
            except OSError as exc:
                raise GpumrError(f"{shown(f)}: {exc.strerror}") from None
            if not _stat.S_ISREG(st.st_mode):
                raise GpumrError(f"{shown(f)}: {kind(st.st_mode)}, not a regular file; only files are read "
                                 "(copy a stream to a file first)")
            out.append((f, st.st_size))
        return out

    def entries(self, loc):
        out, stack = [], [""]
        top = loc.local
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(top, *rel.split("/")) if rel else top) as it:
                found = sorted(it, key=lambda e: e.name)
            folders = []
            for e in found:
                sub = f"{rel}/{e.name}" if rel else e.name
                st = e.stat(follow_symlinks=False)
                what = ("file" if _stat.S_ISREG(st.st_mode) else "folder" if _stat.S_ISDIR(st.st_mode)
                        else kind(st.st_mode))
                out.append((sub, what, st.st_size))
                if what == "folder":
                    folders.append(sub)
            stack.extend(reversed(folders))
        return out

    def remove_empty_folder(self, loc):
        try:
            os.rmdir(loc.local)
        except FileNotFoundError:
            return True
        except OSError:
            return False  # something else is in it
        return True

    @contextlib.contextmanager
    def open_input(self, loc, buffer_size, follow):
        try:
            fd = os.open(loc.local, READ_FLAGS if not follow else READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            raise GpumrError(f"{shown(loc)}: {exc.strerror}") from None
        try:
            mode = os.fstat(fd).st_mode
            if not _stat.S_ISREG(mode):
                raise GpumrError(f"{shown(loc)}: {kind(mode)}, not a regular file")
            os.set_blocking(fd, True)
            f = os.fdopen(fd, "rb", buffering=min(buffer_size, 1 << 20))
        except BaseException:
            os.close(fd)
            raise
        with f:
            yield f

    def create(self, loc):
        return open(loc.local, "wb")

    def make_folder(self, loc):
        os.makedirs(loc.local, exist_ok=True)

    def upload(self, local, loc):
        if os.path.isdir(local):
            shutil.copytree(local, loc.local, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copyfile(local, loc.local)

    def copy(self, src, dst):
        shutil.copyfile(src.local, dst.local)

    def move(self, src, dst):
        if os.path.lexists(dst.local):
            raise FileExistsError(0, "already exists", dst.local)
        os.rename(src.local, dst.local)

    def delete(self, loc):
        p = loc.local
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)


LOCAL = Local()


