#!/usr/bin/env python3
"""Exits 0 when this machine's /dev/kvm opens and makes a VM (KVM_CREATE_VM); else says why, exits 1."""
import fcntl
import os
import sys

KVM_CREATE_VM = 0xAE01
try:
    fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    try:
        os.close(fcntl.ioctl(fd, KVM_CREATE_VM, 0))
    finally:
        os.close(fd)
except OSError as e:
    print(f"/dev/kvm: {e.strerror}" + (" (KVM_CREATE_VM)" if e.filename is None else ""))
    sys.exit(1)
