"""S3 keys pyarrow cannot name (an empty segment, ``a//b``), served by boto3 (the ``s3`` extra)."""

import contextlib
import io
import os

from ...errors import GpumrError
from .base import Checked, errors, hidden, shown

# One client per bucket in this process.
_CLIENTS = {}


class Boto:
    """S3 objects whose keys pyarrow cannot name (an empty path component, ``a//b.seq``), through boto3."""

    publish_mode = "copy"

    def __init__(self, client, bucket):
        self.client, self.bucket = client, bucket

    @classmethod
    def get(cls, loc):
        key = ("boto", loc.authority)
        impl = _CLIENTS.get(key)
        if impl is None:
            try:
                import boto3
            except ImportError:
                raise GpumrError(f"{shown(loc)}: an S3 key with an empty path component ('//'), which pyarrow "
                                 "cannot name; pip install 'gpumr[s3]' (boto3) to reach it, or give the object another "
                                 "key") from None
            impl = _CLIENTS[key] = cls(boto3.client("s3"), loc.authority)
        return impl

    def inner(self, loc):
        return loc.path

    def stat(self, loc):
        from botocore.exceptions import ClientError
        key = loc.path.rstrip("/")
        try:
            return "file", self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
        except ClientError:
            pass
        found = self.client.list_objects_v2(Bucket=self.bucket, Prefix=key + "/", MaxKeys=1)
        return ("folder", None) if found.get("KeyCount") else (None, None)

    def exists(self, loc):
        return self.stat(loc)[0] is not None

    def _keys(self, loc):
        prefix = loc.path.rstrip("/") + "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [(obj["Key"][len(prefix):], obj["Size"]) for page in pages for obj in page.get("Contents", ())]

    def list_files(self, loc):
        kind, size = self.stat(loc)
        if kind == "file":
            return [(loc, size)]
        if kind is None:
            raise GpumrError(f"{shown(loc)}: no such file or directory")
        return sorted(((loc.child(rel), size) for rel, size in self._keys(loc)
                       if "/" not in rel and rel and not hidden(rel)), key=lambda e: e[0].text)

    def entries(self, loc):
        files = {rel: size for rel, size in self._keys(loc) if rel}
        folders = {rel.rsplit("/", i)[0] for rel in files for i in range(1, rel.count("/") + 1)}
        return sorted([(rel, "file", size) for rel, size in files.items()]
                      + [(rel, "folder", None) for rel in folders - set(files)])

    def remove_empty_folder(self, loc):
        return not self._keys(loc)

    @contextlib.contextmanager
    def open_input(self, loc, buffer_size, follow):
        with errors(loc):
            kind, size = self.stat(loc)
            if kind != "file":
                raise GpumrError(f"{shown(loc)}: no such file")
        with io.BufferedReader(Checked(BotoRanges(self, loc.path), loc, size), buffer_size) as f:
            yield f

    def create(self, loc):
        return BotoUpload(self, loc.path)

    def make_folder(self, loc):
        pass

    def upload(self, local, loc):
        if os.path.isfile(local):
            self.client.upload_file(local, self.bucket, loc.path)
            return
        for d, _, names in os.walk(local):
            for n in names:
                rel = "/".join(os.path.relpath(os.path.join(d, n), local).split(os.sep))
                self.client.upload_file(os.path.join(d, n), self.bucket, f"{loc.path.rstrip('/')}/{rel}")

    def copy(self, src, dst):
        self.client.copy_object(Bucket=self.bucket, Key=dst.path, CopySource={"Bucket": self.bucket, "Key": src.path})

    def move(self, src, dst):
        self.copy(src, dst)
        self.client.delete_object(Bucket=self.bucket, Key=src.path)

    def delete(self, loc):
        kind, _ = self.stat(loc)
        if kind == "file":
            self.client.delete_object(Bucket=self.bucket, Key=loc.path)
        elif kind == "folder":
            for rel, _ in self._keys(loc):
                self.client.delete_object(Bucket=self.bucket, Key=f"{loc.path.rstrip('/')}/{rel}")


class BotoRanges:
    """``read_at`` through ranged GETs (what :class:`Checked` needs)."""

    def __init__(self, impl, key):
        self.impl, self.key = impl, key

    def read_at(self, n, pos):
        try:
            got = self.impl.client.get_object(Bucket=self.impl.bucket, Key=self.key, Range=f"bytes={pos}-{pos + n - 1}")
        except Exception as exc:  # noqa: BLE001 (botocore's ClientError and connection errors, as the layer's OSError)
            raise OSError(str(exc)) from None
        return got["Body"].read()

    def close(self):
        pass


class BotoUpload(io.BytesIO):
    """A stream that becomes one object when closed (whole, as S3 makes every object)."""

    def __init__(self, impl, key):
        super().__init__()
        self.impl, self.key = impl, key

    def close(self):
        if not self.closed:
            self.impl.client.put_object(Bucket=self.impl.bucket, Key=self.key, Body=self.getvalue())
        super().close()


