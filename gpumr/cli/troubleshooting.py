"""``gpumr help [TOPIC]``: the troubleshooting entry an error line points to, in the terminal."""

import os
import re

from ..errors import GpumrError

#: The troubleshooting page's source, installed with gpumr.
PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "troubleshooting.rst")


def entries(text=None):
    """``{topic: (title, body)}`` of the troubleshooting page, in page order (reStructuredText as written)."""
    if text is None:
        with open(PAGE, encoding="utf-8") as f:
            text = f.read()
    out = {}
    parts = re.split(r"^\.\. _([a-z0-9-]+):\n", text, flags=re.M)
    for topic, chunk in zip(parts[1::2], parts[2::2]):
        lines = chunk.strip("\n").splitlines()
        out[topic] = (lines[0], "\n".join(lines[2:]).strip("\n"))
    return out


def plain(rst):
    """The few reStructuredText marks the entries use, as a terminal shows text."""
    text = re.sub(r"^\.\. code-block:: \w+\n\n", "", rst, flags=re.M)
    text = re.sub(r":doc:`([^`<]*?)\s*<([^>]+)>`", r"\1 (docs: \2)", text)
    text = re.sub(r":doc:`/?([^`]+)`", r"the docs' page \1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    return text


def cmd_help(args):
    found = entries()
    if not args.topic:
        width = max(map(len, found))
        print("Topics (gpumr help TOPIC; the same entries are the documentation's troubleshooting page):")
        for topic, (title, _) in found.items():
            print(f"  {topic.ljust(width)}  {plain(title)}")
        return
    if args.topic not in found:
        raise GpumrError(f"no help topic {args.topic!r}: choose one of {', '.join(found)}")
    title, body = found[args.topic]
    print(plain(title))
    print()
    print(plain(body))


def register(sub):
    """Add ``help`` to the ``gpumr`` parser."""
    from .args import command
    h = command(sub, "help", "what an error means and what to do (the troubleshooting entries)", cmd_help)
    h.add_argument("topic", nargs="?", metavar="TOPIC",
                   help="the topic an error line names (see: gpumr help TOPIC); none: list the topics")
