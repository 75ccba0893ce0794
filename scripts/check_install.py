"""Check that a GPU install resolves to a supported stack, without installing anything (pip's resolver in dry-run).

make check-install [TORCH="torch==2.13.0"] [CHECK_EXTRAS=dev,vllm] [CHECK_ARGS="vllm==0.30.0"]
python scripts/check_install.py --pip_args "torch==2.13.0" --extras dev,vllm
python scripts/check_install.py --report report.json     # check a saved `pip install --dry-run --report` instead

Checks vLLM against the range TRL supports, torch against the release asked for, the requirements vLLM, torch,
transformers, TRL and this project state on each other, and that torch, torchvision and vLLM are builds for one CUDA
major version (drgrpo/setup/install_check.py). Prints the NVIDIA driver that CUDA version needs. Exits 1 on a problem.
"""

import argparse
import json
import shlex
from pathlib import Path

from drgrpo.core.errors import run_main
from drgrpo.setup.install_check import (
    check_report,
    cuda_summary,
    format_versions,
    resolve,
    torch_request,
    trl_vllm_range,
)

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pip_args", default="torch==2.13.0", help="the TORCH line of `make install`, plus any pins")
    parser.add_argument("--extras", default="dev,vllm", help="the EXTRAS of `make install`")
    parser.add_argument("--report", help="a saved pip installation report to check instead of resolving")
    args = parser.parse_args()
    pip_args = shlex.split(args.pip_args)
    extras = [extra for extra in args.extras.split(",") if extra]
    vllm_range = trl_vllm_range()
    if args.report:
        report = json.loads(Path(args.report).read_text())
    else:
        print(f"resolving (dry run): pip install {args.pip_args} -e .[{','.join(extras)}] ...", flush=True)
        try:
            report = resolve(pip_args, extras, ROOT)
        except RuntimeError as error:
            print(f"check-install: FAILED\n{error}")
            return 1
    problems = check_report(report, vllm_range=vllm_range, torch_requirement=torch_request(pip_args), extras=extras)
    print(f"resolved: {format_versions(report)}")
    print(f"CUDA builds: {cuda_summary(report)}")
    if problems:
        print("check-install: FAILED\n" + "\n".join(f"- {problem}" for problem in problems))
        return 1
    supported = f"{vllm_range[0]}-{vllm_range[1]}"
    print(f"check-install: OK (vLLM within TRL's supported {supported}; versions and CUDA builds consistent)")
    return 0


if __name__ == "__main__":
    run_main(main)
