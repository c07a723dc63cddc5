#!/usr/bin/env python3
"""The test command's scheduler (spec/support/run-tests.sh runs it after bootstrap.sh).

    lanes.py --modes "lua54 luajit asan" [--jobs N] FILE...

Every (mode, file) pair is a job, and so is each preparation a group of jobs waits for: the
LuaJIT, ASan and fuzz builds, and the nested engines' root filesystems. N lanes (default
SANDSTACK_TEST_JOBS, else 4) take ready jobs, the longest first (counting what waits for them),
by spec/support/test-times.txt (measured: `mode file seconds cpu-seconds`; a job not listed
counts as 30 s). Most of the suite waits on the engine rather than the CPU (the Lua 5.4 files:
457 s of CPU in 2129 s), so on 2 cores four lanes keep both busy; the heavy jobs (nested
engines, the fresh machine) are held to two at a time, and so are the debootstraps.

Rules the lanes keep:
- a file never runs in two modes at once (a spec's own names and stand-ins are per file);
- jobs that share a group never overlap, but for GROUP_LIMIT's (two debootstraps at once);
- spec/zz_leftovers.t runs after every other job, once per mode that ran it before (the ASan
  mode's also counts LuaJIT's), alone.

Each job runs through prove with spec/support/tap-runner; its result is a line when it ends.
At the end: each lane's busy time and its ten slowest jobs, the ten slowest overall, the
measured times (written to SANDSTACK_TEST_TIMES_OUT when set, in test-times.txt's format), and
the last line "tests: N passed, N failed" (run-tests.sh prints it).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_SECONDS = 30.0

# Jobs that run nested engines or a whole machine: CPU, disk and the engine's firewall at once.
HEAVY = {
    "spec/fresh_machine.t", "spec/engines.t", "spec/swarm_cluster_spec.lua",
    "spec/docker_hibernate_memory_spec.lua", "spec/gateway_scaleout_spec.lua",
}
MAX_HEAVY = 2

# How many jobs of one group may run at once (a group not named here: one). Two debootstraps at
# a time: the four root filesystems are the start of the longest chain (engines.t needs three),
# and one at a time left the second core idle while dpkg waited on the disk.
GROUP_LIMIT = {"debootstrap": 2}

# Files that must not overlap one another, whatever the mode (a shared fixed resource).
GROUPS = {
    # both count or reset the isolation self-check's memo volume on the engine
    "spec/docker_isolation_spec.lua": "isolation-memo",
}

# What a file needs before it can start, by mode ("*": any mode).
ROOTFS = {  # nested-engine.sh root filesystems
    "spec/engines.t": ["rootfs:docker20", "rootfs:docker26", "rootfs:docker28"],
    "spec/swarm_cluster_spec.lua": ["rootfs:docker20"],
    "spec/docker_hibernate_memory_spec.lua": ["rootfs:docker26-criu"],
}


# A file that drives nginx (its Lua is LuaJIT) loads the LuaJIT build whatever its mode, and one
# that runs the docs' examples (doctest) or builds examples/egress-proxy's image may build it
# itself (`cmake --build build-luajit`): each waits for build:luajit, after which that build is a
# no-op rather than a second writer of the same archives (a race seen: ar's SIGBUS). Known by what
# the file names: a #nginx tag, an nginx harness, the doctest, the example, the build itself.
NGINX_TEXT = re.compile(rb"#nginx|nginx_harness|gateway_harness|scaleout_harness|swarm_gateway_harness|doctest|egress-proxy|proxy_e2e|"
                        rb"spawn_ngx|build-luajit")


def needs_luajit_build(path):
    try:
        with open(os.path.join(TOP, path), "rb") as f:
            return NGINX_TEXT.search(f.read()) is not None
    except OSError:
        return False


def log(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


class Job:
    def __init__(self, name, argv, mode=None, file=None, deps=(), seconds=DEFAULT_SECONDS,
                 heavy=False, group=None, prep=False, last=False):
        self.name, self.argv, self.mode, self.file = name, argv, mode, file
        self.deps, self.seconds, self.heavy, self.group = list(deps), seconds, heavy, group
        self.prep, self.last = prep, last
        self.rank = seconds
        self.proc = self.out = self.lane = None
        self.started = self.ended = None
        self.passed = self.failed = 0
        self.rc = None
        self.cpu = 0.0
        self.note = ""


def read_times(path):
    times = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and not line.startswith("#"):
                    times[(parts[0], parts[1])] = float(parts[2])
    except OSError:
        pass
    return times


def machine_cpu():
    """Seconds of CPU the whole machine has spent (all cores), from /proc/stat: busy in user
    space, busy in the kernel (system, irq, softirq), and waiting on I/O."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return {"user": 0.0, "kernel": 0.0, "iowait": 0.0}
    tck = float(os.sysconf("SC_CLK_TCK"))
    return {"user": (v[0] + v[1]) / tck, "kernel": (v[2] + v[5] + v[6]) / tck, "iowait": v[4] / tck}


def daemons_cpu():
    """Seconds of CPU dockerd and containerd have used so far (their own, not the containers'):
    how much of the machine the engine itself takes."""
    total = 0.0
    tck = float(os.sysconf("SC_CLK_TCK"))
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        if name in ("dockerd", "containerd"):
            fields = stat[stat.rfind(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) / tck  # utime, stime
    return total


def prove_counts(text):
    """(passed, failed) from one prove run's output, as the old runner counted them: a file that
    died outside a test (Result: FAIL with no failed subtest) is one failure."""
    total = 0
    m = re.findall(r"^Files=\d+, Tests=(\d+),", text, re.M)
    if m:
        total = int(m[-1])
    bad = sum(int(x) for x in re.findall(r"Failed (\d+)/\d+ subtests", text))
    if re.search(r"^Result: FAIL", text, re.M) and bad == 0:
        bad = 1
    if not m and bad == 0:
        bad = 1  # prove printed no summary: it did not run
    return total - min(bad, total), bad


def plan(modes, files, times):
    jobs = []
    modes = modes.split()
    late_luajit = "luajit" in modes and "asan" in modes
    prep = {}

    def prep_job(name, argv, seconds):
        if name not in prep:
            # debootstraps share the mirror and the disk: GROUP_LIMIT of them at a time
            prep[name] = Job(name, argv, seconds=seconds, prep=True,
                             group="debootstrap" if name.startswith("rootfs:") else None)
            jobs.append(prep[name])
        return name

    mode_build = {"luajit": ("build-luajit", ["-DSANDSTACK_LUA=luajit"], 40),
                  "asan": ("build-asan", ["-DSANDSTACK_LUA=lua5.4", "-DSANDSTACK_SANITIZE=ON"], 60)}
    for mode in modes:
        mode_files = []
        for f in files:
            base = os.path.basename(f)
            if mode != "lua54" and not f.endswith("_spec.lua") and not base.startswith("zz_"):
                continue
            if base.startswith("zz_") and mode == "luajit" and late_luajit:
                continue
            mode_files.append(f)
        for f in mode_files:
            deps = []
            build_modes = [mode] if mode in mode_build else []
            if mode != "luajit" and needs_luajit_build(f):
                build_modes.append("luajit")
            for bm in build_modes:
                d, args, secs = mode_build[bm]
                deps.append(prep_job("build:" + bm, ["bash", "spec/support/build-mode.sh", d] + args, secs))
            if f == "spec/fuzz.t":
                deps.append(prep_job("build:fuzz", ["bash", "spec/support/build-mode.sh", "build-fuzz",
                                                    "--target", "fuzzers", "-DSANDSTACK_LUA=lua5.4", "-DSANDSTACK_FUZZ=ON",
                                                    "-DCMAKE_C_COMPILER=clang"], 50))
            if os.environ.get("SANDSTACK_ENGINES") != "none" or f != "spec/engines.t":
                for r in ROOTFS.get(f, []):
                    deps.append(prep_job(r, ["bash", "spec/support/nested-engine.sh", "build", r.split(":")[1]],
                                         times.get(("prep", r), 120)))
            last = os.path.basename(f).startswith("zz_")
            jobs.append(Job("%s %s" % (mode, f), ["prove", "--exec", "spec/support/tap-runner " + mode, f],
                            mode=mode, file=f, deps=deps, seconds=times.get((mode, f), DEFAULT_SECONDS),
                            heavy=f in HEAVY, group=GROUPS.get(f), last=last))
    for j in jobs:
        if j.prep:
            j.seconds = times.get(("prep", j.name), j.seconds)
    # rank: a job's own time and the longest chain of jobs waiting for it, so that a build or a
    # root filesystem that a long file needs starts before files that need nothing
    by_name = {j.name: j for j in jobs}
    for j in jobs:
        j.rank = j.seconds
    for j in jobs:
        for d in j.deps:
            by_name[d].rank = max(by_name[d].rank, by_name[d].seconds + j.seconds)
    return jobs


def run(jobs, lanes, log_dir):
    pending = list(jobs)
    running = {}
    free = list(range(1, lanes + 1))
    done = {}
    t0 = time.monotonic()
    interrupted = []

    class Interrupted(Exception):
        pass

    def on_signal(signum, _frame):
        interrupted.append(signum)
        raise Interrupted()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def ready(j):
        if any(d not in done for d in j.deps):
            return False
        if j.last:
            return not running and all(p.last for p in pending)
        if any(r.file == j.file and j.file for r in running.values()):
            return False
        if j.group and sum(1 for r in running.values() if r.group == j.group) >= GROUP_LIMIT.get(j.group, 1):
            return False
        if j.heavy and sum(1 for r in running.values() if r.heavy) >= MAX_HEAVY:
            return False
        return True

    while (pending or running) and not interrupted:  # noqa: C901 (one loop: start, wait, record)
        # start what can start, the longest first; zz_ files one at a time, alone
        for j in sorted([p for p in pending if ready(p)], key=lambda p: -p.rank):
            if not free or not ready(j):
                continue
            if j.last and running:
                break
            j.lane = free.pop(0)
            j.started = time.monotonic()
            j.out = os.path.join(log_dir, "%03d.log" % jobs.index(j))
            with open(j.out, "wb") as out:
                j.proc = subprocess.Popen(j.argv, cwd=TOP, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
            running[j.proc.pid] = j
            pending.remove(j)
        if not running:
            if pending:  # nothing can start: a dependency cycle would be a bug here
                for j in pending:
                    j.note, j.failed = "never became ready", 1
                    done[j.name] = j
                pending.clear()
            break
        try:
            pid, status, usage = os.wait4(-1, 0)
        except Interrupted:
            break
        except ChildProcessError:
            break
        j = running.pop(pid, None)
        if j is None:
            continue
        j.ended = time.monotonic()
        j.rc = os.waitstatus_to_exitcode(status)
        j.cpu = usage.ru_utime + usage.ru_stime  # the job's processes that were waited for
        free.append(j.lane)
        free.sort()
        with open(j.out, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        if j.prep:
            if j.rc != 0:
                j.failed = 1
                j.note = "failed (rc %d): %s" % (j.rc, " ".join(text.strip().splitlines()[-3:])[:300])
        else:
            j.passed, j.failed = prove_counts(text)
        done[j.name] = j
        took = j.ended - j.started
        status_word = "ok" if j.failed == 0 else "FAILED"
        what = "prep" if j.prep else "%d tests" % (j.passed + j.failed)
        log("[%5.0f s] lane %d  %-6s %-44s %-6s %9s %6.1f s %5.1f cpu%s" % (
            j.ended - t0, j.lane, j.mode or "", j.file or j.name, status_word, what, took, j.cpu,
            ("  " + j.note) if j.note else ("" if j.failed == 0 or j.prep else "  (%d failed)" % j.failed)))
        if j.failed and not j.prep:
            # prove's own lines for the file: which tests, as prove saw them
            for line in text.splitlines():
                if line.startswith(("Failed", "  Failed", "Parse errors", "Result:")) or "Dubious" in line:
                    log("    " + line)
    if interrupted:
        for j in running.values():
            try:
                os.killpg(j.proc.pid, signal.SIGTERM)  # our own job's process group only
            except ProcessLookupError:
                pass
        for j in running.values():
            j.proc.wait()
        log("interrupted: the running jobs were ended")
        return done, time.monotonic() - t0, True
    return done, time.monotonic() - t0, False


def report(done, wall, lanes, cpu, daemons):
    jobs = list(done.values())
    busy = cpu["user"] + cpu["kernel"]
    log("=== lanes (%d) in %.0f s of wall time; the jobs' own cpu %.0f s, the machine's %.0f s of %d cores x %.0f s"
        % (lanes, wall, sum(j.cpu for j in jobs), busy, os.cpu_count() or 1, wall))
    log("  the machine: %.0f s in user space, %.0f s in the kernel, %.0f s waiting on I/O; dockerd and containerd %.0f s"
        % (cpu["user"], cpu["kernel"], cpu["iowait"], daemons))
    for lane in range(1, lanes + 1):
        mine = [j for j in jobs if j.lane == lane and j.started is not None]
        busy = sum(j.ended - j.started for j in mine)
        log("  lane %d: busy %.0f s, %d jobs; its ten slowest:" % (lane, busy, len(mine)))
        for j in sorted(mine, key=lambda j: j.started - j.ended)[:10]:
            log("    %7.1f s  %-6s %s" % (j.ended - j.started, j.mode or "prep", j.file or j.name))
    log("=== the ten slowest jobs")
    for j in sorted([j for j in jobs if j.started is not None], key=lambda j: j.started - j.ended)[:10]:
        log("  %7.1f s  %-6s %s" % (j.ended - j.started, j.mode or "prep", j.file or j.name))
    modes = sorted({j.mode for j in jobs if j.mode})
    for m in modes:
        mine = [j for j in jobs if j.mode == m and j.started is not None]
        if mine:
            log("=== mode %s: %d files, %.0f s of job time (%.0f s cpu), first start %.0f s, last end %.0f s" % (
                m, len(mine), sum(j.ended - j.started for j in mine), sum(j.cpu for j in mine),
                min(j.started for j in mine) - min(x.started for x in jobs if x.started),
                max(j.ended for j in mine) - min(x.started for x in jobs if x.started)))
    out = os.environ.get("SANDSTACK_TEST_TIMES_OUT")
    if out:
        with open(out, "w") as f:
            f.write("# mode file seconds cpu-seconds: measured by spec/support/lanes.py\n")
            for j in sorted(jobs, key=lambda j: (j.mode or "prep", j.file or j.name)):
                if j.started is not None:
                    f.write("%s %s %.0f %.0f\n" % (j.mode or "prep", j.file or j.name, j.ended - j.started, j.cpu))


def main():
    ap = argparse.ArgumentParser(description="run the test files in lanes")
    ap.add_argument("--modes", default="lua54 luajit asan")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("SANDSTACK_TEST_JOBS") or 4))
    ap.add_argument("--log-dir")
    ap.add_argument("--dry-run", action="store_true", help="list the jobs by rank and what they wait for")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    times = read_times(os.path.join(TOP, "spec", "support", "test-times.txt"))
    jobs = plan(a.modes, a.files, times)
    if a.dry_run:
        for j in sorted(jobs, key=lambda j: -j.rank):
            log("%7.0f %7.0f  %-6s %-44s %s" % (j.rank, j.seconds, j.mode or "prep", j.file or j.name,
                                               " ".join(j.deps)))
        return 0
    if not a.log_dir:
        ap.error("--log-dir is needed")
    cpu0, daemons0 = machine_cpu(), daemons_cpu()
    done, wall, interrupted = run(jobs, max(1, a.jobs), a.log_dir)
    cpu1 = machine_cpu()
    report(done, wall, max(1, a.jobs), {k: cpu1[k] - cpu0[k] for k in cpu1}, daemons_cpu() - daemons0)
    passed = sum(j.passed for j in done.values())
    failed = sum(j.failed for j in done.values())
    ran = sum(1 for j in done.values() if not j.prep)
    with open(os.path.join(a.log_dir, "counts"), "w") as f:
        f.write("%d %d %d\n" % (passed, failed + (1 if interrupted else 0), ran))
    return 0


if __name__ == "__main__":
    sys.exit(main())
