"""bench/kernels_digest.sh: the digest of the kernels' sources, of the
working tree or of a git revision. Checked in a throwaway repository: the
working tree and its commit give the same digest while the sources are
the committed ones; an edit, an added source or a renamed one changes the
working tree's and leaves the commit's; files that are not kernel sources
(another directory, another extension) do not count; a revision that does
not exist, too many arguments and a tree with no sources are refused with
their reason."""
import os
import subprocess
import unittest

import hrtest

SCRIPT = os.path.join(hrtest.ROOT, "bench", "kernels_digest.sh")


git = hrtest.git


class KernelsDigest(hrtest.ScratchRepoTestCase):
    def setUp(self):
        super().setUp()
        os.mkdir(os.path.join(self.repo, "kernels"))
        self.write("kernels/a.cu", "__global__ void a() {}\n")
        self.write("kernels/b.cuh", "#define B 1\n")
        self.write("kernels/kernels.mk", "NVCCFLAGS += -O3\n")
        self.write("kernels/notes.txt", "not a source\n")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "one")

    def digest(self, *args):
        return subprocess.run(["sh", SCRIPT, *args], cwd=self.repo, capture_output=True,
                              text=True, timeout=30)

    def ok(self, *args):
        r = self.digest(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^[0-9a-f]{16}\n$")
        return r.stdout.strip()

    def test_tree_and_commit_agree(self):
        self.assertEqual(self.ok(), self.ok("HEAD"))

    def test_changes_move_the_tree_not_the_commit(self):
        head, tree = self.ok("HEAD"), self.ok()
        self.write("kernels/b.cuh", "#define B 2\n")
        edited = self.ok()
        self.assertNotEqual(edited, tree)
        self.assertEqual(self.ok("HEAD"), head)
        self.write("kernels/b.cuh", "#define B 1\n")
        self.assertEqual(self.ok(), tree)
        self.write("kernels/c.h", "\n")                      # an added source
        self.assertNotEqual(self.ok(), tree)
        os.remove(os.path.join(self.repo, "kernels/c.h"))
        os.rename(os.path.join(self.repo, "kernels/a.cu"),
                  os.path.join(self.repo, "kernels/z.cu"))  # same bytes, new name
        self.assertNotEqual(self.ok(), tree)

    def test_other_files_do_not_count(self):
        tree = self.ok()
        self.write("kernels/notes.txt", "edited\n")
        os.makedirs(os.path.join(self.repo, "kernels", "sub"))
        self.write("kernels/sub/x.cu", "\n")
        self.write("top.cu", "\n")
        self.assertEqual(self.ok(), tree)

    def test_a_commit_with_other_kernels(self):
        first = self.ok("HEAD")
        self.write("kernels/a.cu", "__global__ void a2() {}\n")
        git(self.repo, "commit", "-q", "-am", "two")
        self.assertNotEqual(self.ok("HEAD"), first)
        self.assertEqual(self.ok("HEAD~1"), first)

    def test_refusals(self):
        r = self.digest("no-such-rev")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-rev: not a revision", r.stderr)
        r = self.digest("HEAD", "HEAD")
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage", r.stderr)
        for f in ("a.cu", "b.cuh", "kernels.mk"):
            os.remove(os.path.join(self.repo, "kernels", f))
        r = self.digest()
        self.assertEqual(r.returncode, 1)
        self.assertIn("no kernel sources", r.stderr)
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
