"""Exec a command under the seccomp filter systemd installs for MemoryDenyWriteExecute=yes.

``python -m tests.integration._mdwe_exec PROG ARGS...`` installs the filter, checks that it
bites (a W+X anonymous mapping must fail), then execs PROG. systemd 252's filter
(src/shared/seccomp-util.c, seccomp_memory_deny_write_execute) refuses with EPERM:
mmap with PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect adding PROT_EXEC to anything, and
shmat with SHM_EXEC. Newer systemd may use the kernel's PR_SET_MDWE instead, which is
looser (mprotect of an already executable mapping is allowed), so passing this is enough.

Exit status 97: this kernel or architecture cannot install the filter (the test skips).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import struct
import sys

# <linux/audit.h> architectures and syscall numbers (mmap, mprotect, pkey_mprotect, shmat).
_ARCHES = {
    "x86_64": (0xC000003E, 9, 10, 329, 30),
    "aarch64": (0xC00000B7, 222, 226, 288, 196),
}
_PROT_WRITE, _PROT_EXEC, _SHM_EXEC = 0x2, 0x4, 0o100000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
# BPF opcodes: load word absolute, jump if equal, jump if bits set, and-immediate, return.
_LD, _JEQ, _JSET, _AND, _RET = 0x20, 0x15, 0x45, 0x54, 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG2 = 0, 4, 16 + 2 * 8  # struct seccomp_data, little endian


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]  # the ctypes API


def _program(arch: int, nr_mmap: int, nr_mprotect: int, nr_pkey: int, nr_shmat: int) -> bytes:
    deny = _RET_ERRNO | errno.EPERM
    ins = [
        (_LD, 0, 0, _OFF_ARCH),  # 0
        (_JEQ, 0, 14, arch),  # 1: foreign ABI -> allow (SystemCallArchitectures refuses it)
        (_LD, 0, 0, _OFF_NR),  # 2
        (_JEQ, 4, 0, nr_mmap),  # 3 -> 8
        (_JEQ, 6, 0, nr_mprotect),  # 4 -> 11
        (_JEQ, 5, 0, nr_pkey),  # 5 -> 11
        (_JEQ, 6, 0, nr_shmat),  # 6 -> 13
        (_RET, 0, 0, _RET_ALLOW),  # 7
        (_LD, 0, 0, _OFF_ARG2),  # 8: mmap prot
        (_AND, 0, 0, _PROT_WRITE | _PROT_EXEC),  # 9
        (_JEQ, 4, 5, _PROT_WRITE | _PROT_EXEC),  # 10: -> 15 deny, else 16 allow
        (_LD, 0, 0, _OFF_ARG2),  # 11: mprotect prot
        (_JSET, 2, 3, _PROT_EXEC),  # 12: -> 15 deny, else 16 allow
        (_LD, 0, 0, _OFF_ARG2),  # 13: shmat flags
        (_JSET, 0, 1, _SHM_EXEC),  # 14: -> 15 deny, else 16 allow
        (_RET, 0, 0, deny),  # 15
        (_RET, 0, 0, _RET_ALLOW),  # 16
    ]
    return b"".join(struct.pack("<HBBI", *i) for i in ins)


def install() -> None:
    """Install the filter on this process (inherited across exec); exit 97 if impossible."""
    spec = _ARCHES.get(platform.machine())
    if spec is None:
        sys.exit(97)
    code = _program(*spec)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        sys.exit(97)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(97)


def bites() -> bool:
    """True if a W+X mapping and an mprotect adding PROT_EXEC are both refused."""
    try:
        m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except PermissionError:
        pass
    else:
        m.close()
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    refused = libc.mprotect(addr, 4096, mmap.PROT_READ | mmap.PROT_EXEC) != 0
    refused = refused and ctypes.get_errno() == errno.EPERM
    return refused


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m tests.integration._mdwe_exec PROG [ARGS...]")
    install()
    if not bites():
        sys.exit("seccomp filter installed but a W+X mapping still succeeded")
    os.execvp(argv[0], argv)  # noqa: S606  # exec keeps the filter; no shell involved


if __name__ == "__main__":
    main(sys.argv[1:])
