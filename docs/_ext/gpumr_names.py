"""gpumr's built-in workloads and engines, named on every page from the code's own tables.

So that no page names three engines where there are eight, the names come
from :data:`gpumr.workloads.BUILT_IN` and :data:`gpumr.engines.NAMES`, in
the order ``gpumr run --help`` lists them:

``|workloads|``, ``|engines|``
    Substitutions on every page: ``faces``, ``backproject``... in one
    sentence; ``|n-workloads|`` and ``|n-engines|`` say how many, in words.

``.. gpumr-workloads::``
    A list: each built-in workload's name, with the summary ``gpumr run
    --help`` gives it and a link to its page (``workloads/NAME``).

``.. gpumr-engines::``
    A list: each engine's name, with the help ``gpumr run --help`` gives it,
    and a link to its how-to page where there is one (``how-to/NAME``).
"""

import os

from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def workloads():
    """``[(name, summary)]`` of the built-in workloads, in ``gpumr run --help``'s order."""
    from gpumr.workloads import BUILT_IN, find, load
    return [(name, load(find(name)).summary) for name in BUILT_IN]


def engines():
    """``[(name, help)]`` of the engines, in ``--engine``'s order."""
    from gpumr import engines
    return [(name, engines.get(name).help) for name in engines.NAMES]


def in_words(n):
    return WORDS[n] if n < len(WORDS) else str(n)


def sentence(names):
    """``faces``, ``backproject`` and ``blobs``: names as literals in a sentence."""
    names = [f"``{n}``" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def prolog():
    """The substitutions every page gets (``rst_prolog``)."""
    w = [n for n, _ in workloads()]
    e = [n for n, _ in engines()]
    return "\n".join([f".. |workloads| replace:: {sentence(w)}", f".. |engines| replace:: {sentence(e)}",
                      f".. |n-workloads| replace:: {in_words(len(w))}",
                      f".. |n-engines| replace:: {in_words(len(e))}", ""])


def _rst_text(text):
    """Plain help text as reStructuredText inline content (literal characters escaped)."""
    text = " ".join(text.split()).replace("\\", "\\\\")
    for ch in "*`|_":
        text = text.replace(ch, "\\" + ch)
    return text


class _List(SphinxDirective):
    def parse(self, lines):
        from docutils import nodes
        node = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines + [""], source=self.get_source_info()[0]), node)
        return node.children


class WorkloadsDirective(_List):
    """``.. gpumr-workloads::``: the built-in workloads, each with its summary and a link to its page."""

    def run(self):
        self.env.note_dependency(__file__)
        return self.parse([f"* ``{name}``: {_rst_text(summary)} (:doc:`/workloads/{name}`)"
                           for name, summary in workloads()])


class EnginesDirective(_List):
    """``.. gpumr-engines::``: the engines, each with its help and its how-to page where there is one."""

    def run(self):
        self.env.note_dependency(__file__)
        lines = []
        for name, text in engines():
            page = os.path.isfile(os.path.join(DOCS, "how-to", name + ".rst"))
            lines.append(f"* ``{name}``: {_rst_text(text)}" + (f" (:doc:`/how-to/{name}`)" if page else ""))
        return self.parse(lines)


def _add_prolog(app, config):
    config.rst_prolog = (config.rst_prolog or "") + "\n" + prolog()


def setup(app):
    app.connect("config-inited", _add_prolog)
    app.add_directive("gpumr-workloads", WorkloadsDirective)
    app.add_directive("gpumr-engines", EnginesDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
