"""bench/build_rev.sh: the kernels of a git revision built into a build
directory. Checked in a throwaway repository with a fake `make` on PATH
that records what it was asked and copies a marker file of the tree it
was given: the build must be of the named revision's files (not the
working tree's), into the named directory, with the production flags by
default; a revision that does not exist and a wrong call are refused
with their reason, building nothing."""
import os
import stat
import subprocess
import unittest

import hrtest

SCRIPT = os.path.join(hrtest.ROOT, "bench", "build_rev.sh")

FAKE_MAKE = """#!/bin/sh
# records its arguments; "builds" each target by copying the marker of
# the tree it was run in (-C DIR)
echo "$@" > "$FAKE_MAKE_LOG"
src=
for a in "$@"; do
  [ -n "$prev_c" ] && src=$a
  prev_c=
  [ "$a" = -C ] && prev_c=1
done
for a in "$@"; do
  case $a in
    /*) mkdir -p "$(dirname "$a")"; cp "$src/marker" "$a" ;;
  esac
done
"""


git = hrtest.git


class BuildRev(hrtest.ScratchRepoTestCase):
    def setUp(self):
        super().setUp()
        d = self.tmp.name
        self.write("marker", "first\n")
        git(self.repo, "add", "marker")
        git(self.repo, "commit", "-q", "-m", "one")
        self.first = git(self.repo, "rev-parse", "HEAD")
        self.write("marker", "second\n")
        git(self.repo, "commit", "-q", "-am", "two")
        self.write("marker", "uncommitted\n")     # the working tree: never built
        bindir = os.path.join(d, "bin")
        os.mkdir(bindir)
        make = os.path.join(bindir, "make")
        with open(make, "w") as f:
            f.write(FAKE_MAKE)
        os.chmod(make, os.stat(make).st_mode | stat.S_IXUSR)
        self.log = os.path.join(d, "make.log")
        self.env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
                        FAKE_MAKE_LOG=self.log)

    def run_script(self, *args):
        return subprocess.run(["sh", SCRIPT, *args], cwd=self.repo, env=self.env,
                              capture_output=True, text=True, timeout=60)

    def read(self, *parts):
        with open(os.path.join(self.repo, *parts)) as f:
            return f.read()

    def test_builds_the_named_revision(self):
        r = self.run_script(self.first, "build-x")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.read("build-x", "tests", "moe_phases"), "first\n")
        self.assertEqual(self.read("build-x", "REVISION").strip(), self.first)
        with open(self.log) as f:
            args = f.read()
        build = os.path.join(self.repo, "build-x")
        self.assertIn(f"BUILD={build} ", args)
        self.assertIn("NVCC_EXTRA=-DHR__MOE_NO_VARIANTS=1 ", args)
        self.assertTrue(args.rstrip().endswith(os.path.join(build, "tests", "moe_phases")))

        r = self.run_script("HEAD", "build-y", "-DSOMETHING=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.read("build-y", "tests", "moe_phases"), "second\n")
        with open(self.log) as f:
            self.assertIn("NVCC_EXTRA=-DSOMETHING=1 ", f.read())

    def test_more_targets(self):
        """BUILD_REV_TARGETS: each named program under DIR, built from the
        revision's files; an empty NVCC_EXTRA is
        passed as empty, not replaced by the default."""
        env = dict(self.env, BUILD_REV_TARGETS="tests/test_a tests/test_b")
        r = subprocess.run(["sh", SCRIPT, self.first, "build-t", ""], cwd=self.repo, env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("test_a", "test_b"):
            self.assertEqual(self.read("build-t", "tests", name), "first\n")
        self.assertFalse(os.path.exists(os.path.join(self.repo, "build-t", "tests",
                                                     "moe_phases")))
        with open(self.log) as f:
            args = f.read()
        self.assertIn("NVCC_EXTRA= ", args)

    def test_directory_emptied_first(self):
        os.makedirs(os.path.join(self.repo, "build-x", "stale"))
        r = self.run_script("HEAD", "build-x")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.repo, "build-x", "stale")))

    def test_unknown_revision_refused(self):
        r = self.run_script("no-such-branch", "build-x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-branch: not a revision", r.stderr)
        self.assertFalse(os.path.exists(self.log))
        self.assertFalse(os.path.exists(os.path.join(self.repo, "build-x")))

    def test_usage(self):
        for args in ((), ("HEAD",), ("HEAD", "b", "x", "extra")):
            r = self.run_script(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("usage: build_rev.sh REV DIR [NVCC_EXTRA]", r.stderr)


if __name__ == "__main__":
    unittest.main()
