"""The binding itself, with no daemon: finding the library, the prototypes
against the headers, the struct layouts against the C compiler, and the
mapping of HR_E* codes to exceptions."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import hrtest

import headroom
from headroom import _lib


def _header_text(path):
    """A header without comments, preprocessor lines (continued ones too)
    and static inline function bodies: what declares the library."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    return re.sub(r"static\s+inline\b.*?\n\}", " ", text, flags=re.S)


def header_functions(path):
    """Names of the functions a header declares or defines."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    # A return type, then the name, then "(".
    names = re.findall(r"[\w\*]\s+\**\s*(hr_[a-z0-9_]+)\s*\(", text)
    return set(names)


class Header:
    """What the C headers say, parsed from their text: each function's
    return and parameter types, each struct's members, and which names are
    enums and opaque handles. The ctypes binding is checked against this,
    never against its own tables."""

    def __init__(self, *paths):
        self.text = " ".join(_header_text(p) for p in paths)
        self.enums = set(re.findall(r"typedef\s+enum\s+\w+\s*\{[^}]*\}\s*(\w+)\s*;",
                                    self.text))
        self.opaque = set(re.findall(r"typedef\s+struct\s+(\w+)\s+\1\s*;",
                                     self.text))
        self.structs = {}
        # A function-pointer member, "int (*allgather)(void *ctx, ...)",
        # is a member named allgather.
        text = re.sub(r"\(\s*\*\s*(\w+)\s*\)\s*\([^()]*\)", r"*\1", self.text)
        for body, name in re.findall(
                r"typedef\s+struct\s+\w+\s*\{([^}]*)\}\s*(\w+)\s*;", text):
            members = []
            for decl in body.split(";"):
                decl = decl.strip()
                if not decl:
                    continue
                # "int experts, hidden": the type once, then the names.
                first, *more = [d.strip() for d in decl.split(",")]
                members.append(re.findall(r"(\w+)\s*(?:\[[^\]]*\])?$", first)[0])
                members += [re.sub(r"[\*\s]", "", m) for m in more]
            self.structs[name] = members
        self.functions = {}
        # Declarations are the statements that end in ")" outside a body.
        flat = re.sub(r"\{[^{}]*\}", ";", self.text)
        # What is left of C++'s extern "C" { ... } around them.
        flat = re.sub(r"extern\s+\"C\"", " ", flat).replace("{", ";")
        for stmt in flat.replace("}", ";").split(";"):
            m = re.match(r"^\s*([\w\s\*]+?)\b(hr_[a-z0-9_]+)"
                         r"\s*\(([^()]*)\)\s*$", stmt, flags=re.S)
            if m and "typedef" not in m.group(1):
                params = [p.strip() for p in m.group(3).split(",")]
                if params == ["void"]:
                    params = []
                self.functions[m.group(2)] = (m.group(1).strip(), params)

    def ctype(self, decl, structs):
        """The ctypes type for a C type (a parameter may carry its name)."""
        words = decl.replace("*", " * ").split()
        words = [w for w in words if w not in ("const", "struct")]
        stars = words.count("*")
        words = [w for w in words if w != "*"]
        base = words[0] if words else ""
        scalars = {"int": ctypes.c_int, "unsigned": ctypes.c_uint,
                   "int64_t": ctypes.c_int64, "uint32_t": ctypes.c_uint32,
                   "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t}
        if base in self.enums:
            base, scalar = "int", ctypes.c_int
        else:
            scalar = scalars.get(base)
        if stars == 0:
            if base == "void":
                return None
            if scalar is None:
                raise AssertionError("no ctypes type for %r" % decl)
            return scalar
        if stars == 1 and base == "char":
            return ctypes.c_char_p
        if stars == 1 and (base == "void" or base in self.opaque):
            return ctypes.c_void_p
        if stars == 2 and (base == "void" or base in self.opaque):
            return POINTER(ctypes.c_void_p)
        if stars == 1 and base in structs:
            return POINTER(structs[base])
        if stars == 1 and scalar is not None:
            return POINTER(scalar)
        raise AssertionError("no ctypes type for %r" % decl)

    def prototype(self, name, structs):
        ret, params = self.functions[name]
        return (self.ctype(ret, structs),
                [self.ctype(p, structs) for p in params])


def POINTER(t):
    return ctypes.POINTER(t)


def installed_header():
    """build/include/headroom.h (headroom.h with proto/hr_types.h written
    in), as users get it; the source pair where it was not built."""
    built = os.path.join(os.path.dirname(hrtest.LIBDIR), "include",
                         "headroom.h")
    if os.path.exists(built):
        return [built]
    return [os.path.join(hrtest.ROOT, "proto", "hr_types.h"),
            os.path.join(hrtest.ROOT, "client", "headroom.h")]


class TestPrototypes(unittest.TestCase):
    """Every ctypes prototype against the one the header declares, types
    mapped from the C text (an int where the header says int64_t, a
    missing size_t, a wrong struct pointer all fail here)."""

    def check_against(self, header, table, structs, skip=(), optional=()):
        """The header's functions (less `skip`) are the table's, less the
        `optional` ones the header does not declare (yet)."""
        names = set(header.functions) - set(skip)
        self.assertEqual(names, set(table) - (set(optional) - names))
        for name in sorted(names):
            self.assertEqual(table[name], header.prototype(name, structs),
                             "%s: ctypes %s, header %s" % (
                                 name, table[name], header.functions[name]))

    def test_headroom_h(self):
        h = Header(*installed_header())
        self.assertIn("hr_client_open", h.functions)
        self.assertIn("hr_lease_budget_sized", h.functions)
        # The inline one is not in the library: nccl_options() does its job.
        self.assertNotIn("hr_lease_fill_nccl_config", h.functions)
        self.assertIn("hr_lease_fill_nccl_config",
                      header_functions(os.path.join(hrtest.ROOT, "client",
                                                    "headroom.h")))
        self.check_against(h, _lib._PROTOTYPES, STRUCTS)

    def test_headroom_moe_h(self):
        h = Header(*installed_header(),
                   os.path.join(hrtest.ROOT, "kernels", "headroom_moe.h"))
        moe = {n: v for n, v in h.functions.items() if n.startswith("hr_moe_")}
        h.functions = moe
        self.assertIn("hr_moe_forward", moe)
        self.assertIn("hr_moe_ep_create", moe)
        # The EP backward's functions are optional in the binding (a
        # library built before them lacks them); compared wherever the
        # header declares them.
        self.assertEqual(set(_lib._MOE_OPTIONAL),
                         {"hr_moe_ep_backward", "hr_moe_ep_backward_grid",
                          "hr_moe_ep_memory_backward"})
        self.check_against(h, _lib._MOE_PROTOTYPES, STRUCTS,
                           optional=_lib._MOE_OPTIONAL)

    def test_the_check_can_fail(self):
        # The same comparison on a header that changed one type.
        text = ""
        for p in installed_header():
            with open(p) as f:
                text += f.read()
        bad = text.replace("int64_t hr_lease_epoch(", "int hr_lease_epoch(")
        self.assertNotEqual(bad, text)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "headroom.h")
            with open(p, "w") as f:
                f.write(bad)
            h = Header(p)
        self.assertNotEqual(_lib._PROTOTYPES["hr_lease_epoch"],
                            h.prototype("hr_lease_epoch", STRUCTS))

    def test_declared_on_the_loaded_library(self):
        lib = headroom.load_library()
        for name, (restype, argtypes) in _lib._PROTOTYPES.items():
            fn = getattr(lib, name)
            self.assertEqual(fn.restype, restype, name)
            self.assertEqual(fn.argtypes, argtypes, name)

    def test_found_in_the_build_tree(self):
        headroom.load_library()
        if os.environ.get("HEADROOM_LIB"):
            self.skipTest("$HEADROOM_LIB chose the library")
        self.assertEqual(os.path.realpath(os.path.dirname(
            headroom.library_path())), os.path.realpath(hrtest.LIBDIR))

    def test_search_order(self):
        # An explicit path wins over $HEADROOM_LIB, which wins over the tree.
        c = _lib._candidates("/x/lib.so", "HEADROOM_LIB", "libheadroom.so",
                             "libheadroom.so.0")
        self.assertEqual(c, [("/x/lib.so", "argument")])
        old = os.environ.get("HEADROOM_LIB")
        os.environ["HEADROOM_LIB"] = "/y/libheadroom.so.0"
        try:
            c = _lib._candidates(None, "HEADROOM_LIB", "libheadroom.so",
                                 "libheadroom.so.0")
            self.assertEqual(c, [("/y/libheadroom.so.0", "$HEADROOM_LIB")])
            del os.environ["HEADROOM_LIB"]
            c = _lib._candidates(None, "HEADROOM_LIB", "libheadroom.so",
                                 "libheadroom.so.0")
            self.assertEqual(c[-1], ("libheadroom.so.0", "system loader"))
            if os.path.exists(os.path.join(hrtest.LIBDIR, "libheadroom.so.0")):
                self.assertEqual(c[0][1], "build tree")
        finally:
            if old is None:
                os.environ.pop("HEADROOM_LIB", None)
            else:
                os.environ["HEADROOM_LIB"] = old

    def test_explicit_path_that_does_not_load(self):
        env = hrtest.clean_env(HEADROOM_LIB="/nonexistent/libheadroom.so.0")
        p = subprocess.run(
            [sys.executable, "-c", "import headroom; headroom.Client()"],
            env=env, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("/nonexistent/libheadroom.so.0", p.stderr)
        self.assertIn("$HEADROOM_LIB", p.stderr)

    def test_not_found_says_what_to_do(self):
        # Outside the source tree (no build/lib beside the package), with
        # nothing installed: the error names the variable, make install
        # and ldconfig, not only the files it tried.
        try:
            ctypes.CDLL("libheadroom.so.0")
            self.skipTest("libheadroom.so.0 is installed on this machine")
        except OSError:
            pass
        env = hrtest.clean_env(HEADROOM_BUILD="no-such-build-dir")
        env.pop("HEADROOM_LIB", None)
        p = subprocess.run(
            [sys.executable, "-c", "import headroom; headroom.Client()"],
            env=env, capture_output=True, text=True, timeout=30,
            cwd=tempfile.gettempdir())
        self.assertNotEqual(p.returncode, 0)
        last = p.stderr.strip().splitlines()[-1]
        self.assertIn("cannot load libheadroom", last)
        for hint in ("HEADROOM_LIB", "make install", "ldconfig"):
            self.assertIn(hint, last)

    def test_import_does_not_load_torch(self):
        out, _ = hrtest.run_child("""
            import json, sys
            import headroom
            headroom.load_library()
            print(json.dumps({"torch": "torch" in sys.modules}))
        """, hrtest.clean_env())
        self.assertFalse(out["torch"])


STRUCTS = {
    "hr_budget": _lib.Budget_t,
    "hr_incident_detail": _lib.IncidentDetail_t,
    "hr_client_options": _lib.ClientOptions_t,
    "hr_moe_shape": _lib.MoeShape_t,
    "hr_moe_args": _lib.MoeArgs_t,
    "hr_moe_failure": _lib.MoeFailure_t,
    "hr_moe_grad_args": _lib.MoeGradArgs_t,
    "hr_moe_ep_bootstrap": _lib.MoeEPBootstrap_t,
    "hr_moe_ep_failure": _lib.MoeEPFailure_t,
}

# Members the binding may have before a header: the EP backward's field of
# hr_moe_ep_bootstrap (after exchange). Where a header lacks it, the struct
# must still be the C size (it takes what was padding).
PENDING_MEMBERS = {"hr_moe_ep_bootstrap": ["backward"]}


class TestLayout(unittest.TestCase):
    """ctypes' idea of each struct against the C compiler's: the members
    are read from the headers, the sizes and offsets printed by a program
    compiled against them."""

    def test_structs_match_the_headers(self):
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler")
        h = Header(*installed_header(),
                   os.path.join(hrtest.ROOT, "kernels", "headroom_moe.h"))
        lines = ["#include <stddef.h>", "#include <stdio.h>",
                 '#include "headroom.h"', '#include "headroom_moe.h"',
                 "int main(void)", "{",
                 '  printf("hr_mode size %zu\\n", sizeof(hr_mode));']
        for name in STRUCTS:
            self.assertIn(name, h.structs)
            # The same members, in the same order, as ctypes has (less a
            # pending trailing one the header does not have yet).
            fields = [f for f, _ in STRUCTS[name]._fields_]
            pending = PENDING_MEMBERS.get(name, [])
            if pending and fields[-len(pending):] == pending and \
                    not set(pending) & set(h.structs[name]):
                fields = fields[:-len(pending)]
            self.assertEqual(fields, h.structs[name], name)
            lines.append('  printf("%s size %%zu\\n", sizeof(%s));'
                         % (name, name))
            for m in h.structs[name]:
                lines.append('  printf("%s.%s %%zu\\n", offsetof(%s, %s));'
                             % (name, m, name, m))
        lines += ["  return 0;", "}"]
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "layout.c")
            exe = os.path.join(d, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            inc = [os.path.dirname(p) for p in installed_header()]
            args = [cc, "-std=c11"]
            for i in inc + [os.path.join(hrtest.ROOT, "kernels")]:
                args += ["-I", i]
            subprocess.run(args + ["-o", exe, src], check=True)
            out = subprocess.run([exe], check=True, capture_output=True,
                                 text=True).stdout
        seen = 0
        for line in out.splitlines():
            key, value = line.rsplit(" ", 1)
            value = int(value)
            if key.endswith(" size"):
                name = key[:-5]
                if name == "hr_mode":
                    self.assertEqual(value, ctypes.sizeof(ctypes.c_int))
                else:
                    self.assertEqual(value, ctypes.sizeof(STRUCTS[name]), name)
            else:
                name, field = key.split(".")
                self.assertEqual(value, getattr(STRUCTS[name], field).offset,
                                 key)
            seen += 1
        self.assertGreater(seen, 40)


class TestErrors(unittest.TestCase):
    def test_every_code_has_a_class_and_a_text(self):
        texts = set()
        for code, name in _lib.CODES.items():
            self.assertEqual(getattr(_lib, name), code)
            text = headroom.strerror(code)
            self.assertTrue(text and "unknown" not in text.lower(),
                            "%s: %r" % (name, text))
            texts.add(text)
            if code == 0:
                continue
            cls = headroom.error_class(code)
            self.assertTrue(issubclass(cls, headroom.HeadroomError))
            self.assertIsNot(cls, headroom.HeadroomError, name)
            e = cls(code, "ctx")
            self.assertEqual(e.code, code)
            self.assertEqual(e.code_name, name)
            self.assertEqual(e.strerror, text)
            self.assertEqual(str(e), "ctx: %s (%s)" % (text, name))
        self.assertEqual(len(texts), len(_lib.CODES))

    def test_specific_classes(self):
        self.assertIs(headroom.error_class(-22), headroom.BarrierTimeout)
        self.assertIs(headroom.error_class(-1), headroom.InvalidArgument)
        self.assertIs(headroom.error_class(-7), headroom.NotFound)
        self.assertIs(headroom.error_class(-11), headroom.Degraded)
        self.assertIs(headroom.error_class(-20), headroom.NoGPU)
        self.assertIs(headroom.error_class(-999), headroom.HeadroomError)

    def test_check(self):
        from headroom.errors import check
        self.assertEqual(check(0), 0)
        self.assertEqual(check(130), 130)
        with self.assertRaises(headroom.BarrierTimeout) as cm:
            check(-22, "sync")
        self.assertIsNone(cm.exception.failure)
        self.assertEqual(cm.exception.code, _lib.HR_EBARRIER_TIMEOUT)

    def test_barrier_timeout_carries_the_failure(self):
        f = headroom.MoeFailure(code=-22, barrier=2, arrived=120, expected=132,
                                sm=5, grid=132, timeout_ms=500, cuda_error=-1,
                                cta=7, reported=1)
        e = headroom.BarrierTimeout(-22, "hr_moe_sync", f)
        self.assertIs(e.failure, f)
        self.assertIn("120 of 132", str(e))
        self.assertIn("barrier 2", str(e))

    def test_pickles(self):
        import pickle
        e = pickle.loads(pickle.dumps(headroom.NotFound(-7, "x")))
        self.assertIsInstance(e, headroom.NotFound)
        self.assertEqual(e.code, -7)

    def test_enum_names(self):
        lib = headroom.load_library()
        for m in headroom.Mode:
            self.assertEqual(lib.hr_mode_name(int(m)).decode(), m.name.lower())
            self.assertIs(headroom.Mode.of(m.name.lower()), m)
        for k in headroom.IncidentKind:
            self.assertEqual(lib.hr_incident_kind_name(int(k)).decode(),
                             k.name.lower())
        self.assertIsNone(lib.hr_mode_name(7))


class TestDegraded(hrtest.DegradedTestCase):
    """No daemon: the lease is computed in the process with the daemon's
    policy (default policy, this process's footprints), never the full
    grid, with NCCL capped. Each case runs in a child with an environment
    built from scratch."""
    CHILD = """
        import json, headroom
        c = headroom.Client(%r)
        lease = c.lease(0, cluster=2)
        b = lease.budget()
        try:
            c.report("barrier_timeout", lease)
            report = "ok"
        except headroom.HeadroomError as e:
            report = [type(e).__name__, e.code]
        before = lease.epoch
        c.register(0, "tp", ctas=8, concurrent=2)
        after = {"grid": lease.grid, "headroom": lease.headroom,
                 "epoch_moved": lease.epoch != before,
                 "nccl": lease.nccl_config()}
        print(json.dumps({"connected": c.connected, "gpus": c.gpu_count,
                          "grid": lease.grid, "headroom": b.headroom,
                          "degraded": lease.degraded, "epoch": b.epoch,
                          "sms": b.sms, "b_grid": b.grid,
                          "nccl": b.nccl_config(), "report": report,
                          "after": after}))
        c.close()
    """

    def test_grid_from_dg_mega_moe_sm_headroom(self):
        out, err = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM="10")
        self.assertFalse(out["connected"])
        self.assertEqual(out["gpus"], 0)
        self.assertTrue(out["degraded"])
        self.assertEqual(out["epoch"], 0)
        self.assertEqual(out["headroom"], 10)
        # 132 SMs unless a CUDA driver here says otherwise.
        self.assertEqual(out["b_grid"], out["sms"] - 10)
        if not os.path.exists("/dev/nvidiactl"):
            self.assertEqual(out["sms"], 132)
            self.assertEqual(out["b_grid"], 122)
            self.assertEqual(out["nccl"], {"min_ctas": 1, "max_ctas": 16,
                                           "cga_cluster_size": 1})
        self.assertEqual(out["report"], ["Degraded", -11])
        # The one-time notice names the socket and the budget.
        self.assertIn(self.sock, err)
        self.assertIn("GPU 0 headroom 10, grid", err)

    def test_unset_means_the_policy_floor(self):
        out, _ = self.run_degraded()
        self.assertTrue(out["degraded"])
        self.assertEqual(out["headroom"], 2)
        self.assertEqual(out["b_grid"], out["sms"] - 2)
        self.assertEqual(out["nccl"]["cga_cluster_size"], 1)
        self.assertGreaterEqual(out["nccl"]["max_ctas"], 1)

    def test_zero_needs_the_explicit_full_grid(self):
        out, _ = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM="0")
        self.assertEqual(out["headroom"], 2)
        out, err = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM="0",
                                     HEADROOM_ALLOW_FULL_GRID="1")
        self.assertEqual(out["headroom"], 0)
        self.assertEqual(out["b_grid"], out["sms"])
        self.assertIn("FULL GRID", err)
        # NCCL stays capped.
        self.assertEqual(out["nccl"]["cga_cluster_size"], 1)

    def test_budget_follows_registered_footprints(self):
        out, _ = self.run_degraded()
        after = out["after"]
        self.assertTrue(after["epoch_moved"])
        if not os.path.exists("/dev/nvidiactl"):
            # 8 CTAs x 2 at cluster 2: 32 SMs, the default ceiling.
            self.assertEqual(after["headroom"], 32)
            self.assertEqual(after["grid"], 100)
            self.assertEqual(after["nccl"]["max_ctas"], 8)
        self.assertGreater(after["headroom"], out["headroom"])

    def test_nccl_fields_from_the_environment(self):
        # Smaller caps than the policy's are taken; a CGA size is always 1.
        out, _ = self.run_degraded(DG_MEGA_MOE_SM_HEADROOM="4",
                                   NCCL_MAX_CTAS="8", NCCL_CGA_CLUSTER_SIZE="4")
        self.assertEqual(out["headroom"], 4)
        self.assertEqual(out["nccl"], {"min_ctas": 1, "max_ctas": 8,
                                       "cga_cluster_size": 1})


class TestMoeWithoutTorch(unittest.TestCase):
    """The kernel library's binding, where it was built (nvcc present)."""

    def setUp(self):
        if not os.path.exists(os.path.join(hrtest.LIBDIR,
                                           "libheadroom_moe.so")):
            self.skipTest("libheadroom_moe.so not built here (no nvcc)")
        headroom.load_moe_library()

    def test_declared(self):
        lib = headroom.load_moe_library()
        for name, (restype, argtypes) in _lib._MOE_PROTOTYPES.items():
            if name in _lib._MOE_OPTIONAL and not _lib.has_symbol(lib, name):
                continue                  # a library built before it
            self.assertEqual(getattr(lib, name).argtypes, argtypes, name)
        self.assertTrue(_lib.has_symbol(lib, "hr_moe_ep_create"))
        self.assertFalse(_lib.has_symbol(lib, "hr_moe_no_such_function"))

    def test_bad_shape_is_refused_before_the_gpu(self):
        with self.assertRaises(headroom.InvalidArgument):
            headroom.Moe(experts=8, hidden=100, inter=512, topk=2,
                         max_tokens=16, device=0)
        with self.assertRaises(headroom.InvalidArgument):
            headroom.Moe(experts=0, hidden=256, inter=512, topk=2,
                         max_tokens=16, device=0)

    def test_bounded_sync_checks_its_arguments_first(self):
        # No context, or a negative bound: refused before any CUDA call,
        # so this holds on a machine without a GPU too.
        lib = headroom.load_moe_library()
        self.assertEqual(lib.hr_moe_sync_timeout(None, 10), _lib.HR_EINVAL)
        self.assertEqual(lib.hr_moe_sync_timeout(None, 0), _lib.HR_EINVAL)
        self.assertEqual(lib.hr_moe_sync_timeout(None, -1), _lib.HR_EINVAL)

    def test_create_on_this_machine(self):
        try:
            m = headroom.Moe(experts=8, hidden=256, inter=512, topk=2,
                             max_tokens=16, device=0)
        except (headroom.NoGPU, headroom.Unsupported) as e:
            # Without a GPU (CI): a clean error, not a crash.
            self.assertIn(e.code, (-20, -14))
            return
        with m:
            self.assertGreater(m.sms, 0)
            self.assertGreater(m.workspace_bytes, 0)
            self.assertIsNone(m.last_failure())
            m.sync()                        # nothing launched: no error
        with self.assertRaises(headroom.InvalidArgument):
            m.sms


if __name__ == "__main__":
    unittest.main()
