"""A real S3-protocol server on loopback for the tests: moto's standalone server (``moto[server]``).

:class:`S3Server` starts it on a free port of 127.0.0.1 and says, in
:attr:`S3Server.env`, what every process needs to use it: fake credentials
and the endpoint (``AWS_ENDPOINT_URL``, which pyarrow's S3 filesystem and
boto3 both honour). :class:`GatedProxy` is a TCP relay in front of it that
can hold the request stream still, so that a test can interrupt an upload
or a publish at a known point.
"""

import socket
import threading

#: The bucket every test uses.
BUCKET = "gpumr-tests"


class S3Server:
    """moto's S3 server on ``127.0.0.1:<free port>`` (a thread of this process)."""

    def __init__(self):
        import logging

        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        #: What a process needs to reach the server (no real AWS account is ever involved).
        self.env = {"AWS_ACCESS_KEY_ID": "gpumr-test", "AWS_SECRET_ACCESS_KEY": "gpumr-test",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint}
        self.client().create_bucket(Bucket=BUCKET)

    def client(self, endpoint=None):
        """A boto3 S3 client of the server (or of ``endpoint``, e.g. a proxy in front of it)."""
        import boto3
        return boto3.client("s3", endpoint_url=endpoint or self.endpoint, region_name="us-east-1",
                            aws_access_key_id="gpumr-test", aws_secret_access_key="gpumr-test")

    def keys(self, prefix=""):
        """Every object key under ``prefix`` in :data:`BUCKET`, hidden ones and "folder" markers too."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))

    def put(self, key, data):
        self.client().put_object(Bucket=BUCKET, Key=key, Body=data)

    def get(self, key):
        return self.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def stop(self):
        self._server.stop()


class GatedProxy:
    """A TCP relay on a free loopback port to ``target`` (``host, port``) that can hold requests still.

    Bytes from clients to the server are counted in :attr:`sent`; once more
    than :attr:`hold_after` have gone, or when the ``hold_on[1]``-th chunk
    holding the bytes ``hold_on[0]`` comes (e.g. the second request carrying
    an ``x-amz-copy-source`` header: an S3 copy), the relay stops forwarding
    (the client blocks mid-request) and sets :attr:`holding`, until :meth:`release`.
    """

    def __init__(self, target, hold_after=float("inf"), hold_on=None):
        self.target = target
        self.hold_after = hold_after
        self.hold_on = hold_on
        self.seen = 0
        self.sent = 0
        #: The first line of every request that went through (``b"PUT /bucket/key HTTP/1.1"``), as far as seen.
        self.requests = []
        self.holding = threading.Event()
        self._go = threading.Event()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self):
        self._go.set()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src, dst, upstream):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    with self._lock:
                        self.sent += len(data)
                        if data[:4] in (b"GET ", b"PUT ", b"POST", b"HEAD", b"DELE"):
                            self.requests.append(data.split(b"\r\n", 1)[0])
                        self.seen += bool(self.hold_on) and self.hold_on[0] in data
                        over = self.sent > self.hold_after or (bool(self.hold_on) and self.seen >= self.hold_on[1])
                    if over and not self._go.is_set():
                        self.holding.set()
                        self._go.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self._go.set()
        self._listener.close()
