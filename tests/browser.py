"""Headless Chromium for the documentation's tests: what a reader's browser shows, checked and photographed.

:func:`find` names the browser (or says why there is none); :func:`shown_errors`
opens every page of a built site in one Chromium run and returns, per page,
the error text the page *shows* (furo's stylesheet draws its "ERROR: Adding a
table of contents..." box with a CSS ``::before`` rule, so it is in no HTML
file: only a browser that applies the styles sees it); :func:`screenshot`
takes a PNG of a page.

Chromium runs as the tests do everywhere (often root, in a container): with
``--no-sandbox`` and a fresh, empty profile folder, and with nothing that
reaches the network (``--disable-background-networking``, no component
updates, no sync).
"""

import json
import os
import shutil
import subprocess
import tempfile

#: The names Debian and other distributions give the browser's command.
COMMANDS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1"]


def find():
    """``(command, None)`` for the first Chromium on ``PATH``, or ``(None, why)``."""
    for name in COMMANDS:
        path = shutil.which(name)
        if path:
            return path, None
    return None, f"no headless Chromium ({' / '.join(COMMANDS)} on PATH; apt-get install -y chromium)"


def _run(command, args, timeout):
    with tempfile.TemporaryDirectory(prefix="gpumr-chromium-") as profile:
        return subprocess.run([command, *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


# Loads each page in an iframe (one at a time, at a desktop width) and collects what the styles draw:
# the content of every ::before / ::after that says ERROR, and docutils' own error nodes; and the page's height.
_HARNESS = """<!DOCTYPE html><html><body><pre id="gpumr-result"></pre><script>
const pages = %s;
const found = {};
let i = 0;
function check(doc, win) {
  const seen = [];
  for (const el of doc.querySelectorAll("*")) {
    for (const where of ["::before", "::after"]) {
      const c = win.getComputedStyle(el, where).content;
      if (c && c !== "none" && c !== "normal" && /ERROR/.test(c)) seen.push(c.slice(0, 200));
    }
  }
  for (const el of doc.querySelectorAll(".system-message, .problematic")) seen.push(el.textContent.slice(0, 200));
  return seen;
}
function next() {
  if (i >= pages.length) {
    document.getElementById("gpumr-result").textContent = "RESULT" + JSON.stringify(found);
    return;
  }
  const frame = document.createElement("iframe");
  frame.style.width = "1280px";
  frame.style.height = "900px";
  frame.onload = () => {
    try {
      const doc = frame.contentDocument;
      found[pages[i]] = {errors: check(doc, frame.contentWindow),
                         height: Math.max(doc.documentElement.scrollHeight, doc.body.scrollHeight)};
    }
    catch (e) { found[pages[i]] = {errors: ["cannot inspect the page: " + e], height: null}; }
    frame.remove();
    i++;
    next();
  };
  frame.src = pages[i];
  document.body.appendChild(frame);
}
next();
</script></body></html>
"""


def pages_of(site):
    """Every HTML page of a built site (paths relative to it, ``/``-separated), search and index pages aside."""
    out = []
    for folder, dirs, files in os.walk(site):
        dirs[:] = [d for d in dirs if not d.startswith("_")]
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), site).replace(os.sep, "/")
            if name.endswith(".html") and rel not in ("search.html", "genindex.html", "py-modindex.html"):
                out.append(rel)
    return sorted(out)


def inspect_pages(site, command, timeout=300):
    """``{page: {"errors": [error text shown], "height": pixels}}`` for every page of the built site ``site``.

    Each page as Chromium renders it in a 1280-pixel-wide window: the error
    texts its styles draw (empty when none), and its whole height.

    Parameters
    ----------
    site : str
        The folder ``sphinx-build -b html`` wrote.
    command : str
        The Chromium command (:func:`find`).
    """
    pages = pages_of(site)
    harness = os.path.join(site, "_gpumr_check.html")
    with open(harness, "w", encoding="utf-8") as f:
        f.write(_HARNESS % json.dumps(pages))
    try:
        budget = 5000 + 1000 * len(pages)
        r = _run(command, ["--allow-file-access-from-files", f"--virtual-time-budget={budget}", "--dump-dom",
                           "file://" + harness], timeout)
    finally:
        os.remove(harness)
    start = r.stdout.find("RESULT")
    if start < 0:
        raise RuntimeError(f"Chromium gave no result (status {r.returncode}): {r.stderr[-2000:]}")
    import html
    text = html.unescape(r.stdout[start + len("RESULT"):].split("</pre>", 1)[0])
    return json.loads(text)


def shown_errors(site, command, timeout=300):
    """``{page: [error text shown]}`` for every page of the built site ``site``, as Chromium renders it
    (:func:`inspect_pages`)."""
    return {page: seen["errors"] for page, seen in inspect_pages(site, command, timeout).items()}


def screenshot(url, png, command, width=1280, height=2000, timeout=120):
    """A PNG of ``url`` (``file://...`` or ``http://...``) as a ``width`` x ``height`` window shows it."""
    r = _run(command, [f"--window-size={width},{height}", f"--screenshot={png}", "--virtual-time-budget=3000",
                       url], timeout)
    if not os.path.isfile(png):
        raise RuntimeError(f"Chromium wrote no screenshot of {url} (status {r.returncode}): {r.stderr[-2000:]}")
    return png
