"""What the real-GPU checks (torch_lines.py, native_lines.py) share: skipping, running commands,
marked source lines, and reading a profile's GPU part through `mlprof export`."""
import json
import re
import subprocess
import sys


def skip(why):
    """Exit as skipped (ctest's SKIP_RETURN_CODE 77)."""
    print("SKIP: " + why)
    sys.exit(77)


def run(cmd, env=None):
    """Runs cmd; on failure prints its output and exits 1."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print("command failed (%d): %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout, r.stderr))
        sys.exit(1)
    return r


def last_json(text):
    """The last line of text that is a JSON object."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output:\n" + text)


def marker_lines(path):
    """{name: line number} of the lines of path marked "LINE: name" (in a # or // comment)."""
    lines = {}
    with open(path) as f:
        for n, text in enumerate(f, 1):
            m = re.search(r"(?:#|//) LINE: (\w+)", text)
            if m:
                lines[m.group(1)] = n
    return lines


def gpu_profile(mlprof, prof):
    """The profile's JSON export; skips when mlprof was built without the CUPTI headers, and returns
    None (after saying why) when the profile has no GPU part."""
    doc = json.loads(run([mlprof, "export", prof, "--format", "json"]).stdout)
    if doc.get("gpu"):
        return doc
    msgs = [m for p in doc.get("processes", []) for m in p.get("messages", [])]
    if any("without CUPTI headers" in m for m in msgs):
        skip("this mlprof was built without the CUPTI headers")
    print("FAIL: no GPU section in the profile; messages: %s" % msgs)
    return None


def line_sums(mlprof, prof, metric, source, lines):
    """({name: metric summed over the stacks holding source:line}, the metric's total), from the
    collapsed export (frames carry "(.../source:LINE)")."""
    got = {k: 0 for k in lines}
    total = 0
    for row in run([mlprof, "export", prof, "--format", "collapsed", "--metric", metric]).stdout.splitlines():
        stack, _, value = row.rpartition(" ")
        total += int(value)
        for k, ln in lines.items():
            if "%s:%d)" % (source, ln) in stack:
                got[k] += int(value)
    return got, total
