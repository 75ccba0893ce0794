"""Download every file `make install` needs into one folder, for an install with no network (air-gapped GPU nodes).

make wheelhouse WHEELHOUSE=wheels [EXTRAS=dev,vllm] [TORCH=torch==2.13.0] [WHEEL_PYTHON=3.12] [WHEEL_PLATFORM=...]
python scripts/wheelhouse.py --dest wheels --extras dev,vllm --python_version 3.12 --platform manylinux_2_35_x86_64

Then, on the node: `make install WHEELHOUSE=wheels EXTRAS=dev,vllm` (pip reads only that folder). Prints the number
of files and their size, and how much of it is torch with what it requires (drgrpo/setup/wheelhouse.py).
"""

import argparse
import shlex

from drgrpo.core.errors import run_main
from drgrpo.setup.wheelhouse import build_wheelhouse, folder_size, torch_closure

GB = 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", required=True, help="the wheelhouse folder (created)")
    parser.add_argument("--torch", default="torch==2.13.0", help="the TORCH line of `make install`")
    parser.add_argument("--extras", default="dev", help="the EXTRAS of `make install`")
    parser.add_argument("--python_version", help="the target Python (e.g. 3.12); default: this one")
    parser.add_argument("--platform", help="the target platform tag (manylinux_2_35_x86_64; vLLM needs 2_31 or newer)")
    parser.add_argument("--no_deps", default="", help="pinned wheels `make install` installs with --no-deps")
    args = parser.parse_args()
    extras = [extra for extra in args.extras.split(",") if extra]
    report, plan = build_wheelhouse(
        args.dest,
        shlex.split(args.torch),
        extras,
        python_version=args.python_version,
        platform=args.platform,
        no_deps=shlex.split(args.no_deps),
    )
    total = folder_size(args.dest)
    torch_part = folder_size(args.dest, torch_closure(report))
    print(
        f"wheelhouse {args.dest}: {len(plan.wheels)} wheels + {len(plan.sdists)} sdists ({', '.join(plan.sdists)}), "
        f"{total / GB:.2f} GB; torch with what it requires (CUDA libraries, triton): {torch_part / GB:.2f} GB, the "
        f"rest (what the project needs beyond torch): {(total - torch_part) / GB:.2f} GB"
    )
    print(f"install it with no network: make install WHEELHOUSE={args.dest} EXTRAS={args.extras}")
    return 0


if __name__ == "__main__":
    run_main(main)
