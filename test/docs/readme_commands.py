#!/usr/bin/env python3
"""Runs every shell command of the README and the guide, and checks the links
between the documentation pages.

    test/docs/readme_commands.py BUILD_DIR commands [PAGE ...] [--keep]
    test/docs/readme_commands.py BUILD_DIR links
    test/docs/readme_commands.py BUILD_DIR list     (what would run, capped)

ctest runs both as `docs-commands` and `docs-links`.

commands: every ```sh (or bash, shell) code block of README.md and
docs/guide/*.md, one logical line at a time (a trailing backslash joins
lines; comments are dropped), in the order of the page. Each page gets a
fresh folder with `build` linked to BUILD_DIR and the repository's
examples/, data/, bench/, scripts/ and test/ linked in, so the commands run
as written from the repository root and their outputs (runs/, tune/,
*.plan, dump/) land in that folder. `export` lines carry over to the later
commands of the page. A command fails the test when it exits non-zero: a
renamed flag, a removed config key or a tool that no longer runs.

Training is capped so that the whole test takes minutes on 2 cores:
- stretto-train gets `train.steps=S train.warmup_steps=1
  train.eval_batches=2` appended (S is 4,
  or what a `<!-- test: steps=N -->` line right before the block says, for
  gossip runs whose local steps need more), and an explicit `--steps N` is
  set to S; `--help` lines are left alone;
- stretto-tune gets `--profile-runs 1 --profile-steps 2 --measure-steps 3
  --repeats 1 --top 1` (each only where the command does not give it);
- stretto-bench-train gets `--steps 2 --ref-steps 1`, stretto-sample
  `--tokens 16`;
- stretto-run trains from plans the page compiled, so their (capped) steps.
`list` prints every command as it would run. OMP_NUM_THREADS is 1 unless
set, and the kernel cache is BUILD_DIR/docs-test-kernels unless
STRETTO_CACHE_DIR is set.

A block preceded by `<!-- test: skip (REASON) -->` is not run (it needs a
GPU, several machines or a cluster scheduler, or it is the set-up and the
whole suite that .ci/run runs): each of its commands is reported SKIPPED
with the reason, never as passed, and every `--flag` it passes to a
build/bin tool is still checked against that tool's --help, so a renamed
flag fails there too.

links: every Markdown link and image of README.md, docs/guide/,
docs/results/ and docs/experiments/ (outside code) that is not a URL must
name an existing file or folder, and a `#anchor` must be a heading of the
target page (GitHub's slugs). Every page of docs/guide/ and docs/results/
must be reachable from README.md by such links, and every docs/*.md page
that a tool's --help or error text names (tools/*/*.cpp,
runtime/run/RunPlan.cpp) must exist.

Exit status 0 when everything that ran passed, 1 otherwise.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINKED = ["examples", "data", "bench", "scripts", "test"]
DEFAULT_STEPS = 4
COMMAND_TIMEOUT = 300
SHELL_LANGS = {"sh", "bash", "shell", "console"}


def command_pages():
    guide = os.path.join(ROOT, "docs", "guide")
    return [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(guide, f) for f in os.listdir(guide) if f.endswith(".md"))


def link_pages():
    pages = [os.path.join(ROOT, "README.md")]
    for sub in ("guide", "results", "experiments"):
        d = os.path.join(ROOT, "docs", sub)
        pages += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".md"))
    return pages


def rel(path):
    return os.path.relpath(path, ROOT)


# --- Markdown -------------------------------------------------------------

def blocks(path):
    """(first line number, language, lines, directives) of each fenced block.
    Directives come from `<!-- test: ... -->` lines right before the fence."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3).lower(), i + 1
        directives, j = {}, i - 1
        while j >= 0 and lines[j].strip().startswith("<!--"):
            d = re.match(r"<!--\s*test:\s*(.*?)\s*-->", lines[j].strip())
            if d:
                text = d.group(1)
                s = re.match(r"^skip\s*\((.*)\)$", text)
                if s:  # the reason may hold any text, ';' included
                    directives["skip"] = s.group(1)
                    text = ""
                for part in text.split(";"):
                    part = part.strip()
                    if re.match(r"steps=\d+$", part):
                        directives["steps"] = int(part.split("=")[1])
                    elif part:
                        raise SystemExit(f"{rel(path)}:{j + 1}: unknown test directive '{part}'")
            j -= 1
        body, i = [], i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        out.append((start, lang, body, directives))
        i += 1
    return out


def split_unquoted(text, seps):
    """Splits text at separators outside quotes; returns (pieces, separators).
    '#' at the start of a word outside quotes starts a comment: it ends the
    text."""
    pieces, found, cur, i, quote = [], [], "", 0, None
    while i < len(text):
        c = text[i]
        if quote:
            cur += c
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"' and i + 1 < len(text):
                cur += text[i + 1]
                i += 1
        elif c in "'\"":
            quote = c
            cur += c
        elif c == "\\" and i + 1 < len(text):
            cur += text[i:i + 2]
            i += 1
        elif c == "#" and (not cur or cur[-1].isspace()):
            break
        else:
            sep = next((s for s in seps if text.startswith(s, i)), None)
            if sep:
                pieces.append(cur)
                found.append(sep)
                cur = ""
                i += len(sep)
                continue
            cur += c
        i += 1
    pieces.append(cur)
    return pieces, found


def commands(body):
    """Logical command lines of a shell block, comments dropped."""
    out, cur = [], ""
    for line in body:
        if cur == "" and (not line.strip() or line.strip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        text = " ".join(split_unquoted(cur, [])[0][0].split())
        if text:
            out.append(text)
        cur = ""
    if cur.strip():
        out.append(" ".join(cur.split()))
    return out


# --- capping ----------------------------------------------------------------

def tool_of(words):
    """(index, tool name) of the first build/bin/stretto-* word, or (-1, None)."""
    for k, w in enumerate(words):
        m = re.match(r"^(?:\./)?build/bin/(stretto-[\w-]+)$", w)
        if m:
            return k, m.group(1)
    return -1, None


def split_words(command):
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def has_flag(words, flag):
    return any(w == flag or w.startswith(flag + "=") for w in words)


def cap_segment(segment, steps):
    try:
        words = shlex.split(segment)
    except ValueError:
        return segment
    k, tool = tool_of(words)
    if tool is None or "--help" in words or "-h" in words:
        return segment
    add = []
    if tool == "stretto-train":
        if has_flag(words, "--steps"):
            segment = re.sub(r"--steps(=|\s+)\d+", f"--steps\\g<1>{steps}", segment)
        add += [f"train.steps={steps}", "train.warmup_steps=1", "train.eval_batches=2"]
    elif tool == "stretto-tune":
        for flag, value in (("--profile-runs", 1), ("--profile-steps", 2),
                            ("--measure-steps", 3), ("--repeats", 1), ("--top", 1)):
            if not has_flag(words, flag):
                add += [flag, str(value)]
    elif tool == "stretto-bench-train":
        for flag, value in (("--steps", 2), ("--ref-steps", 1)):
            if not has_flag(words, flag):
                add += [flag, str(value)]
    elif tool == "stretto-sample":
        if not has_flag(words, "--tokens"):
            add += ["--tokens", "16"]
    if not add:
        return segment
    return segment.rstrip() + " " + " ".join(add) + (" " if segment.endswith(" ") else "")


def capped(command, steps):
    pieces, seps = split_unquoted(command, ["&&", "||", "|", ";"])
    out = ""
    for k, p in enumerate(pieces):
        out += cap_segment(p, steps)
        if k < len(seps):
            out += seps[k]
    return out


# --- flags of skipped commands ------------------------------------------------

_help = {}


def tool_help(build, tool):
    if tool not in _help:
        exe = os.path.join(build, "bin", tool)
        if not os.path.exists(exe):
            _help[tool] = None
        else:
            r = subprocess.run([exe, "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60)
            _help[tool] = r.stdout
    return _help[tool]


def unknown_flags(build, command):
    """Flags a skipped command passes to a build/bin tool that its --help
    does not list; (tool, [flags]) pairs, and tools that are missing."""
    problems = []
    for segment in split_unquoted(command, ["&&", "||", "|", ";"])[0]:
        try:
            words = shlex.split(segment)
        except ValueError:
            continue
        k, tool = tool_of(words)
        if tool is None:
            continue
        text = tool_help(build, tool)
        if text is None:
            problems.append(f"{tool} is not in {build}/bin")
            continue
        for w in words[k + 1:]:
            if not w.startswith("--"):
                continue
            name = w.split("=", 1)[0]
            if not re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text):
                problems.append(f"{tool} {name} (not in its --help)")
    return problems


# --- running ------------------------------------------------------------------

def page_folder(build):
    d = tempfile.mkdtemp(prefix="stretto-docs-")
    os.symlink(os.path.abspath(build), os.path.join(d, "build"))
    for name in LINKED:
        os.symlink(os.path.join(ROOT, name), os.path.join(d, name))
    return d


def run_commands(build, pages, keep):
    env = dict(os.environ)
    env.setdefault("STRETTO_CACHE_DIR", os.path.join(os.path.abspath(build), "docs-test-kernels"))
    # One thread per process unless told otherwise: on a loaded machine (CI
    # runs other tests beside this one) OpenMP threads that wait for a busy
    # core make a step many times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    ran, skipped, failed = 0, [], []
    start = time.time()
    for page in pages:
        shell = [b for b in blocks(page) if b[1] in SHELL_LANGS]
        if not shell:
            continue
        work = page_folder(build)
        print(f"== {rel(page)} (in {work})", flush=True)
        prelude = ""
        for line, lang, body, directives in shell:
            steps = directives.get("steps", DEFAULT_STEPS)
            for cmd in commands(body):
                where = f"{rel(page)}:{line}"
                if "skip" in directives:
                    problems = unknown_flags(build, cmd)
                    if problems:
                        failed.append((where, cmd, "; ".join(problems)))
                        print(f"FAIL  {where}  {cmd}\n      {'; '.join(problems)}", flush=True)
                    else:
                        skipped.append((where, cmd, directives["skip"]))
                        checked = "; its flags are in the tool's --help" \
                            if tool_of(split_words(cmd))[1] else ""
                        print(f"SKIP  {where}  {cmd}\n      ({directives['skip']}{checked})",
                              flush=True)
                    continue
                run = capped(cmd, steps)
                t0 = time.time()
                try:
                    r = subprocess.run(["bash", "-c", "set -eo pipefail\n" + prelude + run],
                                       cwd=work, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True,
                                       errors="replace", timeout=COMMAND_TIMEOUT)
                    rc, output = r.returncode, r.stdout
                except subprocess.TimeoutExpired as e:
                    out = e.stdout or ""
                    rc = f"timeout after {COMMAND_TIMEOUT} s"
                    output = out.decode(errors="replace") if isinstance(out, bytes) else out
                dt = time.time() - t0
                ran += 1
                shown = run if run == cmd else f"{cmd}\n      ran as: {run}"
                if rc == 0:
                    print(f"ok    {where}  {dt:5.1f} s  {shown}", flush=True)
                    if re.match(r"^export\s", cmd):
                        prelude += cmd + "\n"
                else:
                    failed.append((where, cmd, f"exit status {rc}"))
                    tail = "\n".join("      | " + l for l in output.rstrip().split("\n")[-30:])
                    print(f"FAIL  {where}  {dt:5.1f} s  exit status {rc}: {shown}\n{tail}",
                          flush=True)
        if keep:
            print(f"   (kept {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{ran} commands ran in {time.time() - start:.0f} s, {len(failed)} failed, "
          f"{len(skipped)} skipped")
    for where, cmd, why in skipped:
        print(f"  skipped {where}: {cmd}  ({why})")
    for where, cmd, why in failed:
        print(f"  FAILED  {where}: {cmd}  ({why})")
    return 1 if failed else 0


def list_commands(pages):
    for page in pages:
        for line, lang, body, directives in blocks(page):
            if lang not in SHELL_LANGS:
                continue
            for cmd in commands(body):
                if "skip" in directives:
                    print(f"{rel(page)}:{line}  SKIP ({directives['skip']})  {cmd}")
                else:
                    print(f"{rel(page)}:{line}  {capped(cmd, directives.get('steps', DEFAULT_STEPS))}")
    return 0


# --- links --------------------------------------------------------------------

def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose(path, blank_inline=True):
    """The page's lines outside fenced code (fenced lines are blank), and
    inline code blanked out unless blank_inline is false."""
    out, fence = [], None
    for line in open(path, encoding="utf-8").read().split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[:3]
            elif line.strip().startswith(fence):
                fence = None
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line) if blank_inline else line)
    return out


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, result = {}, set()
        for line in prose(path, blank_inline=False):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            result.add(s if n == 0 else f"{s}-{n}")
        _anchors[path] = result
    return _anchors[path]


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links_of(page):
    for number, line in enumerate(prose(page), 1):
        for m in LINK.finditer(line):
            yield number, m.group(1)


def check_links(pages):
    bad, checked, graph = [], 0, {}
    for page in pages:
        graph[page] = set()
        for number, target in links_of(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            where = f"{rel(page)}:{number}"
            if not os.path.exists(dest):
                bad.append(f"{where}: {target}: no such file or folder")
                continue
            if dest.endswith(".md"):
                graph[page].add(dest)
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    bad.append(f"{where}: {target}: an anchor into something not a Markdown page")
                elif anchor not in anchors(dest):
                    bad.append(f"{where}: {target}: no heading '#{anchor}' in {rel(dest)}")
    # Every guide and results page is reachable from the README.
    readme = os.path.join(ROOT, "README.md")
    seen, todo = {readme}, [readme]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    for page in pages:
        if rel(page).startswith(("docs/guide/", "docs/results/")) and page not in seen:
            bad.append(f"{rel(page)}: not reachable by links from README.md")
    # The pages that --help texts and error messages point to exist.
    sources = [os.path.join(ROOT, "runtime", "run", "RunPlan.cpp")]
    tools = os.path.join(ROOT, "tools")
    for d in sorted(os.listdir(tools)):
        if os.path.isdir(os.path.join(tools, d)):
            sources += [os.path.join(tools, d, f) for f in sorted(os.listdir(os.path.join(tools, d)))
                        if f.endswith(".cpp")]
    for src in sources:
        for number, line in enumerate(open(src, encoding="utf-8"), 1):
            for m in re.finditer(r"docs/[\w./-]+\.md(?:#[\w-]+)?", line):
                checked += 1
                path, _, anchor = m.group(0).partition("#")
                if not os.path.exists(os.path.join(ROOT, path)):
                    bad.append(f"{rel(src)}:{number}: {m.group(0)}: no such page")
                elif anchor and anchor not in anchors(os.path.join(ROOT, path)):
                    bad.append(f"{rel(src)}:{number}: {m.group(0)}: no such heading")
    for b in bad:
        print("BROKEN " + b)
    print(f"{checked} links in {len(pages)} pages checked, {len(bad)} broken")
    return 1 if bad else 0


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    keep = "--keep" in argv
    if len(args) < 2 or args[1] not in ("commands", "links", "list"):
        print(__doc__)
        return 2
    build, what = args[0], args[1]
    if what == "links":
        return check_links(link_pages())
    pages = [os.path.abspath(p) for p in args[2:]] or command_pages()
    if what == "list":
        return list_commands(pages)
    if not os.path.isdir(os.path.join(build, "bin")):
        print(f"{build}/bin: no such folder (build first)")
        return 1
    return run_commands(build, pages, keep)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
