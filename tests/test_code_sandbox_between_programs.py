"""Nothing carries from one sandboxed program to the next (issue 41, the fourth red-team): not the pid counter, not
/tmp's inode counter or the work folder's name, and not a hidden test case from the code reward's programs to the
Python tool's. Each test failed on the sandbox before issue 41: the runner's pid namespace and /tmp outlived its
programs (a program that started k threads told the next one k through `getpid()`; `/tmp/<n>` told it how many had
run), and the tool ran in the code reward's very runners.

The programs here are benign (a few threads, a few files, one sleeping child) and run under the sandbox's own
limits (2 s of CPU each): bounded by construction.
"""

from __future__ import annotations

import json

import pytest
from conftest import skip_unless_required

from drgrpo.algorithm.rollout.arguments import ToolArguments
from drgrpo.algorithm.rollout.python_tool import build_python_tool
from rewards import RewardArguments, get_reward_funcs
from rewards.code import CodeRewardArguments, NamespacesUnavailable
from rewards.code.sandbox import Sandbox, SandboxLimits

# What a program can learn of what ran before it, without /proc: its pid, its threads' ids, where it runs, its
# folder's and files' inode numbers, what /tmp and its folder hold.
LOOK = """
import json, os, threading
seen = {"pid": os.getpid(), "thread": threading.get_native_id(), "cwd": os.getcwd(), "tmp": sorted(os.listdir("/tmp"))}
seen["files"] = sorted(os.listdir("."))
seen["inodes"] = [os.stat(".").st_ino, os.stat("main.py").st_ino]
probe = open("probe", "w")
seen["new_inode"] = os.fstat(probe.fileno()).st_ino
probe.close()
os.unlink("probe")
print(json.dumps(seen))
"""

# A program that tries to leave a number behind through each of those: threads and processes (the pid counter),
# files made and deleted (the inode counter), files left in its folder and in /tmp, a child that outlives it.
LEAVE = """
import os, threading, time
threads = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(7)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i in range(5):
    if os.fork() == 0:
        os._exit(0)
    os.wait()
for i in range(9):
    open(f"f{i}", "w").close()
    os.unlink(f"f{i}")
open("left.txt", "w").write("613")
try:
    open("/tmp/left.txt", "w").write("613")
except OSError:
    pass
if os.fork() == 0:
    time.sleep(30)
print("left")
"""


def _sandbox_or_skip(sandbox: Sandbox) -> Sandbox:
    try:
        sandbox.start()
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
    return sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(1, SandboxLimits(timeout=2.0)) as sandbox:
        yield _sandbox_or_skip(sandbox)


def look(sandbox: Sandbox) -> dict:
    result = sandbox.run(LOOK)
    assert result.status == "ok", result
    return json.loads(result.text)


def test_a_program_sees_the_same_pids_inodes_and_folders_whatever_ran_before(sandbox):
    first = look(sandbox)
    assert sandbox.run(LEAVE).text == "left\n"
    after = look(sandbox)
    assert after == first, (first, after)
    # Its own pid namespace, where it is not the init (pid 1 keeps signals from inside the namespace away).
    assert first["pid"] == 2 and first["thread"] == 2
    # Its own /tmp, holding only its work folder, whose name counts nothing; the folder holds only the program.
    assert first["tmp"] == ["work"] and first["cwd"] == "/tmp/work" and first["files"] == ["main.py"]


def test_the_same_holds_across_runners_and_after_a_timeout(sandbox):
    first = look(sandbox)
    threads = "import threading\nfor _ in range(5):\n    threading.Thread(target=lambda: None).start()\n"
    spin = sandbox.run(threads + "while True: pass\n")
    assert spin.status == "timeout", spin
    assert look(sandbox) == first
    with Sandbox(2, SandboxLimits(timeout=2.0)) as other:
        _sandbox_or_skip(other)
        results = other.run_many([(LEAVE, "")] * 2 + [(LOOK, "")] * 2)
        assert [json.loads(r.text) for r in results[2:]] == [first, first]


def test_the_tool_never_runs_where_the_code_reward_ran_and_sees_no_hidden_test(tmp_path):
    """With default settings the tool and the `code` reward asked for the same sandbox: a graded program saw the hidden
    test input and the tool's next program printed it. Now they have runners of their own, and no channel above
    carries the hidden input from a graded program to a tool program."""
    try:
        (reward,) = get_reward_funcs(["code"], RewardArguments(code_timeout=2.0, code_num_workers=1))
        tool = build_python_tool(ToolArguments(python_tool=True, tool_timeout=2.0, tool_num_workers=1))
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
    assert tool.sandbox is not reward.func.sandbox
    reward.func.sandbox.start()
    assert not set(tool.sandbox.pids) & set(reward.func.sandbox.pids)
    # The graded program reads its hidden input and leaves it in every place it can (see LEAVE), then answers.
    smuggler = (
        "import os, sys, threading, time\n"
        "n = int(sys.stdin.read())\n"
        "for _ in range(n % 50):\n    threading.Thread(target=time.sleep, args=(0.001,)).start()\n"
        "open('hidden.txt', 'w').write(str(n))\n"
        "if os.fork() == 0:\n    time.sleep(30)\n"
        "print(n + 1)\n"
    )
    tests = [{"input": "613\n", "output": "614\n"}, {"input": "402\n", "output": "403\n"}]
    (score,) = reward(completions=[f"```python\n{smuggler}```"], verification_info=[tests])
    assert score == 1.0
    (observation,) = tool.run_many([LOOK + "print(sorted(os.listdir('/tmp/work')), os.getpid() % 50)\n"])
    assert "613" not in observation.output and "402" not in observation.output, observation
    assert "hidden.txt" not in observation.output
    assert observation.output.splitlines()[-1] == "['main.py'] 2"


def test_the_tool_and_the_code_reward_get_distinct_sandboxes_even_with_equal_limits():
    """The settings under which the two asked for one key: the tool's timeout equal to the code reward's."""
    code = CodeRewardArguments()
    try:
        settings = ToolArguments(python_tool=True, tool_timeout=code.code_timeout, tool_num_workers=1)
        tool = build_python_tool(settings, code)
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
    (reward,) = get_reward_funcs(["code"], RewardArguments(code_num_workers=1))
    assert tool.sandbox is not reward.func.sandbox
