"""gpumr's packaged mrjob configs (``conf/``, installed as ``gpumr.conf``), and the EMR config a job uses when it
names none."""

import json
import os
import re

from ...errors import GpumrError, printable

#: The packaged EMR config: what ``--engine emr`` uses without ``-c``.
EMR_CONF = "mrjob.emr.conf"
#: The instance type of a ``--device cpu`` cluster's core and task nodes, in place of the packaged config's GPU
#: ones (8 vCPUs and 32 GiB, as a g4dn.2xlarge has, without its GPU).
CPU_INSTANCE_TYPE = "m5.2xlarge"
# Paths the packaged configs give as placeholders: a file of conf/, and the package the bootstrap installs.
_CONF_FILE = re.compile(r"(?<![\w/.-])conf/([\w.-]+)#")
_PACKAGE = re.compile(r"(?<![\w/.-])dist/gpumr-[\w.+-]+?(?:\.tar\.gz|\.whl)#")


def folder():
    """The installed ``gpumr.conf`` folder."""
    import gpumr.conf
    return os.path.dirname(os.path.abspath(gpumr.conf.__file__))


def packaged():
    """The packaged files' names, sorted."""
    return sorted(n for n in os.listdir(folder()) if not n.startswith(("_", ".")) and not n.endswith(".py"))


def path_of(name):
    """The absolute path of the packaged file ``name``, or a :class:`GpumrError` naming the files there are."""
    if name not in packaged():
        raise GpumrError(f"no packaged file {printable(name)!r}: choose one of {', '.join(packaged())}")
    return os.path.join(folder(), name)


def localised(text, package=None):
    """``text`` of a packaged config with its placeholder paths made absolute.

    Parameters
    ----------
    text : str
        The config as packaged.
    package : str, optional
        The gpumr wheel the bootstrap installs; required when the config names one.

    Returns
    -------
    str
        The config with ``conf/X#`` naming the installed file and the package named by its absolute path.

    Examples
    --------
    >>> import tempfile
    >>> wheel = tempfile.NamedTemporaryFile(suffix=".whl")
    >>> localised("- sudo bash conf/boot.sh# dist/gpumr-0.1.0-py3-none-any.whl#", wheel.name).split()[-1] == wheel.name + "#"
    True
    """
    def one(path):
        if re.search(r"[\s'\"]", path):
            raise GpumrError(f"{printable(path)}: mrjob cannot name a file whose path holds a space or a quote "
                             "in a bootstrap line; move it")
        return path
    text = _CONF_FILE.sub(lambda m: one(os.path.join(folder(), m.group(1))) + "#", text)
    if _PACKAGE.search(text):
        if not package:
            raise GpumrError("--package is required: the gpumr wheel the bootstrap installs on every node (the one "
                             "you installed gpumr from; make dist builds one in dist/)")
        if not os.path.isfile(package):
            raise GpumrError(f"--package {printable(package)}: no such file (make dist builds the wheel in dist/)")
        text = _PACKAGE.sub(lambda m: one(os.path.abspath(package)) + "#", text)
    return text


def named_configs(extra):
    """The configs mrjob's options ``extra`` name (``-c FILE``, ``--conf-path FILE``), in order; ``[]`` for none.

    Examples
    --------
    >>> named_configs(["--jobconf", "a=b", "-c", "emr.conf", "--conf-path=more.conf"])
    ['emr.conf', 'more.conf']
    """
    names = []
    for i, a in enumerate(extra):
        if a in ("-c", "--conf-path") and i + 1 < len(extra):
            names.append(extra[i + 1])
        elif a.startswith("--conf-path="):
            names.append(a.partition("=")[2])
        elif a.startswith("-c") and not a.startswith("--") and len(a) > 2:
            names.append(a[2:])
    return names


def emr_options(job_folder, device):
    """mrjob's options for an EMR job that names no config: gpumr's packaged one, then mrjob's own default config
    (``$MRJOB_CONF``, ``~/.mrjob.conf``) where there is one, whose settings win.

    Returns
    -------
    (list of str, list of str)
        The options, and the configs they name (for the plan's description)."""
    import yaml
    from mrjob.conf import find_mrjob_conf

    from .bundle import build_wheel
    wheel = build_wheel(job_folder)
    with open(path_of(EMR_CONF), encoding="utf-8") as f:
        text = localised(f.read(), wheel)
    copy = os.path.join(job_folder, EMR_CONF)
    with open(copy, "x", encoding="utf-8") as f:
        f.write(text)
    args, used = ["-c", copy], [f"gpumr's packaged {EMR_CONF}"]
    own = find_mrjob_conf()
    if own:
        args += ["-c", own]
        used.append(own)
    if device == "cpu":
        groups = yaml.safe_load(text)["runners"]["emr"]["instance_groups"]
        for group in groups:
            if group["InstanceRole"] != "MASTER":
                group["InstanceType"] = CPU_INSTANCE_TYPE
        args += ["--instance-groups", json.dumps(groups)]
    return args, used
