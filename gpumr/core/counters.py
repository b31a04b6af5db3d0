"""The gpumr counters: their names, and the one-line summary every engine prints."""

GROUP = "gpumr"
ON_CPU, ON_GPU, FALLBACKS, BAD = "records on CPU", "records on GPU", "GPU fallbacks", "bad records"
CPU_MS, GPU_MS = "CPU milliseconds", "GPU milliseconds"
LOST, LOST_BYTES = "lost stretches", "lost bytes"


def outcome(value):
    """The counter one record's output value adds one to: :data:`BAD` for an error, else :data:`ON_CPU` or
    :data:`ON_GPU` by its ``device``.

    Examples
    --------
    >>> outcome({"faces": [], "device": "cpu"}), outcome({"error": "empty value"}), outcome({"device": "0"})
    ('records on CPU', 'bad records', 'records on GPU')
    """
    if "error" in value:
        return BAD
    return ON_CPU if value["device"] == "cpu" else ON_GPU


def total(counters, group=GROUP):
    """Sum the ``group`` counters over the steps of an mrjob runner's ``counters()`` list."""
    out = {}
    for step in counters:
        for name, n in step.get(group, {}).items():
            out[name] = out.get(name, 0) + n
    return out


#: Bad records the summary names (then a count of the rest).
NAMED = 3


def summary(counts, seconds=None, bad=()):
    """One line: how many records ran on which device, fell back, or were bad (the first few named); what input was
    lost.

    Parameters
    ----------
    counts : dict
        Counter name -> value (group ``gpumr``), as :func:`total` gives.
    seconds : float, optional
        Wall time of the run, for a records/s figure.
    bad : list of (str, str), optional
        The first bad records' keys and reasons.

    Examples
    --------
    >>> summary({ON_CPU: 10, BAD: 2}, bad=[("a.jpg", "empty value"), ("b.jpg", "not a decodable image")])
    '12 records: 10 on CPU, 0 on GPU, 2 bad (a.jpg: empty value; b.jpg: not a decodable image)'
    """
    cpu, gpu, n_bad, fb = (counts.get(k, 0) for k in (ON_CPU, ON_GPU, BAD, FALLBACKS))
    named = list(bad or ())
    records = cpu + gpu + n_bad
    parts = [f"{records} record{'s' if records != 1 else ''}: {cpu} on CPU, {gpu} on GPU"]
    if fb:
        parts.append(f"{fb} GPU fallback{'s' if fb != 1 else ''}")
    parts.append(f"{n_bad} bad" + _named(named, n_bad))
    lost = counts.get(LOST, 0)
    if lost:
        parts.append(f"{lost} lost stretch{'es' if lost != 1 else ''} of input "
                     f"({counts.get(LOST_BYTES, 0)} bytes unreadable)")
    line = ", ".join(parts)
    if seconds is not None:
        line += f" in {seconds:.1f} s ({records / max(seconds, 1e-9):.1f} records/s)"
    return line


def _named(bad, count):
    """`` (key: reason; ...; and N more)`` for the first :data:`NAMED` bad records, or ""."""
    if not bad:
        return ""
    shown = "; ".join(f"{key}: {reason}" for key, reason in bad[:NAMED])
    rest = count - min(len(bad), NAMED)
    return f" ({shown}{f'; and {rest} more' if rest > 0 else ''})"
