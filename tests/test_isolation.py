"""The suite survives native code: a test marked `embedded` runs in a child process, so a segfault
there fails that one test, naming the signal, and every other test still runs and reports."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_segfault_in_an_embedded_test_fails_that_test_and_the_suite_goes_on(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_native_crash="""
        import os
        import signal

        import pytest


        @pytest.mark.embedded
        def test_dies_of_a_fault():
            os.kill(os.getpid(), signal.SIGSEGV)


        @pytest.mark.embedded
        def test_runs_in_a_child_and_passes():
            assert os.environ.get("DIAGNOSIS_TEST_CHILD_REPORTS")


        @pytest.mark.embedded
        def test_fails_in_a_child():
            assert sum([1, 1]) == 3


        def test_runs_after_the_crash_in_this_process():
            assert not os.environ.get("DIAGNOSIS_TEST_CHILD_REPORTS")
    """)
    result = pytester.runpytest_subprocess("-p", "tests.support.isolation", "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_dies_of_a_fault*", "*died of SIGSEGV*"])
    result.stdout.fnmatch_lines(["*FAILED*test_fails_in_a_child*assert 2 == 3*"])
