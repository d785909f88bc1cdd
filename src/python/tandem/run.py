"""tandemrun, the launcher installed with the tandem package: `tandemrun ...` and
`python -m tandem.run ...` start the same binary (tandem/bin/tandemrun) with the same
arguments. Python workers run under this interpreter unless TANDEM_PYTHON says otherwise.
See docs/tandemrun.md."""

import os
import sys

_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tandemrun")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    if not os.access(_BINARY, os.X_OK):
        sys.exit(f"tandemrun: {_BINARY} is missing or not executable: reinstall tandem "
                 "(pip install --force-reinstall .)")
    os.environ.setdefault("TANDEM_PYTHON", sys.executable)
    os.execv(_BINARY, [_BINARY, *args])


if __name__ == "__main__":
    main()
