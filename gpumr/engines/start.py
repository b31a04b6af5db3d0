"""How every framework process of a job starts: its folder, import path, environment, logs and listeners.

No framework starts at its defaults: each process runs in the job's private folder, never imports from the current
folder, gets an allow-listed environment (secrets never written to disk), logs into the job's folder, and listens
only for the job's own connections.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     start = Start.make(folder)
...     env = start.environment({"AWS_SECRET_ACCESS_KEY": "x", "LANG": "C.UTF-8", "MY_TOKEN": "t"}, secrets=False)
...     sorted(k for k in env if not k.startswith(("PYTHON", "TMP")))
['LANG']
"""

import contextlib
import os
import re
import secrets as _secrets
import sys
from dataclasses import dataclass

#: Variables every framework process gets, where they are set.
ALLOWED = frozenset((
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "VIRTUAL_ENV", "CONDA_PREFIX",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "CLASSPATH",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "KRB5CCNAME",
    "CI",
))
#: Prefixes of variables every framework process gets: locales, gpumr's own, the GPU stack's, the numeric
#: libraries' thread settings, the frameworks' own configuration, cloud regions and profiles (not keys).
ALLOWED_PREFIXES = ("LC_", "GPUMR_", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "NUMBA_", "NUMEXPR_",
                    "JAVA_", "HADOOP_", "YARN_", "SPARK_", "PYSPARK_", "DASK_", "FLINK_", "RADICAL_", "RP_",
                    "MRJOB_", "ARROW_", "AWS_", "SLURM_", "PBS_")
#: Names that hold a secret, whatever their prefix: handed on only where ``secrets`` is true.
SECRET = re.compile(r"SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|(^|_)KEY(_|$)", re.I)
#: The uids of people's accounts where ``/etc/login.defs`` does not say (its ``UID_MIN``, ``UID_MAX``); above
#: them, system accounts of packages (Debian's 60000-64999: ``slurm``'s daemons) and ``nobody``.
UID_MIN, UID_MAX = 1000, 60000


def environment(base=None, secrets=True, extra=None, folder=None):
    """The environment a framework process starts with: ``base`` (default ``os.environ``) cut to the allow-list.

    Parameters
    ----------
    base : mapping, optional
    secrets : bool
        Whether credentials and tokens (:data:`SECRET`) are handed on.
    extra : mapping, optional
        Variables the engine adds (a value None: left out).
    folder : str, optional
        The job's private folder: ``TMPDIR`` there.

    Examples
    --------
    >>> env = environment({"PATH": "/bin", "PYTHONPATH": ":/opt/lib:.", "OTHER": "1"})
    >>> env["PATH"], env["PYTHONPATH"], env["PYTHONSAFEPATH"], "OTHER" in env
    ('/bin', '/opt/lib', '1', False)
    """
    base = os.environ if base is None else base
    env = {}
    for name, value in base.items():
        if name not in ALLOWED and not name.startswith(ALLOWED_PREFIXES):
            continue
        if not secrets and (SECRET.search(name) or (name.lower().endswith("_proxy") and "@" in value)):
            continue
        env[name] = value
    if "PYTHONPATH" in env:  # (an empty or relative entry is the current folder, wherever the process works)
        safe = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and os.path.isabs(p)]
        env["PYTHONPATH"] = os.pathsep.join(safe)
        if not safe:
            del env["PYTHONPATH"]
    env["PYTHONSAFEPATH"] = "1"
    env.pop("PYTHONSTARTUP", None)
    if folder is not None:
        env["TMPDIR"] = folder
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def python_argv(module):
    """The command line that runs ``python -m module`` in this interpreter without the current folder on its path.

    Examples
    --------
    >>> python_argv("gpumr.engines.radical.task")[-2:]
    ['-m', 'gpumr.engines.radical.task']
    """
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", "import runpy, sys; del sys.path[0]; sys.argv[0] = 'm'; "
                                  f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"]


def safe_sys_path(path=None, cwd=None):
    """``sys.path`` without the current folder (``''``, ``.``, a relative entry, or the folder itself).

    Examples
    --------
    >>> safe_sys_path(["", "/usr/lib/python3", ".", "/home/me/work"], cwd="/home/me/work")
    ['/usr/lib/python3']
    """
    path = sys.path if path is None else path
    cwd = os.path.realpath(cwd or os.getcwd())
    return [p for p in path if p and os.path.isabs(p) and os.path.realpath(p) != cwd]


def people(defs="/etc/login.defs"):
    """``range`` of the uids of people's accounts: ``UID_MIN`` to ``UID_MAX`` of ``defs``, else 1000 to 60000.

    Examples
    --------
    >>> people("/nonexistent")
    range(1000, 60001)
    """
    found = {"UID_MIN": UID_MIN, "UID_MAX": UID_MAX}
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(defs, encoding="utf-8") as f:
            for line in f:
                words = line.partition("#")[0].split()
                if len(words) == 2 and words[0] in found and words[1].isdigit():
                    found[words[0]] = int(words[1])
    return range(found["UID_MIN"], found["UID_MAX"] + 1)


def other_users():
    """The uids of people other than this process's user with processes on this node (:func:`people`: root, system
    and daemons' accounts aside); a framework with open ports is refused where any is.
    """
    me, found, accounts = os.getuid(), set(), people()
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            uid = os.stat(f"/proc/{name}").st_uid
            if uid in accounts and uid != me:
                found.add(uid)
    return found


@dataclass(frozen=True)
class Start:
    """How one job's framework processes start (see the module's rules); made once per job by the launcher.

    Attributes
    ----------
    folder : str
        The job's private folder: every framework process works here.
    logs : str
        Where the frameworks' own logs go (0700).
    keep_logs : bool
        The user named ``logs`` (``--framework-logs``): kept after the job.
    debug : bool
        ``--debug``: the frameworks log more.
    secret : str
        A per-job random token for listeners that take one; never on a command line or on disk.
    open_ports_ok : bool
        ``--allow-open-ports``: the user accepts a framework's unauthenticated ports on a shared node."""

    folder: str
    logs: str
    keep_logs: bool = False
    debug: bool = False
    secret: str = ""
    open_ports_ok: bool = False

    @classmethod
    def make(cls, folder, debug=False, logs=None, open_ports_ok=False):
        """The job's :class:`Start`: logs in ``logs`` if given (made 0700 if new), else in ``folder/logs``."""
        from ..trusted import ensure_folder
        keep = logs is not None
        logs = os.path.abspath(logs) if keep else os.path.join(folder, "logs")
        ensure_folder(logs, "--framework-logs" if keep else "the job's log folder")
        return cls(folder, logs, keep, debug, _secrets.token_urlsafe(32), open_ports_ok)

    def environment(self, base=None, secrets=True, extra=None):
        """:func:`environment` for this job's processes (``TMPDIR`` in its folder)."""
        return environment(base, secrets, extra, self.folder)

    def popen(self, secrets=True, extra=None):
        """Keyword arguments of :class:`subprocess.Popen` for a process this job starts itself."""
        return {"cwd": self.folder, "env": self.environment(secrets=secrets, extra=extra)}

    @contextlib.contextmanager
    def inherited(self, secrets=True, extra=None, chdir=True):
        """For the block, this process's environment, ``sys.path`` and (``chdir``) working folder are the ones a
        framework process must start with; then as they were."""
        saved_env, saved_path, saved_cwd = dict(os.environ), list(sys.path), os.getcwd()
        env = self.environment(secrets=secrets, extra=extra)
        try:
            os.environ.clear()
            os.environ.update(env)
            sys.path[:] = safe_sys_path(saved_path, saved_cwd)
            if chdir:
                os.chdir(self.folder)
            yield env
        finally:
            if chdir:
                os.chdir(saved_cwd)
            sys.path[:] = saved_path
            os.environ.clear()
            os.environ.update(saved_env)

    def require_private_ports(self, engine, what):
        """Refuse, in one line, a framework whose ports (``what``) take anyone's connections, on a node other people
        use (:func:`other_users`), unless the user accepted it (``--allow-open-ports``)."""
        if self.open_ports_ok:
            return
        others = other_users()
        if others:
            from ..errors import GpumrError
            raise GpumrError(f"--engine {engine}: {what} take anyone's connections, so any of the {len(others)} other "
                             f"user(s) with processes on this node could run code as you while the job runs; run it "
                             f"where only you work, or accept that with --allow-open-ports")

    def log_file(self, name):
        """The path of a framework's log file ``name`` in :attr:`logs`."""
        return os.path.join(self.logs, name)
