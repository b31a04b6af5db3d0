"""SequenceFiles where the cluster keeps them: ``hdfs://``, ``s3://`` and other Hadoop URIs.

Goes through mrjob's own filesystem layer: :class:`mrjob.fs.hadoop.HadoopFilesystem`
(the ``hadoop fs`` command: ``hdfs://``, ``file://``, ``viewfs://`` ... any
URI the node's Hadoop knows) and :class:`mrjob.fs.s3.S3Filesystem` (boto3)
for ``s3://``, ``s3a://`` and ``s3n://``. gpumr's readers and writers work on
local files, so remote inputs are first copied into a temporary folder
(one ``hadoop fs -get`` for all of them), and a remote output is written
locally first, then uploaded under a temporary name beside its destination
and renamed, so that a reader never sees half an output. A destination that
exists is refused: gpumr never replaces what it did not make.
"""

import contextlib
import functools
import os
import posixpath
import shutil
import tempfile
import uuid

from ..errors import GpumrError

S3_SCHEMES = ("s3", "s3a", "s3n")


def is_remote(path):
    """Whether ``path`` is a URI (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and "://" in path and path.split("://", 1)[0].isalnum()


def _is_s3(uri):
    return uri.split("://", 1)[0] in S3_SCHEMES


def _hadoop_fs():
    from mrjob.fs.hadoop import HadoopFilesystem
    return HadoopFilesystem()


def _s3_fs():
    try:
        from mrjob.fs.s3 import S3Filesystem
        import boto3  # noqa: F401  (S3Filesystem needs it)
    except ImportError:
        raise GpumrError("s3:// paths need boto3: pip install boto3") from None
    return S3Filesystem()


def _s3_uri(uri):
    # mrjob's S3 layer speaks s3://; s3a:// and s3n:// name the same objects.
    return "s3://" + uri.split("://", 1)[1]


def download(uris, folder):
    """Copy files or folders at ``uris`` into ``folder``; returns the local path of each, in order."""
    local = []
    hadoop = []
    for i, uri in enumerate(uris):
        dest = os.path.join(folder, str(i))
        os.makedirs(dest)
        name = posixpath.basename(uri.rstrip("/")) or "root"
        local.append(os.path.join(dest, name))
        if _is_s3(uri):
            _s3_download(_s3_uri(uri), os.path.join(dest, name))
        else:
            hadoop.append((uri, dest))
    if hadoop:
        from subprocess import CalledProcessError
        fs = _hadoop_fs()
        for uri, dest in hadoop:  # `hadoop fs -get` takes many sources but one destination
            try:
                fs.invoke_hadoop(["fs", "-get", uri, dest])
            except CalledProcessError:
                raise GpumrError(f"{uri}: hadoop fs -get failed (no such file, or the filesystem is unreachable)") \
                    from None
    return local


def _s3_download(uri, dest):
    fs = _s3_fs()
    base = uri.rstrip("/")
    found = False
    for key_uri in fs.ls(base):
        rel = key_uri[len(base):].lstrip("/")
        target = os.path.join(dest, *rel.split("/")) if rel else dest
        if os.path.commonpath([os.path.abspath(target), os.path.abspath(dest)]) != os.path.abspath(dest):
            raise GpumrError(f"{key_uri}: key leads outside the download folder")
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        fs._get_s3_key(key_uri).download_file(target)
        found = True
    if not found:
        raise GpumrError(f"{uri}: no such object or prefix")


def upload(local, uri):
    """Put the local file or folder ``local`` at ``uri``: under a temporary name first, then renamed.

    Raises
    ------
    GpumrError
        If ``uri`` exists already, or the filesystem refuses.
    """
    from subprocess import CalledProcessError
    uri = uri.rstrip("/")
    tmp = f"{uri}._gpumr-{uuid.uuid4().hex[:12]}.tmp"
    if _is_s3(uri):
        fs = _s3_fs()
        uri, tmp = _s3_uri(uri), _s3_uri(tmp)
        if fs.exists(uri) or fs.exists(uri + "/"):
            raise GpumrError(f"{uri}: already exists (gpumr does not replace it; remove it first)")
        files = [local] if os.path.isfile(local) else [
            os.path.join(d, f) for d, _, fs_ in os.walk(local) for f in sorted(fs_)]
        moved = []
        try:
            for f in files:
                rel = "" if f == local else "/" + os.path.relpath(f, local).replace(os.sep, "/")
                fs.put(f, tmp + rel)
                moved.append(rel)
            # S3 has no rename: copy each object to its final key, then drop the temporary ones.
            client = fs.make_s3_client()
            for rel in moved:
                from mrjob.parse import parse_s3_uri
                sb, sk = parse_s3_uri(tmp + rel)
                db, dk = parse_s3_uri(uri + rel)
                client.copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk})
        finally:
            for rel in moved:
                fs.rm(tmp + rel)
        return uri
    fs = _hadoop_fs()
    try:
        if fs.invoke_hadoop(["fs", "-test", "-e", uri], ok_returncodes=[0, 1]) == 0:
            raise GpumrError(f"{uri}: already exists (gpumr does not replace it; remove it first)")
        fs.invoke_hadoop(["fs", "-mkdir", "-p", posixpath.dirname(uri)])  # put needs the parent folder
        fs.invoke_hadoop(["fs", "-put", local, tmp])
        fs.invoke_hadoop(["fs", "-mv", tmp, uri])
    except CalledProcessError as exc:
        raise GpumrError(f"{uri}: hadoop fs failed: {exc}") from None
    return uri


@contextlib.contextmanager
def local_copies(paths):
    """``paths`` with every URI replaced by a local copy, for the length of the block."""
    if not any(is_remote(p) for p in paths):
        yield list(paths)
        return
    folder = tempfile.mkdtemp(prefix="gpumr-remote-")
    try:
        uris = [p for p in paths if is_remote(p)]
        copies = dict(zip(uris, download(uris, folder)))
        yield [copies.get(p, p) for p in paths]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remote_command(func, inputs=None, output=None):
    """Wrap a ``gpumr`` command so that its input and output arguments may be URIs.

    Parameters
    ----------
    func : callable
        The command, called with the argparse namespace.
    inputs : str, optional
        The namespace attribute holding the input path (a str) or paths (a list).
    output : str, optional
        The attribute holding the output path: a URI there is written to a
        local temporary folder, then uploaded (temporary name, rename).
    """
    @functools.wraps(func)
    def run(args):
        with contextlib.ExitStack() as stack:
            if inputs is not None:
                value = getattr(args, inputs)
                single = isinstance(value, str)
                local = stack.enter_context(local_copies([value] if single else value))
                setattr(args, inputs, local[0] if single else local)
            dest = getattr(args, output) if output else None
            if dest is not None and is_remote(dest):
                folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpumr-upload-"))
                staged = os.path.join(folder, posixpath.basename(dest.rstrip("/")) or "out")
                setattr(args, output, staged)
                func(args)
                upload(staged, dest)
                print(f"uploaded to {dest}")
                return
            return func(args)
    return run
