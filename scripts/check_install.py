"""Check that a GPU install resolves to a supported stack, without installing anything (pip's resolver in dry-run).

make check-install [TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"] [EXTRAS=dev,vllm]
python scripts/check_install.py --pip_args "torch==2.13.0" --extras dev,vllm
python scripts/check_install.py --report report.json     # check a saved `pip install --dry-run --report` instead

Checks vLLM against the range TRL supports, torch against the release asked for, and the requirements vLLM, torch,
transformers, TRL and this project state on each other (drgrpo/setup/install_check.py). Exits 1 on a problem.
"""

import argparse
import json
import shlex
from pathlib import Path

from drgrpo.core.errors import run_main
from drgrpo.setup.install_check import check_report, format_versions, resolve, torch_request, trl_vllm_range

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
    if problems:
        print("check-install: FAILED\n" + "\n".join(f"- {problem}" for problem in problems))
        return 1
    print(f"check-install: OK (vLLM within TRL's supported {vllm_range[0]}-{vllm_range[1]}; versions consistent)")
    return 0


if __name__ == "__main__":
    run_main(main)
