"""The banner's sandbox line: one sentence saying why sandbox skills can't run and what to do."""

from __future__ import annotations

from skillfleet.banner import REASON_CHARS, sandbox_line

CHAIN = (
    "/dev/kvm is present but Hyperlight could not run a micro-VM: RuntimeError: Failed to "
    "create sandbox: failed to load Wasm runtime: Internal Hyperlight VM error: Initialize error"
)


def test_a_micro_vm_that_failed_to_start_is_said_without_its_exception_chain():
    line = sandbox_line(CHAIN)
    assert line.startswith(
        "  sandbox:     off: /dev/kvm is present but Hyperlight could not run a micro-VM, so "
        "sandbox skills can't run here;\n"
    )
    assert "RuntimeError" not in line and "Wasm" not in line
    assert line.endswith("to run them in containers (the sandbox log has the details).")


def test_a_host_without_kvm_is_told_what_to_do_and_no_log_is_named_when_no_worker_ran():
    line = sandbox_line("Hyperlight needs KVM, and this server has no /dev/kvm.", logged=False)
    assert "off: Hyperlight needs KVM, and this server has no /dev/kvm, so sandbox" in line
    assert "run `skillfleet worker sandbox` on an x86_64 host with KVM, or set" in line
    assert "log" not in line and line.endswith("to run them in containers.")


def test_a_long_reason_is_cut():
    line = sandbox_line("x" * 1000)
    first = line.splitlines()[0]
    assert "x" * (REASON_CHARS - 1) + "…, so sandbox" in first and "x" * REASON_CHARS not in first
