/* A minimal KVM guest, run inside `sluice run --allow-kvm` by tests/integration/sandbox_kvm.sh:
 * creates a VM with one page of memory and one vCPU in real mode, runs
 *     mov al, 0x2a ; out 0x10, al ; hlt
 * and checks the exits (an I/O exit on port 0x10 carrying 0x2a, then a HLT exit). Prints what it
 * saw and exits 0; 2 when /dev/kvm cannot be opened (the errno is printed: ENOENT without
 * --allow-kvm), 1 on any other failure. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "kvm_probe: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(void)
{
	static const uint8_t code[] = {0xb0, 0x2a, 0xe6, 0x10, 0xf4}; /* mov al,42; out 0x10,al; hlt */
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) {
		printf("open /dev/kvm: %s\n", errno == ENOENT ? "ENOENT" : strerror(errno));
		return 2;
	}
	if (ioctl(kvm, KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
		return fail("KVM_GET_API_VERSION");
	int vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		return fail("KVM_CREATE_VM");
	uint8_t *mem = mmap(NULL, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return fail("mmap");
	memcpy(mem, code, sizeof code);
	struct kvm_userspace_memory_region region = {
	        .slot = 0, .guest_phys_addr = 0x1000, .memory_size = 0x1000, .userspace_addr = (uintptr_t)mem};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		return fail("KVM_SET_USER_MEMORY_REGION");
	int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (vcpu < 0)
		return fail("KVM_CREATE_VCPU");
	int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (run_size < (int)sizeof(struct kvm_run))
		return fail("KVM_GET_VCPU_MMAP_SIZE");
	struct kvm_run *run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
	if (run == MAP_FAILED)
		return fail("mmap kvm_run");
	struct kvm_sregs sregs;
	if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0)
		return fail("KVM_GET_SREGS");
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0)
		return fail("KVM_SET_SREGS");
	struct kvm_regs regs = {.rip = 0x1000, .rflags = 0x2};
	if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0)
		return fail("KVM_SET_REGS");

	int saw_io = 0;
	for (int i = 0; i < 16; i++) {
		if (ioctl(vcpu, KVM_RUN, 0) < 0)
			return fail("KVM_RUN");
		switch (run->exit_reason) {
		case KVM_EXIT_IO:
			if (run->io.direction != KVM_EXIT_IO_OUT || run->io.port != 0x10 || run->io.size != 1) {
				fprintf(stderr, "kvm_probe: unexpected I/O exit (port 0x%x)\n", run->io.port);
				return 1;
			}
			printf("io-out port=0x%x value=%u\n", run->io.port, *((uint8_t *)run + run->io.data_offset));
			saw_io = 1;
			break;
		case KVM_EXIT_HLT:
			printf("hlt\n");
			return saw_io ? 0 : 1;
		default:
			fprintf(stderr, "kvm_probe: unexpected exit reason %u\n", run->exit_reason);
			return 1;
		}
	}
	fprintf(stderr, "kvm_probe: no HLT after 16 exits\n");
	return 1;
}
