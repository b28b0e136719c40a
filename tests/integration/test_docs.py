"""The docs say what the program does today: every `oomscope SUBCOMMAND` named in the README and
docs/ exists, every option a command line there shows is one of that command's (with a value
it takes, where the value is written out), each command's page holds its `--help` verbatim,
every docs/ page a page names exists, the README stays a guide (about 250 lines), and no page
dates a result by a work period (history is in CHANGELOG.md and git)."""
import os
import re
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
# "oomscope report", not "oomscope: error", "oomscope-HOST", "/lib/oomscope/" or "python -m oomscope.x"
COMMAND = re.compile(r"(?<![\w/.-])oomscope[ \t]+(?=[a-z-])")
STOP = re.compile(r"\s(?:\||&&|;|>|#)\s?")


def pages():
    out = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    return out


HELP_BLOCK = re.compile(r"<!-- help: \w+ -->\n```\n.*?```\n<!-- /help -->", re.S)


def code_of(text):
    """Code blocks' lines (their shell comments cut) and inline code spans: where command lines
    are written. The pages' copies of --help are the program's words, checked on their own."""
    text = HELP_BLOCK.sub("", text)
    spans = []
    for block in FENCE.findall(text):
        spans += [re.split(r"\s#", line)[0] for line in block.splitlines()]
    prose = FENCE.sub("", text)
    spans += INLINE.findall(prose)
    return spans


def command_lines(text):
    """(subcommand or '', the rest of its line up to a pipe or a comment) for each `oomscope …`."""
    for span in code_of(text):
        for m in COMMAND.finditer(span):
            rest = STOP.split(span[m.end():])[0]
            words = rest.split()
            if not words:
                continue
            if words[0].startswith("-"):
                yield "", words
            else:
                yield words[0].rstrip(":,."), words[1:]


class Cli:
    def __init__(self, oomscope):
        self.oomscope = oomscope
        top = self.help()
        self.subcommands = set(re.findall(r"^  ([a-z]+)\s{2,}", top.split("Subcommands:")[1], re.M))
        self.options = {}

    def help(self, *sub):
        r = subprocess.run([self.oomscope, *sub, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def options_of(self, sub):
        """option name -> the text after it on its help line (its type or set of values)."""
        if sub not in self.options:
            found = {}
            for line in self.help(*([sub] if sub else [])).splitlines():
                m = re.match(r"^  (-[\w,-]+(?:\{\w+\})?)\s*(\S*)", line)
                if m:
                    for name in m.group(1).split(","):
                        found[re.sub(r"\{.*\}", "", name)] = m.group(2)
            self.options[sub] = found
        return self.options[sub]


@pytest.fixture(scope="module")
def cli(build):
    return Cli(build.oomscope)


def placeholder(value):
    return not value or value != value.lower() or any(c in value for c in "|[]{}<>…") or value in ("n", "dir")


def test_every_command_and_option_the_docs_name_exists(cli, build):
    import sys
    sys.path.insert(0, os.path.join(build.dir, "share", "oomscope", "python"))
    try:
        import oomscope
    finally:
        sys.path.pop(0)
    cards = {"t4", "l4", "a10g", "rtx4090", "a100-40gb", "a100-80gb", "h100-80gb", "h200"}
    problems = []
    checked = 0
    for page in pages():
        name = os.path.relpath(page, ROOT)
        for sub, words in command_lines(open(page).read()):
            if sub and sub not in cli.subcommands:
                problems.append(f"{name}: `oomscope {sub}` is not a command")
                continue
            known = cli.options_of(sub)
            for i, word in enumerate(words):
                if word == "--":
                    break  # the program's own arguments follow
                option = re.match(r"^\[?(--?[A-Za-z][\w-]*)", word)
                if not option:
                    continue
                flag = option.group(1)
                checked += 1
                if flag not in known:
                    problems.append(f"{name}: `oomscope {sub} {flag}`: no such option")
                    continue
                kind = known[flag]
                value = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else "")
                value = value.strip("]`")
                if placeholder(value) or value.startswith("-"):
                    continue
                choices = re.search(r"\{([\w,-]+)\}", kind)
                if choices and value not in choices.group(1).split(","):
                    problems.append(f"{name}: `{flag} {value}`: not one of {choices.group(1)}")
                if kind.startswith("SIZE"):
                    for item in value.split(","):
                        try:
                            oomscope.parse_size(item)
                        except ValueError:
                            if not (kind == "SIZE|CARD" and item in cards):
                                problems.append(f"{name}: `{flag} {value}`: not a size")
    assert checked > 50, checked  # the scan found the docs' command lines
    assert not problems, "\n".join(problems)


def test_each_command_has_a_page_that_holds_its_help(cli):
    for sub in sorted(cli.subcommands):
        page = os.path.join(ROOT, "docs", "commands", sub + ".md")
        assert os.path.isfile(page), f"docs/commands/{sub}.md is missing"
        text = open(page).read()
        m = re.search(r"<!-- help: " + sub + r" -->\n```\n(.*?)```\n<!-- /help -->", text, re.S)
        assert m, f"docs/commands/{sub}.md has no help block"
        assert m.group(1) == cli.help(sub).rstrip("\n") + "\n", \
            f"docs/commands/{sub}.md's help differs from `oomscope {sub} --help`: run tools/update_help_docs.py BUILD"
        assert "Exit status:" in m.group(1) and f"docs/commands/{sub}.md" in m.group(1)


def test_every_page_the_docs_name_exists():
    missing = []
    for page in pages():
        for ref in re.findall(r"(?<![\w/])((?:docs|tests|tools|bench|examples|src)/[\w./-]+\.(?:md|py|sh|cpp|h|json|png))",
                              open(page).read()):
            if not os.path.exists(os.path.join(ROOT, ref)):
                missing.append(f"{os.path.relpath(page, ROOT)}: {ref}")
    assert not missing, "\n".join(missing)


def test_the_readme_is_a_guide_and_no_page_dates_its_results_by_work_period():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.splitlines()) <= 260, len(readme.splitlines())
    dated = re.compile(r"\b[Ss]essions? \d|\bRound \d|\bwork period|\bissue \d+\b", re.I)
    found = []
    for page in pages():
        if page.endswith("CHANGELOG.md"):
            continue
        for n, line in enumerate(open(page), 1):
            if dated.search(line):
                found.append(f"{os.path.relpath(page, ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_variable_the_code_reads_is_on_the_environment_page():
    # Every OOMSCOPE_ variable named in the product's sources (the preload, the CLI, the
    # adapter) has its row or paragraph in docs/environment.md, and the table has one row each.
    page = open(os.path.join(ROOT, "docs", "environment.md")).read()
    named = set()
    for folder in ("src", os.path.join("tools", "oomscope")):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith((".cpp", ".h", ".py")):
                    named |= set(re.findall(r"[\"'](OOMSCOPE_[A-Z0-9_]+)[\"']", open(os.path.join(dirpath, name)).read()))
    assert len(named) > 20, named
    assert sorted(v for v in named if v not in page) == []
    rows = re.findall(r"^\| `(OOMSCOPE_[A-Z0-9_]+)` \|", page, re.M)
    assert len(rows) == len(set(rows)), sorted(r for r in rows if rows.count(r) > 1)
