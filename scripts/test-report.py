#!/usr/bin/env python3
"""Lists every test the last `ctest` run skipped, with its reason, then
what each failed test said (its FAIL lines, GoogleTest failures, errors):
last, where the tail of a CI log shows it.

    ctest --test-dir BUILD_DIR --output-junit ctest-results.xml
    scripts/test-report.py BUILD_DIR [--ci]

Reads BUILD_DIR/ctest-results.xml (`make test` writes it): ctest tests
reported skipped (GoogleTest's GTEST_SKIP, or a script's exit 77),
and lit tests reported UNSUPPORTED inside the `lit` test (their REQUIRES
line names what was missing). The reason is the test's own message: the
line after GoogleTest's "Skipped", a script's last line, lit's REQUIRES.

With --ci (or STRETTO_CI=1 in the environment), a skipped test must match
an entry of test/ci-may-skip.txt (tests that cannot run on a CI machine:
no GPU, no PyTorch, no Intel MKL, ...); any other skip fails the report
(exit 1), since a test that can run there and does not is no test.
Exit 0 otherwise, also when nothing was skipped.
"""
import fnmatch
import os
import re
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def results(path, failed=None):
    """(name, output lines, skipped) of each test in ctest's JUnit file;
    `failed`, where given, collects (name, output lines) of the failures."""
    for case in ET.parse(path).getroot().iter("testcase"):
        out = case.find("system-out")
        lines = (out.text or "").splitlines() if out is not None else []
        if failed is not None and (case.find("failure") is not None or
                                   case.get("status") == "fail"):
            failed.append((case.get("name", "?"), lines))
        yield case.get("name", "?"), lines, case.find("skipped") is not None


def why_failed(output, limit=60):
    """The lines of a failed test's output that say what failed (a check's
    FAIL line, GoogleTest's Failure and the lines after it, an error), at
    most `limit`; its last lines where none does."""
    picked, keep = [], 0
    for line in output:
        if re.search(r"^FAIL |: Failure$|^\[  FAILED  \]|[Ee]rror:|Traceback", line):
            keep = 12
        if keep:
            picked.append(line[:300])
            keep -= 1
        if len(picked) >= limit:
            break
    return picked or [l[:300] for l in output[-limit // 2:]]


def skip_reason(output):
    """The reason a test gave for skipping itself."""
    for i, line in enumerate(output):
        if re.search(r":\d+: Skipped$", line) and i + 1 < len(output):
            return output[i + 1].strip()
    for line in reversed(output):
        if line.strip() and not line.startswith("["):
            return line.strip()
    return "(no reason printed)"


def lit_unsupported(output):
    """(test, missing features) for each lit test reported UNSUPPORTED."""
    listing = False  # lit -s: "Unsupported Tests (N):", then "  SUITE :: PATH" lines
    for line in output:
        if re.match(r"^Unsupported Tests \(\d+\):", line):
            listing = True
            continue
        m = re.match(r"^UNSUPPORTED: \S+ :: (\S+)", line) or \
            (re.match(r"^\s+\S+ :: (\S+)", line) if listing else None)
        if not m:
            listing = listing and bool(line.strip())
            continue
        path = os.path.join(ROOT, "test", "lit", m.group(1))
        requires = []
        if os.path.exists(path):
            for text in open(path, encoding="utf-8", errors="replace"):
                r = re.search(r"REQUIRES:\s*(.*)$", text)
                if r:
                    requires.append(r.group(1).strip())
        yield "lit: " + m.group(1), "REQUIRES " + (", ".join(requires) or "?")


def allowed_patterns():
    """test/ci-may-skip.txt: `PATTERN  # why` per line (fnmatch patterns)."""
    path = os.path.join(ROOT, "test", "ci-may-skip.txt")
    patterns = []
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            patterns.append(line)
    return patterns


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    build = sys.argv[1]
    ci = "--ci" in sys.argv[2:] or os.environ.get("STRETTO_CI") == "1"
    path = os.path.join(build, "ctest-results.xml")
    if not os.path.exists(path):
        print(f"test-report: {path} does not exist (run ctest with --output-junit "
              "ctest-results.xml first)")
        return 1
    skipped, failed = [], []
    for name, output, was_skipped in results(path, failed):
        short = name.split("  # GetParam()")[0]
        if was_skipped:
            skipped.append((short, skip_reason(output)))
        if name == "lit":
            skipped.extend(lit_unsupported(output))
    # What each failed test said, last (where a CI log's tail shows it).
    rc = report_skips(skipped, ci)
    for name, output in failed:
        print(f"test-report: FAILED {name.split('  # GetParam()')[0]}:")
        for line in why_failed(output):
            print(f"  | {line}")
    return rc


def report_skips(skipped, ci):
    """Prints the skipped tests; under CI, 1 where a skip is not allowed."""
    if not skipped:
        print("test-report: no test was skipped")
        return 0
    print(f"test-report: {len(skipped)} test(s) skipped:")
    width = min(max(len(n) for n, _ in skipped), 70)
    for name, why in skipped:
        print(f"  {name:<{width}}  {why}")
    if not ci:
        return 0
    patterns = allowed_patterns()
    bad = [(n, w) for n, w in skipped if not any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if bad:
        print("test-report: these tests can run on a CI machine but were skipped "
              "(test/ci-may-skip.txt lists the ones that cannot):")
        for name, why in bad:
            print(f"  {name}  {why}")
        return 1
    print("test-report: every skip is one a CI machine cannot run (test/ci-may-skip.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
