"""Tiny check runner shared by the Python client suites.

Each test is a function; `Suite.test(name)` runs it, an AssertionError or any other exception
fails it (with the reason), and `Suite.finish()` prints the closing "N passed, N failed" line and
returns the exit status. `wait_until()` is the only way tests wait: a predicate polled against a
deadline.
"""
import argparse
import os
import sys
import time
import traceback
import uuid


def parse_args(description, extra=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--bootstrap", default=os.environ.get("KM_BOOTSTRAP"),
                    help="HOST:PORT of the broker (default: $KM_BOOTSTRAP)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only tests whose name contains this (repeatable)")
    if extra:
        extra(ap)
    a = ap.parse_args()
    if not a.bootstrap:
        ap.error("--bootstrap HOST:PORT or KM_BOOTSTRAP is required")
    return a


def unique(prefix):
    """A topic/group name never used before on any broker."""
    return "%s-%d-%s" % (prefix, int(time.time() * 1000), uuid.uuid4().hex[:8])


def wait_until(pred, timeout, what, interval=0.05):
    """Polls pred() until it returns a truthy value (returned) or the deadline passes. Use
    interval=0 when pred itself blocks (a consumer poll with a timeout)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        if interval > 0:
            time.sleep(interval)


class Suite:
    def __init__(self, name, only=()):
        self.name = name
        self.only = list(only)
        self.passed = 0
        self.failed = 0
        self.failures = []

    def log(self, msg):
        print("[%s] %s" % (self.name, msg), file=sys.stderr, flush=True)

    def test(self, name, fn, *args):
        """Runs fn(*args) as one test. Returns True when it passed."""
        if self.only and not any(o in name for o in self.only):
            return True
        t0 = time.monotonic()
        try:
            fn(*args)
        except AssertionError as e:
            self._fail(name, str(e) or "assertion failed", t0)
            return False
        except Exception as e:  # noqa: BLE001 - any error fails the test, the suite goes on
            tb = traceback.format_exc().strip().splitlines()
            self._fail(name, "%s: %s (%s)" % (type(e).__name__, e, tb[-3].strip() if len(tb) > 2 else ""), t0)
            return False
        self.passed += 1
        print("PASS %s (%.1f s)" % (name, time.monotonic() - t0), flush=True)
        return True

    def _fail(self, name, why, t0):
        self.failed += 1
        self.failures.append(name)
        print("FAIL %s (%.1f s): %s" % (name, time.monotonic() - t0, why), flush=True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed), flush=True)
        return 0 if self.failed == 0 and self.passed > 0 else 1


def expect(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def expect_eq(got, want, what):
    if got != want:
        raise AssertionError("%s: got %r, expected %r" % (what, got, want))
