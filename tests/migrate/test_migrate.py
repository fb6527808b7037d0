"""tools/migrate-0.3.py on real inputs (tests/migrate/CMakeLists.txt).

    test_migrate.py SOURCE_DIR CC CXX

1. fixtures/train_0.2.c, a training program of oslo 0.2, does not compile
   against the 0.3 header (so the rest means something); migrated, it is
   byte for byte fixtures/train_0.3.c (reviewed by hand), compiles against
   the 0.3 header with -std=c99 -pedantic -Wall -Wextra -Werror, as C and
   as C++, and a second run changes nothing (exit 0).
2. fixtures/hand_0.2.c: each construct the tool cannot rewrite is reported
   as FILE:LINE: (exit 1).
3. The tree's C and C++ programs that use the training API (already
   migrated: tests/bindings/c_cases.cpp, tests/models/test_model_prepack.cpp,
   tools/oslo/cmd_train.cpp) and every C program under examples/ are left
   unchanged, and the examples without a report.
"""
import os
import shutil
import subprocess
import sys
import tempfile

SRC, CC, CXX = sys.argv[1:4]
TOOL = os.path.join(SRC, "tools", "migrate-0.3.py")
FIX = os.path.join(SRC, "tests", "migrate", "fixtures")
INCLUDE = os.path.join(SRC, "include")
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed += 1


def migrate(*paths):
    return subprocess.run([sys.executable, TOOL, *paths], capture_output=True, text=True)


def compiles(path, cxx=False, quiet=False):
    cmd = ([CXX, "-x", "c++", "-std=c++17"] if cxx else [CC, "-std=c99"]) + [
        "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", INCLUDE, path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and not quiet:
        print(r.stderr[-2000:])
    return r.returncode == 0


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


with tempfile.TemporaryDirectory() as tmp:
    # 1. A 0.2 program, migrated.
    prog = os.path.join(tmp, "train.c")
    shutil.copy(os.path.join(FIX, "train_0.2.c"), prog)
    check(not compiles(prog, quiet=True), "the 0.2 program does not compile against the 0.3 header")
    r = migrate(prog)
    check(r.returncode == 0 and r.stdout == "", "migrated without a report: " + r.stdout)
    want = read(os.path.join(FIX, "train_0.3.c"))
    got = read(prog)
    check(got == want, "the migrated program is fixtures/train_0.3.c")
    if got != want:
        import difflib
        print("".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                           "train_0.3.c", "migrated")))
    check(compiles(prog), "the migrated program compiles against the 0.3 header (C99)")
    check(compiles(prog, cxx=True), "the migrated program compiles against the 0.3 header (C++)")
    r = migrate(prog)
    check(r.returncode == 0 and read(prog) == got, "a second run changes nothing")

    # 2. What needs a hand: named, with its line, and exit status 1.
    hand = os.path.join(tmp, "hand.c")
    shutil.copy(os.path.join(FIX, "hand_0.2.c"), hand)
    before = read(hand)
    r = migrate(hand)
    lines = r.stdout.splitlines()
    check(r.returncode == 1, "hand_0.2.c: exit status 1")
    for line, needle in ((7, "o->zero_stage"), (10, "third argument"),
                         (15, "oslo_optimizer_pipeline_stats(opt"),
                         (21, "oslo_optimizer_options_init(..., 3)"),
                         (26, "z.micro_batches")):
        check(any(l.startswith("%s:%d: " % (hand, line)) and needle in l for l in lines),
              "hand_0.2.c:%d reported (%s)" % (line, needle))
    check(len(lines) == 5, "hand_0.2.c: 5 reports, got %d" % len(lines))
    # Only the call with NULL options is rewritten.
    check(read(hand) == before.replace("oslo_optimizer_create(m, NULL, out)",
                                       "oslo_optimizer_create(m, NULL, NULL, out)"),
          "hand_0.2.c: only what the tool can do is rewritten")

    # 3. The tree's programs.
    tree = ["tests/bindings/c_cases.cpp", "tests/models/test_model_prepack.cpp",
            "tools/oslo/cmd_train.cpp"]
    examples = []
    for d, _, files in os.walk(os.path.join(SRC, "examples")):
        examples += [os.path.relpath(os.path.join(d, f), SRC) for f in files
                     if f.endswith((".c", ".cpp", ".h"))]
    check(len(examples) > 0, "examples/ has C programs")
    for rel in tree + sorted(examples):
        copy = os.path.join(tmp, rel.replace("/", "_"))
        shutil.copy(os.path.join(SRC, rel), copy)
        r = migrate(copy)
        check(read(copy) == read(os.path.join(SRC, rel)), rel + ": unchanged")
        if rel in examples:
            check(r.returncode == 0, rel + ": no report " + r.stdout)

print("migrate: %s" % ("FAILED" if failed else "passed"))
sys.exit(1 if failed else 0)
