"""The oslo commands from Python.

``python -m oslo ARGS`` runs the oslo command line (generate, embed, train,
merge, reshard, inspect) and the console scripts ``oslo`` and ``oslo-run``
(pyproject.toml) run the command and the launcher. The wheel bundles both
binaries in this folder (cmake/OsloWheel.cmake); a package built against an
installed oslo (bindings/python) finds them on PATH instead. The process is
replaced by the binary (exec), so its exit status, signals and output are
the command's own.
"""

import os
import shutil
import sys
import sysconfig


def _exec(name):
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, name)
    if not os.access(path, os.X_OK):
        # Not this environment's scripts folder: its console script of the
        # same name would exec this module again.
        scripts = os.path.realpath(sysconfig.get_path("scripts"))
        dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
                if d and os.path.realpath(d) != scripts]
        path = shutil.which(name, path=os.pathsep.join(dirs))
    if path is None:
        sys.exit(f"{name}: not bundled in {here} and not on PATH "
                 "(pip install . at oslo's root builds a wheel with it)")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path] + sys.argv[1:])


def main():
    """The oslo command line, with this process's arguments."""
    _exec("oslo")


def run():
    """oslo-run, the launcher of the ranks of one node, with this process's arguments."""
    _exec("oslo-run")


if __name__ == "__main__":
    main()
