"""Every relative link in the tree's Markdown files resolves: the file it
names exists, and a #fragment names a heading of that file. External
links (a scheme such as https:) are not followed. The checker is tried
on a made-up tree first, so that a broken link is shown to fail it."""
import os
import re
import subprocess
import tempfile
import unittest

import hrtest

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def md_files(root):
    """The Markdown files git tracks under root, or every one but build
    output where root is not a git checkout."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "*.md"],
                             capture_output=True, text=True, check=True)
        # A copy of the tree whose git index is older than its files (the
        # GPU machine's) can list a file the tree no longer has.
        return [os.path.join(root, f) for f in out.stdout.split()
                if os.path.exists(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs
                       if not x.startswith(".") and not x.startswith("build")]
            found += [os.path.join(d, f) for f in files if f.endswith(".md")]
        return found


def slug(heading):
    """A heading's anchor as GitHub makes it."""
    h = re.sub(r"[`*_]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    return {slug(line.lstrip("#")) for line in text.splitlines()
            if line.startswith("#")}


def bad_links(root):
    """'FILE: TARGET: why' for each link that does not resolve."""
    bad = []
    for path in md_files(root):
        with open(path, encoding="utf-8") as f:
            text = FENCE.sub("", f.read())
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            name, _, frag = target.partition("#")
            dest = (os.path.normpath(os.path.join(os.path.dirname(path), name))
                    if name else path)
            rel = os.path.relpath(path, root)
            if not os.path.exists(dest):
                bad.append(f"{rel}: {target}: no such file")
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                bad.append(f"{rel}: {target}: no such heading")
    return bad


class DocLinks(unittest.TestCase):
    def test_checker_finds_broken_links(self):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "docs"))
            with open(os.path.join(d, "docs", "a.md"), "w") as f:
                f.write("# A page\n\n[ok](b.md#the-part) [up](../README.md)\n"
                        "[gone](missing.md) [wrong](b.md#nothing) "
                        "[web](https://example.org/x.md)\n"
                        "```\n[in code](not-checked.md)\n```\n")
            with open(os.path.join(d, "docs", "b.md"), "w") as f:
                f.write("# B\n\n## The part\n")
            with open(os.path.join(d, "README.md"), "w") as f:
                f.write("[a](docs/a.md#a-page)\n")
            self.assertEqual(sorted(bad_links(d)), [
                "docs/a.md: b.md#nothing: no such heading",
                "docs/a.md: missing.md: no such file",
            ])

    def test_tree_links_resolve(self):
        files = md_files(hrtest.ROOT)
        self.assertTrue(any(f.endswith("README.md") for f in files))
        self.assertEqual(bad_links(hrtest.ROOT), [])


if __name__ == "__main__":
    unittest.main()
