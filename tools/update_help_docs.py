#!/usr/bin/env python3
"""Copies each command's `oomscope CMD --help` into its page, docs/commands/CMD.md, between the
markers `<!-- help: CMD -->` and `<!-- /help -->` (a fenced block), so that the page and the
program say the same. tests/integration/test_docs.py fails when they differ.
    tools/update_help_docs.py BUILD_DIR"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGES = os.path.join(HERE, "..", "docs", "commands")
BLOCK = re.compile(r"(<!-- help: (\w+) -->\n)```\n.*?```\n(<!-- /help -->)", re.S)


def help_text(oomscope, command):
    args = [oomscope, "--help"] if command == "oomscope" else [oomscope, command, "--help"]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.rstrip("\n") + "\n"


def main():
    oomscope = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "bin", "oomscope")
    for name in sorted(os.listdir(PAGES)):
        path = os.path.join(PAGES, name)
        text = open(path).read()
        updated = BLOCK.sub(lambda m: m.group(1) + "```\n" + help_text(oomscope, m.group(2)) + "```\n" + m.group(3),
                            text)
        if updated != text:
            open(path, "w").write(updated)
            print("updated", path)


if __name__ == "__main__":
    main()
